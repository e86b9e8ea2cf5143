package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// replayedArchive counts 5 dead letters of orders, 3 of them replayed.
type replayedArchive struct {
	rivorav1connect.UnimplementedArchiveServiceHandler
}

func (replayedArchive) DeadLetterStats(context.Context, *connect.Request[rivorav1.DeadLetterStatsRequest]) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
	return connect.NewResponse(&rivorav1.DeadLetterStatsResponse{Total: 5, Replayed: 3, Objects: 1, Counts: []*rivorav1.DeadLetterCount{
		{DestinationId: "orders", CustomerId: "acme", Reason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS, Count: 4, Replayed: 3},
		{DestinationId: "orders", CustomerId: "globex", Reason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS, Count: 1},
	}}), nil
}

// dlq stats says how many of the dead letters it counts a replay handled
// already, per row and overall, as dlq list's REPLAYED column shows them
// (it counted them with the rest, as if still to replay).
func TestDLQStatsCountsTheReplayedApart(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewArchiveServiceHandler(replayedArchive{}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	out := mustSucceed(t, run(t, srv.URL, "", "dlq", "stats")).stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "COUNT  REPLAYED") {
		t.Fatalf("dlq stats:\n%s\nwant a header with REPLAYED, two rows and a total", out)
	}
	for _, row := range []struct{ line, customer, count, replayed string }{{lines[1], "acme", "4", "3"}, {lines[2], "globex", "1", "0"}} {
		f := strings.Fields(row.line)
		if len(f) < 6 || f[1] != row.customer || f[3] != row.count || f[4] != row.replayed {
			t.Errorf("row %q: want %s with count %s, replayed %s", row.line, row.customer, row.count, row.replayed)
		}
	}
	if !strings.HasPrefix(lines[3], "5 dead letters in 1 archive objects, 3 of them handled by a replay already") {
		t.Errorf("last line %q: want the total and how many a replay handled", lines[3])
	}
	asJSON := mustSucceed(t, run(t, srv.URL, "", "dlq", "stats", "-o", "json")).stdout
	if !strings.Contains(asJSON, `"replayed": "3"`) {
		t.Errorf("dlq stats -o json:\n%s\nwant replayed 3", asJSON)
	}
}
