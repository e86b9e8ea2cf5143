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

// emptyArchive has no dead letters, but for customer "many": one listed
// of more that match.
type emptyArchive struct {
	rivorav1connect.UnimplementedArchiveServiceHandler
}

func (emptyArchive) ListDeadLetters(_ context.Context, req *connect.Request[rivorav1.ListDeadLettersRequest]) (*connect.Response[rivorav1.ListDeadLettersResponse], error) {
	if req.Msg.GetFilter().GetCustomerId() == "many" {
		return connect.NewResponse(&rivorav1.ListDeadLettersResponse{Truncated: true, DeadLetters: []*rivorav1.DeadLetter{{Event: &rivorav1.Event{EventId: "e1", CustomerId: "many"}}}}), nil
	}
	return connect.NewResponse(&rivorav1.ListDeadLettersResponse{}), nil
}

func (emptyArchive) DeadLetterStats(context.Context, *connect.Request[rivorav1.DeadLetterStatsRequest]) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
	return connect.NewResponse(&rivorav1.DeadLetterStatsResponse{}), nil
}

func (emptyArchive) Replay(_ context.Context, _ *connect.Request[rivorav1.ReplayRequest], stream *connect.ServerStream[rivorav1.ReplayResponse]) error {
	return stream.Send(&rivorav1.ReplayResponse{Done: true})
}

// ListAudit: the fake's audit log is empty.
func (f *fakeRivora) ListAudit(context.Context, *connect.Request[rivorav1.ListAuditRequest]) (*connect.Response[rivorav1.ListAuditResponse], error) {
	return connect.NewResponse(&rivorav1.ListAuditResponse{}), nil
}

// TestAnEmptyListNamesAnUnknownDestination: `dlq list` and `audit`
// filtered by a destination that is not configured (a typo, most often)
// come back empty, as they must (a deleted destination keeps both), and
// say on stderr that no such destination is configured; for a configured
// one they say nothing more. The JSON on stdout stays an empty array.
func TestAnEmptyListNamesAnUnknownDestination(t *testing.T) {
	_, fake := newFake()
	archivePath, archive := rivorav1connect.NewArchiveServiceHandler(emptyArchive{})
	mux := http.NewServeMux()
	mux.Handle(archivePath, archive)
	mux.Handle("/", fake)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mustSucceed(t, run(t, srv.URL, "", "destinations", "create", "orders", "--url", "https://example.com/hook"))

	for _, verb := range [][]string{{"dlq", "list"}, {"audit"}} {
		typo := mustSucceed(t, run(t, srv.URL, "", append(verb, "--destination", "ordres")...))
		if !strings.Contains(typo.stdout, "match.") || !strings.Contains(typo.stderr, `no destination "ordres" is configured`) {
			t.Errorf("%v for an unknown destination:\nstdout %q\nstderr %q\nwant an empty answer and the note", verb, typo.stdout, typo.stderr)
		}
		known := mustSucceed(t, run(t, srv.URL, "", append(verb, "--destination", "orders")...))
		if !strings.Contains(known.stdout, "match.") || known.stderr != "" {
			t.Errorf("%v for a configured destination:\nstdout %q\nstderr %q\nwant an empty answer and no note", verb, known.stdout, known.stderr)
		}
		asJSON := mustSucceed(t, run(t, srv.URL, "", append(verb, "--destination", "ordres", "-o", "json")...))
		if strings.TrimSpace(asJSON.stdout) != "[]" || !strings.Contains(asJSON.stderr, "is configured") {
			t.Errorf("%v -o json for an unknown destination:\nstdout %q\nstderr %q\nwant [] and the note on stderr", verb, asJSON.stdout, asJSON.stderr)
		}
	}
	// A list cut at its limit says so on stderr in JSON too.
	cut := mustSucceed(t, run(t, srv.URL, "", "dlq", "list", "--customer", "many", "-o", "json"))
	if !strings.Contains(cut.stdout, `"e1"`) || !strings.Contains(cut.stderr, "more match") {
		t.Errorf("dlq list -o json of a cut list:\nstdout %q\nstderr %q\nwant the array and a note that more match", cut.stdout, cut.stderr)
	}
}

// dlq stats names an unknown destination as dlq list does (it printed an
// empty table alone), and a replay whose filter matches nothing says so
// on stderr, naming the filter (it printed "Replayed 0 of 0" alone).
func TestEmptyStatsAndReplayNameTheirFilter(t *testing.T) {
	_, fake := newFake()
	archivePath, archive := rivorav1connect.NewArchiveServiceHandler(emptyArchive{})
	mux := http.NewServeMux()
	mux.Handle(archivePath, archive)
	mux.Handle("/", fake)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mustSucceed(t, run(t, srv.URL, "", "destinations", "create", "orders", "--url", "https://example.com/hook"))

	for _, args := range [][]string{{"dlq", "stats", "--destination", "nosuch"}, {"dlq", "stats", "--destination", "nosuch", "-o", "json"}} {
		r := mustSucceed(t, run(t, srv.URL, "", args...))
		if !strings.Contains(r.stderr, `note: no destination "nosuch" is configured`) {
			t.Errorf("%v: stderr %q, want the note dlq list prints", args, r.stderr)
		}
	}
	if r := mustSucceed(t, run(t, srv.URL, "", "dlq", "stats", "--destination", "orders")); r.stderr != "" {
		t.Errorf("dlq stats of a configured destination: stderr %q, want no note", r.stderr)
	}

	r := mustSucceed(t, run(t, srv.URL, "", "replay", "--destination", "orders", "--customer", "nosuch"))
	if !strings.Contains(r.stdout, "Replayed 0 of 0") || !strings.Contains(r.stderr, "note: no dead letters match --destination orders --customer nosuch: nothing to replay") {
		t.Errorf("replay matching nothing:\nstdout %q\nstderr %q\nwant the count and a note naming the filter", r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "is configured") {
		t.Errorf("replay of a configured destination says it is not: %q", r.stderr)
	}
	r = mustSucceed(t, run(t, srv.URL, "", "replay", "--destination", "nosuch"))
	if !strings.Contains(r.stderr, "no dead letters match --destination nosuch") || !strings.Contains(r.stderr, `no destination "nosuch" is configured`) {
		t.Errorf("replay of an unknown destination: stderr %q, want both notes", r.stderr)
	}
}
