package edged_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/edge/edged"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/poll"
)

// ingestClient is a client of the edge's ingest API with the publisher
// token.
func (r *runningEdge) ingestClient() rivorav1connect.IngestServiceClient {
	return rivorav1connect.NewIngestServiceClient(http.DefaultClient, r.api.URL, connect.WithInterceptors(auth.Bearer(publisherToken)))
}

// A PublishBatch is all or nothing, at a full edge too. Cut off from the
// cell, an edge of --max-buffer 1 MiB takes batches of 130 events until
// one does not fit: that one is refused (resource_exhausted, reason
// EDGE_BUFFER_FULL) and none of its events is stored, where a probe found
// 116 of its 130 stored and later delivered. The buffer then holds
// exactly the acknowledged events, at most --max-buffer, still takes
// what fits, and once the cell is reached forwards exactly those.
func TestEdgeRefusesABatchItHasNoRoomForWhole(t *testing.T) {
	ctx := context.Background()
	_, cpServer := startControlPlane(t)
	leaf := freeAddr(t)
	const maxBuffer = 1 << 20
	e := startEdge(t, edged.Config{
		Name: "edge-batch", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + leaf}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: maxBuffer, BufferMaxAge: time.Hour,
	})
	poll.True(t, "the edge applied the control plane's config", 10*time.Second, func() bool { return e.Healthy() == nil })
	client := e.ingestClient()
	payload := []byte(`"` + strings.Repeat("x", 1000) + `"`)
	batch := func(round int) *rivorav1.PublishBatchRequest {
		req := &rivorav1.PublishBatchRequest{}
		for i := range 130 {
			req.Events = append(req.Events, &rivorav1.PublishRequest{
				DestinationId: "orders", CustomerId: "acme", LaneKey: fmt.Sprintf("user-%d", i), Type: "order.created", Payload: payload,
				IdempotencyKey: fmt.Sprintf("round-%d-%d", round, i),
			})
		}
		return req
	}
	// A batch larger than the whole buffer would be refused however
	// empty it is: said so (REQUEST_TOO_LARGE, which the SDKs do not
	// retry), not as a full buffer.
	huge := &rivorav1.PublishBatchRequest{}
	for i := range 5 {
		huge.Events = append(huge.Events, &rivorav1.PublishRequest{
			DestinationId: "orders", CustomerId: "acme", LaneKey: fmt.Sprintf("user-%d", i), Type: "order.created",
			Payload: []byte(`"` + strings.Repeat("x", 250_000) + `"`),
		})
	}
	if _, err := client.PublishBatch(ctx, connect.NewRequest(huge)); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "holds even when empty") {
		t.Fatalf("a batch of 1.25 MB into an empty 1 MiB buffer: %v; want resource_exhausted saying it never fits", err)
	} else if _, ok := errkind.Info(err, ingest.RequestTooLargeReason); !ok {
		t.Fatalf("a batch larger than the buffer: %v carries no %s ErrorInfo", err, ingest.RequestTooLargeReason)
	}
	acked := uint64(0)
	var refusal error
	for round := 0; refusal == nil; round++ {
		if round > 50 {
			t.Fatalf("%d events acknowledged with --max-buffer 1 MiB and no batch refused", acked)
		}
		if _, refusal = client.PublishBatch(ctx, connect.NewRequest(batch(round))); refusal == nil {
			acked += 130
		}
	}
	refusedAt := time.Now()
	t.Logf("after %d events: %v", acked, refusal)
	poll.True(t, "the edge sampled its buffer after the refusal", 10*time.Second, func() bool { return e.Status().At.After(refusedAt) })
	if st := e.Status().Buffer; st.Events != acked || st.Bytes > maxBuffer {
		t.Fatalf("the buffer holds %d events (%d bytes) after %d were acknowledged and a batch was refused: want exactly those, under --max-buffer %d", st.Events, st.Bytes, acked, maxBuffer)
	}
	if connect.CodeOf(refusal) != connect.CodeResourceExhausted || !strings.Contains(refusal.Error(), "EDGE_BUFFER of edge edge-batch is full") ||
		!strings.Contains(refusal.Error(), "nothing in this batch was stored") {
		t.Fatalf("a batch the full buffer has no room for: %v; want resource_exhausted, the buffer full, nothing of the batch stored", refusal)
	}
	// It says what the admission counted, which the buffer's last sample
	// (up to fullFresh old) may not have caught up with.
	counted := regexp.MustCompile(`no room for this request's (\d+) bytes beside the (\d+) it holds or is storing`).FindStringSubmatch(refusal.Error())
	if counted == nil {
		t.Fatalf("the full buffer's refusal %q does not say what the admission counted", refusal)
	}
	need, _ := strconv.ParseInt(counted[1], 10, 64)
	held, _ := strconv.ParseInt(counted[2], 10, 64)
	if held > maxBuffer || need+held <= maxBuffer {
		t.Fatalf("the refusal counts %d bytes held and %d needed, with --max-buffer %d: they should not fit, and what is held should", held, need, maxBuffer)
	}
	if md, ok := errkind.Info(refusal, edge.BufferFullReason); !ok || md["edge"] != "edge-batch" {
		t.Fatalf("the full buffer's refusal carries ErrorInfo %v (%t); want reason %s naming the edge", md, ok, edge.BufferFullReason)
	}
	if name, ok := sdk.EdgeBufferFull(refusal); !ok || name != "edge-batch" {
		t.Fatalf("sdk.EdgeBufferFull of the full buffer's refusal: %q, %t", name, ok)
	}
	// A smaller request that fits is still taken.
	if _, err := e.publish(publisherToken, "user-small", []byte(`{}`)); err != nil {
		t.Fatalf("one small event into the room the refused batch left: %v", err)
	}
	acked++

	// The link comes up: the cell takes exactly the acknowledged events.
	cell := startCell(t, leaf, t.TempDir())
	addSourceOnceReachable(t, cell.JetStream(), "edge-batch")
	ingestStream, err := cell.JetStream().Stream(ctx, lanes.IngestStream)
	if err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the cell took every acknowledged event and the edge's buffer emptied", 60*time.Second, func() bool {
		info, err := ingestStream.Info(ctx)
		return err == nil && info.State.Msgs == acked && e.Status().Buffer.Events == 0
	})
	if info, err := ingestStream.Info(ctx); err != nil || info.State.Msgs != acked {
		t.Fatalf("the cell holds %+v (%v) of the edge's events, want the %d acknowledged", info.State, err, acked)
	}
}

// A destination, a subscription for a test event, or a subscription a
// fan-out would match, created on the cell while the edge is cut off from
// its control plane, is not in the edge's config. While the edge knows
// its config is stale (a silent cut: nothing heard for a few seconds) it
// refuses such a publish unavailable, saying since when it has not heard
// from its control plane: invalid_argument or not_found are not retried
// by the SDKs, and a fan-out answered with no route is stored nowhere.
// Fresh again, it answers as before.
func TestEdgeWithAStaleConfigRefusesWhatItDoesNotKnowUnavailable(t *testing.T) {
	ctx := context.Background()
	cp, cpServer := startControlPlane(t)
	cp.keepalive.Store(int64(200 * time.Millisecond))
	e := startEdge(t, edged.Config{
		Name: "edge-stale", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + freeAddr(t)}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: time.Hour,
	})
	poll.True(t, "the edge applied the control plane's config", 10*time.Second, func() bool { return e.Healthy() == nil })
	client := e.ingestClient()
	publish := func(req *rivorav1.PublishRequest) (*rivorav1.PublishResponse, error) {
		resp, err := client.Publish(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	event := func(dest, sub string) *rivorav1.PublishRequest {
		return &rivorav1.PublishRequest{DestinationId: dest, SubscriptionId: sub, CustomerId: "acme", LaneKey: "user-1", Type: "order.created", Payload: []byte(`{}`)}
	}
	unknown, fanout, test := event("d4", ""), event("", ""), event("", "sub_new")

	// Fresh (keepalives every 200 ms): what the edge does not know does
	// not exist.
	if _, err := publish(unknown); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("fresh, an unknown destination: %v, want invalid_argument", err)
	}
	if resp, err := publish(fanout); err != nil || !resp.GetFannedOut() || len(resp.GetRoutes()) != 0 {
		t.Fatalf("fresh, a fan-out matching no subscription: %v, %v; want fanned out to no route", resp, err)
	}

	// A silent cut: the watch stays open, nothing comes.
	cp.silent.Store(true)
	const note = "edge edge-stale has not heard from its control plane since"
	var err error
	poll.True(t, "an unknown destination is refused unavailable, saying when the edge last heard from its control plane", 20*time.Second, func() bool {
		_, err = publish(unknown)
		return connect.CodeOf(err) == connect.CodeUnavailable
	})
	t.Logf("stale, an unknown destination: %v", err)
	if !strings.Contains(err.Error(), `destination "d4" is not in the config this edge has`) || !strings.Contains(err.Error(), note) ||
		!strings.Contains(err.Error(), "publish to the cell") {
		t.Fatalf("stale, an unknown destination: %v; want it said that it may have been created since, with the edge's note", err)
	}
	if _, err := publish(fanout); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "no subscription matching this event") || !strings.Contains(err.Error(), note) {
		t.Fatalf("stale, a fan-out matching no subscription: %v; want unavailable with the edge's note", err)
	}
	if _, err := publish(test); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), note) {
		t.Fatalf("stale, a test event to an unknown subscription: %v; want unavailable with the edge's note", err)
	}
	if _, err := client.PublishBatch(ctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{event("orders", ""), unknown}})); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "events[1]") {
		t.Fatalf("stale, a batch with an unknown destination: %v; want unavailable naming events[1]", err)
	}
	if _, err := publish(event("orders", "")); err != nil {
		t.Fatalf("stale, a destination the edge knows: %v", err)
	}

	// Heard from again: fresh.
	cp.silent.Store(false)
	poll.True(t, "an unknown destination is invalid_argument again once the edge hears from its control plane", 10*time.Second, func() bool {
		_, err = publish(unknown)
		return connect.CodeOf(err) == connect.CodeInvalidArgument
	})
}

// A --max-buffer over what JetStream may store on the data dir's disk
// (three quarters of its free space) is refused at start, naming
// --max-buffer, the free disk and the most it may be: JetStream's own
// refusal ("insufficient storage resources available", code 10047) said
// none of that.
func TestEdgeRefusesAMaxBufferOverTheDisk(t *testing.T) {
	_, cpServer := startControlPlane(t)
	_, err := edged.New(context.Background(), edged.Config{
		Name: "edge-disk", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + freeAddr(t)}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 1 << 60, BufferMaxAge: time.Hour, Keys: auth.NewKeys(auth.CellTokenOf(cellSecret)),
	}, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("an edge with --max-buffer 1 EiB started")
	}
	t.Log(err)
	if !errors.Is(err, edged.ErrMaxBufferTooLarge) {
		t.Fatalf("--max-buffer 1 EiB: %v; want ErrMaxBufferTooLarge", err)
	}
	for _, want := range []string{"--max-buffer 1.0 EiB", "free", "give --max-buffer at most ", "MiB", "1.33 times"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
}
