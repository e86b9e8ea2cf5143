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

// countingArchive answers every replay as a dry run counting 3 dead
// letters of the destination asked for.
type countingArchive struct {
	rivorav1connect.UnimplementedArchiveServiceHandler
}

func (countingArchive) Replay(_ context.Context, req *connect.Request[rivorav1.ReplayRequest], stream *connect.ServerStream[rivorav1.ReplayResponse]) error {
	dest := req.Msg.GetFilter().GetDestinationId()
	return stream.Send(&rivorav1.ReplayResponse{Total: 3, Done: true, Counts: []*rivorav1.DeadLetterCount{{DestinationId: dest, CustomerId: "acme", Count: 3}}})
}

// TestReplayDryRunSaysTheDestinationIsGone: a dry run's count stands, and
// when the destination is not registered (deleted, its dead letters kept)
// it also says the replay itself would be refused, and how to fix it;
// for a registered destination it says nothing more.
func TestReplayDryRunSaysTheDestinationIsGone(t *testing.T) {
	f, fake := newFake()
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewArchiveServiceHandler(countingArchive{}))
	mux.Handle("/", fake)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f.dests["orders"] = &rivorav1.Destination{Id: "orders", Url: "https://example.com/hooks"}

	gone := mustSucceed(t, run(t, srv.URL, "", "replay", "--destination", "deleted", "--dry-run"))
	for _, want := range []string{"3 match", `destination "deleted" is not registered`, "rivoractl destinations create deleted"} {
		if !strings.Contains(gone.stdout, want) {
			t.Errorf("dry run for an unregistered destination lacks %q:\n%s", want, gone.stdout)
		}
	}
	kept := mustSucceed(t, run(t, srv.URL, "", "replay", "--destination", "orders", "--dry-run"))
	if !strings.Contains(kept.stdout, "3 match") || strings.Contains(kept.stdout, "not registered") {
		t.Errorf("dry run for a registered destination:\n%s\nwant its count and no warning", kept.stdout)
	}
}
