package edged_test

import (
	"context"
	"fmt"
	"net/http"
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
