package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

const refused = "list archive deadletter/: dial tcp 10.0.0.9:9000: connect: connection refused"

// ledgerArchive answers as the cell does while the archive is down: from
// the ledgers, two dead letters of partitions 0-11, partitions 12-15 not
// read; but customer "up" is answered from the archive, as when it is
// reachable.
type ledgerArchive struct {
	rivorav1connect.UnimplementedArchiveServiceHandler
}

var ledgerUnread = []*rivorav1.UnreadLedger{{Partitions: []uint32{12, 13, 14, 15}, Agent: "a3", Reason: "its owner did not answer: unavailable"}}

func ledgerLetter(id string, unarchived bool) *rivorav1.DeadLetter {
	return &rivorav1.DeadLetter{
		Event:  &rivorav1.Event{EventId: id, DestinationId: "orders", CustomerId: "acme", LaneKey: "u1", Payload: []byte(`{"n":1}`)},
		DeadAt: timestamppb.New(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)), Attempts: 1, LastStatus: 400,
		Reason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS, Partition: 3, Unarchived: unarchived,
	}
}

func (ledgerArchive) ListDeadLetters(_ context.Context, req *connect.Request[rivorav1.ListDeadLettersRequest]) (*connect.Response[rivorav1.ListDeadLettersResponse], error) {
	if req.Msg.GetFilter().GetCustomerId() == "up" {
		return connect.NewResponse(&rivorav1.ListDeadLettersResponse{DeadLetters: []*rivorav1.DeadLetter{ledgerLetter("evt-archived", false)}}), nil
	}
	resp := &rivorav1.ListDeadLettersResponse{
		DeadLetters:        []*rivorav1.DeadLetter{ledgerLetter("evt-1", true), ledgerLetter("evt-2", true)},
		ArchiveUnavailable: refused, LedgerPartitions: []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, UnreadLedgers: ledgerUnread,
	}
	if req.Msg.GetLimit() == 1 {
		resp.DeadLetters, resp.Truncated, resp.MoreUnarchived = resp.DeadLetters[:1], true, 1
	}
	if req.Msg.GetFilter().GetCustomerId() == "direct" {
		// As an agent asked directly answers: the partitions it does not
		// hold, without their owner (it has one).
		resp.UnreadLedgers = []*rivorav1.UnreadLedger{{Partitions: []uint32{12, 13, 14, 15}, Reason: notHeldHere}}
	}
	return connect.NewResponse(resp), nil
}

// notHeldHere is an agent's reason for the partitions it does not hold
// (agent/partitions).
const notHeldHere = "not owned by this agent; ask the control plane, which reads every agent's ledgers"

// The partitions an agent asked directly does not hold have an owner,
// elsewhere: they are not said to have none ("(no owner)", as every
// partition named without its agent was).
func TestDLQListDoesNotSayAPartitionHeldElsewhereHasNoOwner(t *testing.T) {
	url := startLedgerArchive(t)
	text := mustSucceed(t, run(t, url, "", "dlq", "list", "--customer", "direct")).stdout
	wantLines(t, "dlq list from one agent's ledgers", text, "not read: partitions 12-15: "+notHeldHere+"; their dead letters are missing here")
	if strings.Contains(text, "no owner") {
		t.Errorf("dlq list says a partition held elsewhere has no owner:\n%s", text)
	}
}

func (ledgerArchive) DeadLetterStats(context.Context, *connect.Request[rivorav1.DeadLetterStatsRequest]) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
	at := timestamppb.New(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	return connect.NewResponse(&rivorav1.DeadLetterStatsResponse{
		Counts: []*rivorav1.DeadLetterCount{{DestinationId: "orders", CustomerId: "acme", Reason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS, Count: 2, Oldest: at, Newest: at}},
		Total:  2, ArchiveUnavailable: refused, LedgerPartitions: []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, UnreadLedgers: ledgerUnread,
	}), nil
}

func (ledgerArchive) GetDeadLetter(context.Context, *connect.Request[rivorav1.GetDeadLetterRequest]) (*connect.Response[rivorav1.GetDeadLetterResponse], error) {
	return connect.NewResponse(&rivorav1.GetDeadLetterResponse{DeadLetter: ledgerLetter("evt-1", true), ArchiveUnavailable: refused}), nil
}

func startLedgerArchive(t *testing.T) string {
	_, fake := newFake()
	path, h := rivorav1connect.NewArchiveServiceHandler(ledgerArchive{})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	mux.Handle("/", fake)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func wantLines(t *testing.T, what, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(out, l) {
			t.Errorf("%s lacks %q:\n%s", what, l, out)
		}
	}
}

// While the archive is unreachable, dlq list says so on its first line,
// lists the ledgers' dead letters with ARCHIVED "not yet", names the
// partitions not read, and says how many more a limit left out; -o json
// keeps stdout an array (unarchived: true) and warns on stderr. From the
// archive, the table is as it always was.
func TestDLQListFromTheLedgersSaysSo(t *testing.T) {
	url := startLedgerArchive(t)
	text := mustSucceed(t, run(t, url, "", "dlq", "list")).stdout
	first, _, _ := strings.Cut(text, "\n")
	if first != "archive not readable ("+refused+"): showing the 2 matching dead letters still waiting in the agents' ledgers; they are archived once it is back (those archived before are listed again then)" {
		t.Errorf("dlq list's first line is %q, want the warning", first)
	}
	wantLines(t, "dlq list from the ledgers", text,
		"not read: partitions 12-15 (agent a3): its owner did not answer: unavailable; their dead letters are missing here",
		"REPLAYED  ARCHIVED  LAST ERROR", "evt-1", "not yet")

	cut := mustSucceed(t, run(t, url, "", "dlq", "list", "--limit", "1")).stdout
	wantLines(t, "dlq list --limit 1 from the ledgers", cut, "showing 1 of the 2 matching dead letters", "(1 more wait in the ledgers: narrow the filter; the ledgers are not paged)")

	asJSON := mustSucceed(t, run(t, url, "", "dlq", "list", "-o", "json"))
	var entries []map[string]any
	if err := json.Unmarshal([]byte(asJSON.stdout), &entries); err != nil || len(entries) != 2 {
		t.Fatalf("dlq list -o json from the ledgers: %v\n%s", err, asJSON.stdout)
	}
	if entries[0]["unarchived"] != true || entries[0]["eventId"] != "evt-1" {
		t.Errorf("dlq list -o json entry %v, want evt-1 with unarchived true", entries[0])
	}
	wantLines(t, "dlq list -o json's stderr", asJSON.stderr, "archive not readable ("+refused+")", "not read: partitions 12-15")

	archived := mustSucceed(t, run(t, url, "", "dlq", "list", "--customer", "up"))
	if strings.Contains(archived.stdout, "ARCHIVED") || strings.Contains(archived.stdout, "archive not readable") || archived.stderr != "" {
		t.Errorf("dlq list from the archive changed:\nstdout %q\nstderr %q", archived.stdout, archived.stderr)
	}
	archivedJSON := mustSucceed(t, run(t, url, "", "dlq", "list", "--customer", "up", "-o", "json")).stdout
	if strings.Contains(archivedJSON, "unarchived") {
		t.Errorf("dlq list -o json from the archive names unarchived:\n%s", archivedJSON)
	}
}

// dlq stats and show from the ledgers say so too, in text and in JSON.
func TestDLQStatsAndShowFromTheLedgersSaySo(t *testing.T) {
	url := startLedgerArchive(t)
	stats := mustSucceed(t, run(t, url, "", "dlq", "stats")).stdout
	if !strings.HasPrefix(stats, "archive not readable ("+refused+"): counting the 2 matching dead letters still waiting in the agents' ledgers") {
		t.Errorf("dlq stats does not begin with the warning:\n%s", stats)
	}
	wantLines(t, "dlq stats from the ledgers", stats, "not read: partitions 12-15 (agent a3)", "2 dead letters waiting in the agents' ledgers (the archive's are counted once it is back)")
	statsJSON := mustSucceed(t, run(t, url, "", "dlq", "stats", "-o", "json"))
	wantLines(t, "dlq stats -o json", statsJSON.stdout, `"archiveUnavailable": "`+refused+`"`, `"unreadLedgers"`, `"ledgerPartitions"`)
	wantLines(t, "dlq stats -o json's stderr", statsJSON.stderr, "archive not readable")

	show := mustSucceed(t, run(t, url, "", "dlq", "show", "evt-1")).stdout
	wantLines(t, "dlq show from a ledger", show,
		"archive not readable ("+refused+"): this dead letter still waits in its partition's ledger",
		"not yet: waits in the ledger of partition 3", `{"n":1}`)
	showJSON := mustSucceed(t, run(t, url, "", "dlq", "show", "evt-1", "-o", "json"))
	wantLines(t, "dlq show -o json from a ledger", showJSON.stdout, `"unarchived": true`, `"archiveUnavailable"`)
	// As list's and stats': the warning on stderr, the object alone on
	// stdout.
	wantLines(t, "dlq show -o json's stderr", showJSON.stderr, "archive not readable ("+refused+"): this dead letter still waits in its partition's ledger")
	if strings.Contains(showJSON.stdout, "archive not readable (") {
		t.Errorf("dlq show -o json's stdout holds the warning:\n%s", showJSON.stdout)
	}

	for _, verb := range []string{"list", "stats"} {
		help := mustSucceed(t, run(t, url, "", "dlq", verb, "--help")).stdout
		wantLines(t, "dlq "+verb+" --help", strings.Join(strings.Fields(help), " "), "While the archive (S3/MinIO) cannot be read, the answer comes from the dead letters still waiting in the agents' ledgers")
	}
}
