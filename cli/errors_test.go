package cli

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/rig"
)

// A hint is added only when the server's message does not already say
// what to do.
func TestHintIsNotRepeated(t *testing.T) {
	hints := map[connect.Code]string{connect.CodeFailedPrecondition: "pass --force to archive its pending events as dead letters and delete it"}
	cases := []struct {
		server   string
		withHint bool
	}{
		{`destination "orders" has 3 pending events`, true},
		{`destination "orders" has 3 pending events; wait for them, or delete with --force to archive them as dead letters`, false},
		{"see `rivoractl lanes list`", false},
	}
	for _, c := range cases {
		err := callFailed("delete destination", connect.NewError(connect.CodeFailedPrecondition, errors.New(c.server)), hints)
		got := describe(err, "http://127.0.0.1:8080", "")
		if strings.Contains(got, "pass --force") != c.withHint {
			t.Errorf("server says %q: rivoractl prints %q; hint added: %v, want %v", c.server, got, !c.withHint, c.withHint)
		}
	}
}

// An unavailable server's message that already says to retry is not told
// to "try again shortly" on top; one that does not is.
func TestUnavailableSaysRetryOnce(t *testing.T) {
	cases := []struct {
		server string
		added  bool
	}{
		{"partition 3 has no owner right now; retry (destination \"d2\" is in it; see `rivoractl agents list`)", false},
		{"the archive did not answer; try again in a minute", false},
		{"no agent is connected", true},
	}
	for _, c := range cases {
		got := describe(callFailed("list lanes", connect.NewError(connect.CodeUnavailable, errors.New(c.server)), nil), "http://127.0.0.1:7300", "")
		if strings.Contains(got, "try again shortly") != c.added {
			t.Errorf("server says %q: rivoractl prints %q; want \"try again shortly\" added: %v", c.server, got, c.added)
		}
	}
}

// A follower's answer names the leader: rivoractl says to send the call
// there, never to try the follower again.
func TestFollowerNamesTheLeader(t *testing.T) {
	follower := errkind.WithInfo(errkind.Errorf(errkind.Unavailable, "not the leader; the leader is http://127.0.0.1:7302"), errkind.NotLeaderReason, map[string]string{"leader": "http://127.0.0.1:7302"})
	got := describe(callFailed("list lanes", errkind.AsConnect(follower), nil), "http://127.0.0.1:7301", "")
	if !strings.Contains(got, "use --server http://127.0.0.1:7302") || strings.Contains(got, "try again") {
		t.Errorf("rivoractl prints %q; want it to say to use --server http://127.0.0.1:7302, not to try again", got)
	}
}

// A request over the server's read limit is refused by connect before
// Rivora reads it, as resource_exhausted: rivoractl says it is too large
// and what bounds it, not that the server is overloaded.
func TestTooLargeRequestSaysSo(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewIngestServiceHandler(rivorav1connect.UnimplementedIngestServiceHandler{}, connect.WithReadMaxBytes(1024)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	var out, errOut strings.Builder
	args := []string{"rivoractl", "--server", srv.URL, "--token", "rv_test", "publish", "--destination", "orders", "--customer", "acme", "--lane", "u1", "--type", "t", "--data", `{"x":"` + strings.Repeat("a", 4096) + `"}`}
	if code := RunContext(context.Background(), args, strings.NewReader(""), &out, &errOut); code == 0 {
		t.Fatalf("publish of 4 KiB to a server reading 1 KiB: exit 0, out %q", out.String())
	}
	if got := errOut.String(); !strings.Contains(got, "the request is larger than Rivora at "+srv.URL+" reads") || !strings.Contains(got, "--max-payload") {
		t.Errorf("rivoractl said %q; want that the request is too large, naming --max-payload", got)
	}
}

// A create over a cap the cell keeps (here --max-destinations) is
// refused as a limit reached, which waiting does not lift, not shown as
// the server failing or busy.
func TestLimitReachedIsNotAServerError(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true, ControlPlane: func(c *controlplane.Config) { c.MaxDestinations = 1 }})
	create := func(id string) result {
		return run(t, d.URL, "", "--token", d.AdminToken, "destinations", "create", id, "--url", "https://example.com/"+id)
	}
	mustSucceed(t, create("one"))
	r := create("two")
	assertFailure(t, r, exitError, "refused: limit reached (trying again will not help): the cell has 1 destinations, the most --max-destinations allows (1)")
	if strings.Contains(r.stderr, "server error") || strings.Contains(r.stderr, "busy") {
		t.Errorf("a limit reached reads as the server failing or busy: %q", r.stderr)
	}
}

// Back-pressure (resource_exhausted without a limit's reason: a busy
// server, an agent's disk low) says the server is busy and to try again
// later, once.
func TestBackPressureSaysBusy(t *testing.T) {
	for _, c := range []struct {
		err   error
		added bool
	}{
		{errkind.Errorf(errkind.Exhausted, "this server is at --max-inflight-requests; retry with back-off"), false},
		{errkind.WithInfo(errkind.Errorf(errkind.Exhausted, "edge e1's buffer is full: it accepts again as the cell takes events"), "EDGE_BUFFER_FULL", nil), true},
	} {
		got := describe(callFailed("publish", errkind.AsConnect(c.err), nil), "http://127.0.0.1:7300", "")
		if !strings.Contains(got, "server busy (Rivora at http://127.0.0.1:7300): ") || strings.Contains(got, "limit") || strings.Contains(got, "server error") {
			t.Errorf("server says %q: rivoractl prints %q; want it called busy", c.err, got)
		}
		if strings.Contains(got, "try again later") != c.added {
			t.Errorf("server says %q: rivoractl prints %q; want \"try again later\" added: %v", c.err, got, c.added)
		}
	}
}

// --server naming something that is not Rivora's API (the console's
// page, another server on the port) is said to be so, with what answered
// and what to check, not reported as a server error; a 404 is still
// Connect's (an agent that does not serve the call).
func TestNotRivorasAPISaysSo(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /console/", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "<html>console</html>") })
	mux.HandleFunc("POST /rivora.v1.IngestService/Publish", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		server string
		args   []string
		want   string
	}{
		{srv.URL + "/console/", []string{"destinations", "list"}, "the server at " + srv.URL + "/console does not answer as Rivora's API (HTTP 405, content type text/plain): Rivora serves its API at the root of its address, not under /console: use --server " + srv.URL},
		{srv.URL, []string{"publish", "-d", "orders", "-c", "acme", "-l", "u1", "-t", "t", "--data", "{}"}, "the server at " + srv.URL + " does not answer as Rivora's API (HTTP 200, content type text/plain): is --server (or RIVORA_SERVER) the address of `rivora dev`"},
		{srv.URL, []string{"destinations", "list"}, "the server at " + srv.URL + " does not serve this call (404 Not Found)"},
	} {
		r := run(t, c.server, "", append([]string{"--token", "rv_test"}, c.args...)...)
		assertFailure(t, r, exitError, c.want)
		if strings.Contains(r.stderr, "server error") {
			t.Errorf("--server %s %v: %q reads as a server error", c.server, c.args, r.stderr)
		}
	}
}
