package cli

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// countingArchive answers every replay as a dry run counting 3 dead
// letters of the destination asked for; one named "deleted" would be
// refused, as the agent says of a destination not registered.
type countingArchive struct {
	rivorav1connect.UnimplementedArchiveServiceHandler
}

func (countingArchive) Replay(_ context.Context, req *connect.Request[rivorav1.ReplayRequest], stream *connect.ServerStream[rivorav1.ReplayResponse]) error {
	dest := req.Msg.GetFilter().GetDestinationId()
	if dest == "conflicts" && !req.Msg.GetDryRun() {
		return replayTwoConflicts(stream)
	}
	if dest == "breaks" && !req.Msg.GetDryRun() {
		// The agent serving it goes away after its first report.
		if err := stream.Send(&rivorav1.ReplayResponse{Total: 20, Replayed: 10}); err != nil {
			return err
		}
		// Its process dies: the response ends mid-stream.
		panic(http.ErrAbortHandler)
	}
	if dest == "shared" {
		return replaySharedWithDeletedSubscriptions(req.Msg, stream)
	}
	if dest == "stopped" && !req.Msg.GetDryRun() {
		// The agent's ingest failed midway (its server shutting down),
		// as the replay engine tells it.
		if err := stream.Send(&rivorav1.ReplayResponse{Total: 20, Replayed: 10}); err != nil {
			return err
		}
		return connect.NewError(connect.CodeUnavailable, errors.New("replay stopped with 12 of 20 dead letters done (12 replayed): store event: nats: connection closed; to resume, try again: the same `rivoractl replay` skips what was already replayed (each dead letter re-accepted is marked)"))
	}
	if dest == "raced" && !req.Msg.GetDryRun() {
		// Another replay of the same dead letters ran at the same time.
		for _, resp := range []*rivorav1.ReplayResponse{
			{Total: 200, Skipped: 1},
			{Total: 200, Replayed: 61, Skipped: 1, ReplayedByAnother: 138, Done: true},
		} {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		return nil
	}
	resp := &rivorav1.ReplayResponse{Total: 3, Done: true, Counts: []*rivorav1.DeadLetterCount{{DestinationId: dest, CustomerId: "acme", Count: 3}}}
	if dest == "deleted" {
		resp.Refused = `destination "deleted" is not registered; create it before replaying its dead letters`
	}
	return stream.Send(resp)
}

// TestReplayDryRunSaysWhyTheReplayWouldBeRefused: a dry run's count
// stands, and when the agent says the replay itself would be refused (a
// deleted destination or subscription, its dead letters kept) it says so
// and fails as the replay would (exit 1), in a table and in JSON;
// otherwise it says nothing more and succeeds.
func TestReplayDryRunSaysWhyTheReplayWouldBeRefused(t *testing.T) {
	srv := startCountingArchive(t)

	gone := run(t, srv.URL, "", "replay", "--destination", "deleted", "--dry-run")
	assertFailure(t, gone, 1, `a replay would be refused: destination "deleted" is not registered`)
	for _, want := range []string{"3 match", `a replay would be refused: destination "deleted" is not registered`} {
		if !strings.Contains(gone.stdout, want) {
			t.Errorf("dry run for an unregistered destination lacks %q:\n%s", want, gone.stdout)
		}
	}
	real := run(t, srv.URL, "", "replay", "--destination", "shared")
	dry := run(t, srv.URL, "", "replay", "--destination", "shared", "--dry-run")
	if real.code != 1 || dry.code != real.code {
		t.Errorf("a refused replay exits %d, its dry run %d: want both 1", real.code, dry.code)
	}
	asJSON := run(t, srv.URL, "", "replay", "--destination", "deleted", "--dry-run", "-o", "json")
	assertFailure(t, asJSON, 1, "a replay would be refused")
	if !strings.Contains(asJSON.stdout, `"refused"`) {
		t.Errorf("dry run -o json of a refused replay:\n%s\nwant the report on stdout", asJSON.stdout)
	}
	kept := mustSucceed(t, run(t, srv.URL, "", "replay", "--destination", "orders", "--dry-run"))
	if !strings.Contains(kept.stdout, "3 match") || strings.Contains(kept.stdout, "refused") {
		t.Errorf("dry run for a registered destination:\n%s\nwant its count and no warning", kept.stdout)
	}
}

// replaySharedWithDeletedSubscriptions answers a replay of destination
// "shared" as the agent does when 3 of its 5 dead letters were routed by
// 2 subscriptions deleted since: refused unless the request leaves them
// in the archive.
func replaySharedWithDeletedSubscriptions(req *rivorav1.ReplayRequest, stream *connect.ServerStream[rivorav1.ReplayResponse]) error {
	resp := &rivorav1.ReplayResponse{
		Total: 5, Done: true, Counts: []*rivorav1.DeadLetterCount{{DestinationId: "shared", CustomerId: "globex", Count: 2}},
		DeletedSubscriptionDeadLetters: 3, DeletedSubscriptions: []string{"sub_a", "sub_b"}, DeletedSubscriptionCount: 2,
	}
	const refused = "3 of the 5 dead letters to replay were routed by 2 subscriptions (sub_a, sub_b), which were deleted: …"
	switch {
	case req.GetDryRun() && !req.GetSkipDeletedSubscriptions():
		resp.Refused = refused
	case !req.GetDryRun() && !req.GetSkipDeletedSubscriptions():
		return connect.NewError(connect.CodeFailedPrecondition, errors.New(refused))
	case !req.GetDryRun():
		resp.Replayed = 2
	}
	return stream.Send(resp)
}

// TestReplaySkipsDeletedSubscriptionsWhenAsked: --skip-deleted-subscriptions
// reaches the agent; a dry run says first (before its table) what a
// replay would refuse, or leave in the archive, and for which
// subscriptions; the replay says how many it left.
func TestReplaySkipsDeletedSubscriptionsWhenAsked(t *testing.T) {
	srv := startCountingArchive(t)

	refused := run(t, srv.URL, "", "replay", "--destination", "shared", "--dry-run")
	assertFailure(t, refused, 1, "a replay would be refused: 3 of the 5 dead letters")
	if !strings.HasPrefix(refused.stdout, "a replay would be refused: 3 of the 5 dead letters") || !strings.Contains(refused.stdout, "globex") {
		t.Errorf("dry run of a replay that would be refused:\n%s\nwant the refusal first, then the table", refused.stdout)
	}
	left := mustSucceed(t, run(t, srv.URL, "", "replay", "--destination", "shared", "--dry-run", "--skip-deleted-subscriptions"))
	want := "3 dead letters would be left in the archive: routed by 2 subscriptions (sub_a, sub_b), deleted since.\n"
	if !strings.HasPrefix(left.stdout, want) || strings.Contains(left.stdout, "refused") || !strings.Contains(left.stdout, "5 match") {
		t.Errorf("dry run leaving them:\n%s\nwant it to start with %q, then the count", left.stdout, want)
	}
	done := mustSucceed(t, run(t, srv.URL, "", "replay", "--destination", "shared", "--skip-deleted-subscriptions"))
	for _, want := range []string{"Replayed 2 of 5", "Left 3 dead letters in the archive: routed by 2 subscriptions (sub_a, sub_b)"} {
		if !strings.Contains(done.stdout, want) {
			t.Errorf("replay leaving them:\n%s\nlacks %q", done.stdout, want)
		}
	}
}

// replayTwoConflicts answers a replay of 3 dead letters, two of them
// idempotency conflicts renamed, in three progress reports.
func replayTwoConflicts(stream *connect.ServerStream[rivorav1.ReplayResponse]) error {
	for _, resp := range []*rivorav1.ReplayResponse{
		{Total: 3, Replayed: 2, Renamed: []*rivorav1.ReplayRename{{EventId: "old-1", ReplayedAs: "new-1"}}},
		{Total: 3, Replayed: 3, Renamed: []*rivorav1.ReplayRename{{EventId: "old-2", ReplayedAs: "new-2"}}},
		{Total: 3, Replayed: 3, Done: true}, // the final report repeats the last batch's
	} {
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
	return nil
}

// TestReplayListsTheConflictsItRenamed: every rename the progress
// reports carried is listed at the end (and in -o json), not only the
// last report's.
func TestReplayListsTheConflictsItRenamed(t *testing.T) {
	srv := startCountingArchive(t)

	r := mustSucceed(t, run(t, srv.URL, "", "replay", "--destination", "conflicts"))
	for _, want := range []string{"Replayed 3 of 3", "2 of them died as idempotency conflicts", "old-1 replayed as new-1", "old-2 replayed as new-2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("replay output lacks %q:\n%s", want, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, "replay: 3/3"); n != 1 {
		t.Errorf("the progress line 3/3 shown %d times, want once:\n%s", n, r.stdout)
	}
	j := mustSucceed(t, run(t, srv.URL, "", "replay", "--destination", "conflicts", "-o", "json"))
	if !strings.Contains(j.stdout, `"old-1"`) || !strings.Contains(j.stdout, `"new-2"`) {
		t.Errorf("replay -o json lacks a rename:\n%s", j.stdout)
	}
}

// TestReplayThatStopsSaysItResumes: a replay whose stream breaks after
// it began (the control plane serving it died) says so, how far it got
// and that running it again resumes.
func TestReplayThatStopsSaysItResumes(t *testing.T) {
	srv := startCountingArchive(t)
	r := run(t, srv.URL, "", "replay", "--destination", "breaks")
	assertFailure(t, r, exitError, "10 of 20 done before it stopped; run the same command again to resume")
	if !strings.Contains(r.stderr, "lost the connection to the control plane") || strings.Contains(r.stderr, "protocol error") {
		t.Errorf("stderr %q: want the cause to read that the connection was lost, not a protocol error", r.stderr)
	}
}

// TestReplaySaysWhatAnotherReplayHandled: the dead letters another replay
// running at the same time handled are counted, in the progress, the
// summary and -o json: replayed, skipped and theirs add up to the total.
func TestReplaySaysWhatAnotherReplayHandled(t *testing.T) {
	srv := startCountingArchive(t)
	r := mustSucceed(t, run(t, srv.URL, "", "replay", "--destination", "raced"))
	for _, want := range []string{"replay: 200/200 (61 replayed, 1 skipped, 138 by another replay)", "Replayed 61 of 200", "138 already replayed by another replay running at the same time"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("replay output lacks %q:\n%s", want, r.stdout)
		}
	}
	j := mustSucceed(t, run(t, srv.URL, "", "replay", "--destination", "raced", "-o", "json"))
	if !strings.Contains(j.stdout, `"replayedByAnother": "138"`) {
		t.Errorf("replay -o json lacks replayedByAnother:\n%s", j.stdout)
	}
}

// TestReplayStoppedByItsAgentSaysHowToResume: the agent's account of a
// replay that its ingest stopped is shown as it is, with no advice of
// its own on top (a publisher's retry, or the hint said twice).
func TestReplayStoppedByItsAgentSaysHowToResume(t *testing.T) {
	srv := startCountingArchive(t)
	r := run(t, srv.URL, "", "replay", "--destination", "stopped")
	assertFailure(t, r, exitError, "12 of 20 dead letters done (12 replayed): store event: nats: connection closed; to resume, try again: the same `rivoractl replay` skips what was already replayed")
	if strings.Count(r.stderr, "resume") != 1 || strings.Contains(r.stderr, "idempotency") || strings.Contains(r.stderr, "try again shortly") {
		t.Errorf("stderr %q: want how to resume said once, nothing else to do", r.stderr)
	}
}

// startCountingArchive serves countingArchive over HTTP until the test ends.
func startCountingArchive(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewArchiveServiceHandler(countingArchive{}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
