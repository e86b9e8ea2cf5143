package agent_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
)

// A PublishBatch refused for one invalid event says which in an ErrorInfo
// (sdk.InvalidEvent reads it), not in its message alone.
func TestABatchsInvalidEventIsNamedInItsErrorInfo(t *testing.T) {
	t.Parallel()
	ag := startAgent(t, t.TempDir())
	ag.create(destination("orders", "http://127.0.0.1:9/hook", 8))
	ev := func(typ string) *rivorav1.PublishRequest {
		return &rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "u1", Type: typ, Payload: []byte(`{}`)}
	}
	_, err := ag.Ingest.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{
		Events: []*rivorav1.PublishRequest{ev("a.ok"), ev("b.ok"), ev("")},
	}))
	index, ok := sdk.InvalidEvent(err)
	if !ok || index != 2 || !strings.Contains(err.Error(), "events[2]") {
		t.Fatalf("InvalidEvent(%v) = %d, %v; want index 2", err, index, ok)
	}
	if _, ok := sdk.InvalidEvent(connect.NewError(connect.CodeInvalidArgument, err)); ok {
		t.Fatal("InvalidEvent read an index from an error without the detail")
	}
}
