package agent_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/rig"
)

// watchGate holds an agent's Watch of its control plane until opened:
// the agent listens, restarted, before its first config.
type watchGate struct {
	open chan struct{}
}

func (g watchGate) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == rivorav1connect.AgentServiceWatchProcedure {
		select {
		case <-g.open:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A publisher pinned to an agent that restarts calls it before the
// agent has its first config: the call waits for the config (tokens,
// and the destination it publishes to) and is stored, where it was
// refused Unavailable at once (the SDK gave up after ~1.5 s of tries).
// (That the tokens come after the destinations, so that a woken call
// finds its destination, this test does not catch: the gap is
// microseconds here.)
func TestAPublishBeforeARestartedAgentsFirstConfigWaitsForIt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := rig.StartDev(t, dir, rig.Options{})
	p := newPartner(t, nil)
	first.Create(destination("orders", p.URL(), 3))
	first.Stop()
	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	gate := watchGate{open: make(chan struct{})}
	waited := make(chan bool, 1)
	type result struct {
		id  string
		err error
	}
	published := make(chan result, 1)
	rig.StartDev(t, dir, rig.Options{Token: strings.TrimSpace(string(token)), Agent: func(c *agent.Config) {
		c.Transport = gate
		url, keys := c.ControlPlaneURL, c.Keys
		go func() {
			id, err := publishWhenServed(url, strings.TrimSpace(string(token)))
			published <- result{id, err}
		}()
		go func() {
			deadline := time.Now().Add(10 * time.Second)
			for keys.Awaiting() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond) // polling a counter: nothing to await
			}
			waited <- keys.Awaiting() > 0
			close(gate.open)
		}()
	}})
	if !<-waited {
		t.Fatal("no call waited for the restarted agent's first config")
	}
	got := <-published
	if got.err != nil {
		t.Fatalf("a publish that came before the restarted agent's first config: %v; want it stored once the config arrived", got.err)
	}
	p.WaitDelivered(t, []string{got.id}, 10*time.Second)
}

// publishWhenServed publishes one event to orders at url, trying again
// while the agent's API is not served yet (its handlers are registered
// after it starts).
func publishWhenServed(url, token string) (string, error) {
	client := rivorav1connect.NewIngestServiceClient(http.DefaultClient, url, connect.WithInterceptors(auth.Bearer(token)))
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		resp, err := client.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "user-1", Type: "order.created", Payload: []byte(`{}`)}))
		cancel()
		if err == nil {
			return resp.Msg.GetEventId(), nil
		}
		if connect.CodeOf(err) != connect.CodeUnimplemented || time.Now().After(deadline) {
			return "", err
		}
		time.Sleep(5 * time.Millisecond) // not served yet: nothing to await from outside
	}
}
