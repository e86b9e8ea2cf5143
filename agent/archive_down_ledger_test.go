package agent_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/archive"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// With the archive down, dlq list, stats and show answer from the dead
// letters waiting in the ledgers, marked so and saying why the archive was
// not read, with every filter applied; replay stays refused. Once the
// archive is back and has them, the same calls answer from it, unmarked.
func TestDeadLettersListedFromTheLedgersWhileTheArchiveIsDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	local, err := archive.NewDir(filepath.Join(dir, "archive"))
	if err != nil {
		t.Fatal(err)
	}
	arch := &switchedArchive{Dir: local}
	arch.down.Store(true)
	p := newPartner(t, func(partner.Request) int { return 400 })
	ag := &running{Dev: rig.StartDev(t, dir, rig.Options{Name: agentName, Workers: 4, Agent: func(c *agent.Config) { c.Archive = arch }}), t: t}
	ag.create(destination("refusing", p.URL(), 1), destination("also-refusing", p.URL(), 1))
	ids := map[string]string{
		"acme-1": ag.publish("refusing", "acme", "u1"),
		"acme-2": ag.publish("refusing", "acme", "u1"),
		"beta":   ag.publish("refusing", "beta", "u2"),
		"other":  ag.publish("also-refusing", "acme", "u3"),
	}
	poll.True(t, "four dead letters waiting for the archive", 15*time.Second, func() bool {
		return ag.health("refusing").GetUnarchivedDeadLetters() == 3 && ag.health("also-refusing").GetUnarchivedDeadLetters() == 1
	})
	dlq := rivorav1connect.NewArchiveServiceClient(ag.HTTPClient(), ag.URL, ag.As(ag.AdminToken))

	all := listDLQ(t, dlq, &rivorav1.ListDeadLettersRequest{})
	checkLedgerAnswer(t, "list", all.GetArchiveUnavailable(), all.GetLedgerPartitions(), all.GetUnreadLedgers())
	// Destination by destination, each in the order they died: a lane's
	// in lane order (beta's lane may have gone between).
	got := eventIDs(all.GetDeadLetters())
	if !sameIDs(got, ids["other"], ids["acme-1"], ids["acme-2"], ids["beta"]) || got[0] != ids["other"] || slices.Index(got, ids["acme-1"]) > slices.Index(got, ids["acme-2"]) {
		t.Errorf("listed %v, want also-refusing's, then refusing's in the order they died: %v", got, ids)
	}
	for _, dl := range all.GetDeadLetters() {
		if !dl.GetUnarchived() || len(dl.GetEvent().GetPayload()) != 0 || dl.GetAttempts() != 1 || dl.GetLastStatus() != 400 {
			t.Errorf("listed %v: want it marked unarchived, without payload, 1 attempt, last status 400", dl)
		}
	}
	checkLedgerFilters(t, dlq, ids)

	stats, err := dlq.DeadLetterStats(context.Background(), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "refusing"}}))
	if err != nil {
		t.Fatalf("stats with the archive down: %v", err)
	}
	checkLedgerAnswer(t, "stats", stats.Msg.GetArchiveUnavailable(), stats.Msg.GetLedgerPartitions(), stats.Msg.GetUnreadLedgers())
	if st := stats.Msg; st.GetTotal() != 3 || st.GetObjects() != 0 || len(st.GetCounts()) != 2 {
		t.Errorf("stats of refusing: total %d in %d objects, counts %v; want 3, 0 objects, one count per customer", st.GetTotal(), st.GetObjects(), st.GetCounts())
	}

	show, err := dlq.GetDeadLetter(context.Background(), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: ids["beta"]}))
	if err != nil {
		t.Fatalf("show with the archive down: %v", err)
	}
	if dl := show.Msg.GetDeadLetter(); !dl.GetUnarchived() || !strings.Contains(string(dl.GetEvent().GetPayload()), `"lane":"u2"`) || show.Msg.GetObject() != "" ||
		!strings.Contains(show.Msg.GetArchiveUnavailable(), "connection refused") {
		t.Errorf("show %s with the archive down: %v; want it marked, with its payload, no object, and why the archive was not read", ids["beta"], show.Msg)
	}
	_, err = dlq.GetDeadLetter(context.Background(), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "evt-never-died"}))
	wantCode(t, "show of an event not in the ledgers", err, connect.CodeUnavailable, "connection refused", "no dead letter of event evt-never-died waits in the ledgers read here (read partitions 0-3)")
	wantCode(t, "replay with the archive down", replayDryRun(dlq, "refusing"), connect.CodeUnavailable, "connection refused")

	arch.down.Store(false)
	poll.True(t, "the archive to list the four dead letters", 15*time.Second, func() bool {
		resp, err := dlq.ListDeadLetters(context.Background(), connect.NewRequest(&rivorav1.ListDeadLettersRequest{}))
		return err == nil && resp.Msg.GetArchiveUnavailable() == "" && len(resp.Msg.GetDeadLetters()) == 4
	})
	back := listDLQ(t, dlq, &rivorav1.ListDeadLettersRequest{})
	for _, dl := range back.GetDeadLetters() {
		if dl.GetUnarchived() {
			t.Errorf("from the archive, %s is marked unarchived", dl.GetEvent().GetEventId())
		}
	}
	if len(back.GetLedgerPartitions()) != 0 || back.GetMoreUnarchived() != 0 {
		t.Errorf("an answer from the archive names ledgers: %v", back)
	}
	if got := ag.health("refusing").GetUnarchivedDeadLetters(); got != 0 {
		t.Errorf("UNARCHIVED %d after the archive has them, want 0", got)
	}
}

// checkLedgerFilters: dlq list's filters apply to the ledgers' dead
// letters as to the archive's, and a limit says how many more there are.
func checkLedgerFilters(t *testing.T, dlq rivorav1connect.ArchiveServiceClient, ids map[string]string) {
	t.Helper()
	future := timestamppb.New(time.Now().Add(time.Hour))
	for name, c := range map[string]struct {
		filter *rivorav1.DeadLetterFilter
		want   []string
	}{
		"destination":          {&rivorav1.DeadLetterFilter{DestinationId: "refusing"}, []string{ids["acme-1"], ids["acme-2"], ids["beta"]}},
		"customer":             {&rivorav1.DeadLetterFilter{CustomerId: "beta"}, []string{ids["beta"]}},
		"lane":                 {&rivorav1.DeadLetterFilter{LaneKey: "u3"}, []string{ids["other"]}},
		"reason max_attempts":  {&rivorav1.DeadLetterFilter{Reason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS}, []string{ids["other"], ids["acme-1"], ids["acme-2"], ids["beta"]}},
		"reason window":        {&rivorav1.DeadLetterFilter{Reason: rivorav1.DeadReason_DEAD_REASON_WINDOW}, nil},
		"since an hour ahead":  {&rivorav1.DeadLetterFilter{Since: future}, nil},
		"until an hour ahead":  {&rivorav1.DeadLetterFilter{Until: future, CustomerId: "acme", DestinationId: "refusing"}, []string{ids["acme-1"], ids["acme-2"]}},
		"unknown subscription": {&rivorav1.DeadLetterFilter{SubscriptionId: "sub_0123456789abcdef"}, nil},
	} {
		resp := listDLQ(t, dlq, &rivorav1.ListDeadLettersRequest{Filter: c.filter})
		if got := eventIDs(resp.GetDeadLetters()); !sameIDs(got, c.want...) || resp.GetArchiveUnavailable() == "" {
			t.Errorf("list by %s with the archive down: %v (archive_unavailable %q), want %v", name, got, resp.GetArchiveUnavailable(), c.want)
		}
	}
	cut := listDLQ(t, dlq, &rivorav1.ListDeadLettersRequest{Limit: 1})
	if len(cut.GetDeadLetters()) != 1 || !cut.GetTruncated() || cut.GetMoreUnarchived() != 3 {
		t.Errorf("list --limit 1: %d listed, truncated %v, %d more; want 1, true, 3", len(cut.GetDeadLetters()), cut.GetTruncated(), cut.GetMoreUnarchived())
	}
}

func listDLQ(t *testing.T, dlq rivorav1connect.ArchiveServiceClient, req *rivorav1.ListDeadLettersRequest) *rivorav1.ListDeadLettersResponse {
	t.Helper()
	resp, err := dlq.ListDeadLetters(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("list %v: %v", req, err)
	}
	return resp.Msg
}

// checkLedgerAnswer: an answer from the ledgers says why the archive was
// not read, and that it read every partition's ledger (rig: 4 partitions,
// all on the one agent).
func checkLedgerAnswer(t *testing.T, what, why string, read []uint32, unread []*rivorav1.UnreadLedger) {
	t.Helper()
	if !strings.Contains(why, "connection refused") {
		t.Errorf("%s with the archive down: archive_unavailable %q, want the archive's error", what, why)
	}
	if !slices.Equal(read, []uint32{0, 1, 2, 3}) || len(unread) != 0 {
		t.Errorf("%s with the archive down: ledgers read %v, unread %v; want all 4, none unread", what, read, unread)
	}
}

func eventIDs(dls []*rivorav1.DeadLetter) []string {
	var out []string
	for _, dl := range dls {
		out = append(out, dl.GetEvent().GetEventId())
	}
	return out
}

// sameIDs: got holds want's ids, in any order.
func sameIDs(got []string, want ...string) bool {
	return slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)))
}

func replayDryRun(dlq rivorav1connect.ArchiveServiceClient, dest string) error {
	stream, err := dlq.Replay(context.Background(), connect.NewRequest(&rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: dest}, DryRun: true}))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
	}
	return stream.Err()
}

func wantCode(t *testing.T, what string, err error, code connect.Code, mentions ...string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("%s: %v (code %v), want %v", what, err, connect.CodeOf(err), code)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: %q does not mention %q", what, err, m)
		}
	}
}

// With the archive down, a customer token's show of another customer's
// dead letter waiting in a ledger answers word for word as its show of an
// id that never died (it used to find it, and the answer policy hid it as
// NotFound, while an absent id answered Unavailable: telling the token
// that the other customer's event died). Its list names no agent, and
// none of its answers carries the archive's error (its endpoint, bucket
// and addresses are the operators'): they say only that the archive
// cannot be read.
func TestACustomersShowOfAnotherCustomersLedgerDeadLetterAnswersAsAbsent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	local, err := archive.NewDir(filepath.Join(dir, "archive"))
	if err != nil {
		t.Fatal(err)
	}
	arch := &switchedArchive{Dir: local}
	arch.down.Store(true)
	p := newPartner(t, func(partner.Request) int { return 400 })
	ag := &running{Dev: rig.StartDev(t, dir, rig.Options{Name: agentName, Workers: 4, Agent: func(c *agent.Config) { c.Archive = arch }}), t: t}
	ag.create(destination("refusing", p.URL(), 1))
	acme := ag.publish("refusing", "acme", "u1")
	poll.True(t, "acme's dead letter waiting for the archive", 15*time.Second, func() bool {
		return ag.health("refusing").GetUnarchivedDeadLetters() == 1
	})
	beta := rivorav1connect.NewArchiveServiceClient(ag.HTTPClient(), ag.URL, ag.As(ag.Token(rivorav1.Role_ROLE_CUSTOMER, "beta")))
	show := func(id string) error {
		_, err := beta.GetDeadLetter(context.Background(), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: id}))
		return err
	}
	absentID := "never-died-" + strings.Repeat("0", len(acme)-len("never-died-"))
	absent, other := show(absentID), show(acme)
	if absent == nil || other == nil || connect.CodeOf(other) != connect.CodeOf(absent) || strings.ReplaceAll(other.Error(), acme, absentID) != absent.Error() {
		t.Errorf("beta's show of acme's waiting dead letter: %v; want word for word its show of an absent id: %v", other, absent)
	}
	list := listDLQ(t, beta, &rivorav1.ListDeadLettersRequest{Filter: &rivorav1.DeadLetterFilter{CustomerId: "beta"}})
	if len(list.GetDeadLetters()) != 0 || list.GetArchiveUnavailable() == "" {
		t.Errorf("beta's list with the archive down: %v; want a ledger answer without acme's dead letter", list)
	}
	const generic = "the dead-letter archive cannot be read right now; listed from the ledgers"
	stats, err := beta.DeadLetterStats(context.Background(), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: &rivorav1.DeadLetterFilter{CustomerId: "beta"}}))
	if err != nil {
		t.Fatal(err)
	}
	for what, why := range map[string]string{"list": list.GetArchiveUnavailable(), "stats": stats.Msg.GetArchiveUnavailable(), "show": absent.Error()} {
		if !strings.Contains(why, generic) || strings.Contains(why, "127.0.0.1") {
			t.Errorf("beta's %s with the archive down says %q; want %q, not the archive's error", what, why, generic)
		}
	}
}
