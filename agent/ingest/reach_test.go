package ingest_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/cutcell"
	"github.com/rivora/rivora/testkit/poll"
)

// A gateway whose agent is cut off from its NATS peers refuses a
// publish with Unavailable within a few seconds of the cut — once the
// Raft heartbeats stopped — instead of waiting out the caller's deadline,
// and refuses the next ones at once; the side that keeps the quorum
// stores them; after the heal the cut-off agent accepts again. Before the
// cut, a healthy cell refuses nothing.
func TestPublishToACutOffAgentIsRefusedFast(t *testing.T) {
	c := cutcell.Start(t, 3)
	reg := destinations.NewRegistry()
	reg.Replace(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://127.0.0.1:1/hook", Secret: secret}})
	gatewayOn := func(i int) gateway {
		var gw *ingest.Gateway
		// A fresh cluster answers stream creation once its meta leader
		// is elected.
		if err := poll.Check(30*time.Second, 250*time.Millisecond, func() (err error) {
			gw, err = ingest.New(t.Context(), c.Servers[i].JetStream(), reg, ingest.Config{
				Replicas: 3, Partitions: ingest.FixedCount(partitions), Reach: c.Servers[i].Reach(),
			}, slog.New(slog.DiscardHandler))
			return err
		}); err != nil {
			t.Fatalf("gateway on %s: %v", cutcell.Name(i), err)
		}
		t.Cleanup(gw.Close)
		return gateway{gw}
	}
	cut, kept := gatewayOn(0), gatewayOn(1)
	seq := 0
	// publish publishes a new keyed event (as the SDK does) within limit.
	publish := func(gw gateway, limit time.Duration) (time.Duration, error) {
		seq++
		req := valid()
		req.IdempotencyKey = fmt.Sprintf("key-%d", seq)
		ctx, cancel := context.WithTimeout(t.Context(), limit)
		defer cancel()
		start := time.Now()
		_, err := gw.Publish(ctx, connect.NewRequest(req))
		return time.Since(start), err
	}
	refusals := func() float64 { return counter(t, "rivora_ingest_store_unreachable_total") }

	before := refusals()
	for i := range 100 {
		gw := cut
		if i%2 == 1 {
			gw = kept
		}
		if _, err := publish(gw, 10*time.Second); err != nil {
			t.Fatalf("publish %d in a healthy cell: %v", i, err)
		}
	}
	if got := refusals() - before; got != 0 {
		t.Fatalf("a healthy cell refused %v publishes as unreachable", got)
	}

	c.Net.Isolate(cutcell.Name(0))
	took, err := publish(cut, 30*time.Second)
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "cannot reach a quorum of its store") {
		t.Fatalf("publish to the cut-off agent: %v (after %s), want Unavailable: cannot reach a quorum of its store", err, took)
	}
	t.Logf("first publish after the cut refused after %s: %v", took.Round(time.Millisecond), err)
	// Refused while it was writing: the caller must hear that its event
	// may be stored (a retry without its key could store it twice).
	if !strings.Contains(err.Error(), "events may have been stored") {
		t.Errorf("a refusal in the middle of the writes does not say the event may be stored: %v", err)
	}
	// Heartbeats every second, silence judged after 3 s, checked every
	// 250 ms once a write waited 500 ms.
	if limit := 5 * time.Second; took > limit {
		t.Errorf("the first publish after the cut was refused after %s, want within %s", took, limit)
	}
	for range 5 {
		took, err := publish(cut, 30*time.Second)
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("publish to the cut-off agent, known cut off: %v, want Unavailable", err)
		}
		if !strings.Contains(err.Error(), "nothing was stored") {
			t.Errorf("a refusal before any write does not say nothing was stored: %v", err)
		}
		if took > 300*time.Millisecond {
			t.Errorf("a publish to an agent known to be cut off was refused after %s, want at once", took)
		}
	}

	// The side with the quorum stores (once it has its own leader of
	// INGEST, if the cut-off server led it).
	if err := poll.Check(30*time.Second, 100*time.Millisecond, func() error {
		_, err := publish(kept, 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("the side that keeps the quorum does not store: %v", err)
	}

	c.Net.Heal()
	healAt := time.Now()
	if err := poll.Check(30*time.Second, 100*time.Millisecond, func() error {
		_, err := publish(cut, 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("the agent does not accept again after the heal: %v", err)
	}
	t.Logf("accepting again %s after the heal", time.Since(healAt).Round(time.Millisecond))
	st, err := c.Servers[1].JetStream().Stream(t.Context(), lanes.IngestStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs < 102 {
		t.Errorf("INGEST holds %d events, want at least the 102 acknowledged", info.State.Msgs)
	}
}
