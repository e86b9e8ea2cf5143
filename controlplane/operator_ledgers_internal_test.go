package controlplane

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

const archiveRefused = "list archive deadletter/: dial tcp 10.0.0.9:9000: connect: connection refused"

// ledgerDead is a dead letter waiting in partition p's ledger.
func ledgerDead(t *testing.T, id string, p uint32, minute int) *rivorav1.DeadLetter {
	return &rivorav1.DeadLetter{
		Event:     &rivorav1.Event{EventId: id, DestinationId: destinationIn(t, p), CustomerId: "acme"},
		DeadAt:    timestamppb.New(time.Date(2026, 3, 1, 10, minute, 0, 0, time.UTC)),
		Partition: p, Unarchived: true,
	}
}

// startLedgerCell is three agents whose archive is down: a1 owns
// partitions 0-7 and holds two dead letters, a2 owns 8-11 and holds one
// but is still opening partition 11, and a3, owner of 12-15, does not
// answer.
func startLedgerCell(t *testing.T) (c *routeCell, a1, a2 *routeAgent) {
	c = startRouteCell(t, func() error { return nil })
	a1 = c.agent("a1", 0, 1, 2, 3, 4, 5, 6, 7)
	a2 = c.agent("a2", 8, 9, 10, 11)
	a3 := c.agent("a3", 12, 13, 14, 15)
	a3.srv.Close()
	a1.downArchive(archiveRefused, routeLedger{
		dls:  []*rivorav1.DeadLetter{ledgerDead(t, "evt-a1-first", 3, 1), ledgerDead(t, "evt-a1-second", 3, 2)},
		read: []uint32{0, 1, 2, 3, 4, 5, 6, 7},
		// As an agent asked directly names what it does not hold: the
		// merge leaves these to their holders' answers.
		unread: []*rivorav1.UnreadLedger{{Partitions: []uint32{8, 9, 10, 11, 12, 13, 14, 15}, Reason: "not owned by this agent; ask the control plane"}},
	})
	a2.downArchive(archiveRefused, routeLedger{
		dls:    []*rivorav1.DeadLetter{ledgerDead(t, "evt-a2", 9, 3)},
		read:   []uint32{8, 9, 10},
		unread: []*rivorav1.UnreadLedger{{Partitions: []uint32{11}, Agent: "a2", Reason: "its owner is opening it (rebuilding from its store); retry in a moment"}},
	})
	return c, a1, a2
}

// checkUnread: the partitions no answer covered are named with their
// owner and why: a2's own word for 11, a3 not answering for 12-15.
func checkUnread(t *testing.T, what string, read []uint32, unread []*rivorav1.UnreadLedger) {
	t.Helper()
	if !slices.Equal(read, []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
		t.Errorf("%s: ledgers read %v, want 0-10", what, read)
	}
	if len(unread) != 2 ||
		!slices.Equal(unread[0].GetPartitions(), []uint32{11}) || unread[0].GetAgent() != "a2" || !strings.Contains(unread[0].GetReason(), "opening") ||
		!slices.Equal(unread[1].GetPartitions(), []uint32{12, 13, 14, 15}) || unread[1].GetAgent() != "a3" || !strings.Contains(unread[1].GetReason(), "did not answer") {
		t.Errorf("%s: unread %v, want 11 (a2, opening) and 12-15 (a3, did not answer)", what, unread)
	}
}

// While the archive cannot be read, list and stats merge every agent's
// ledgers, not only the first agent's, and say which partitions they lack
// and why; a limit cuts the merged list and counts what it left out.
func TestOperatorListsEveryLedgerWhileTheArchiveIsDown(t *testing.T) {
	c, a1, a2 := startLedgerCell(t)
	resp, err := c.archive().ListDeadLetters(ctx(t), connect.NewRequest(&rivorav1.ListDeadLettersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	list := resp.Msg
	if list.GetArchiveUnavailable() != archiveRefused {
		t.Errorf("archive_unavailable %q, want the agent's %q", list.GetArchiveUnavailable(), archiveRefused)
	}
	var ids []string
	for _, dl := range list.GetDeadLetters() {
		ids = append(ids, dl.GetEvent().GetEventId())
		if !dl.GetUnarchived() {
			t.Errorf("%s is not marked unarchived", dl.GetEvent().GetEventId())
		}
	}
	want := []string{"evt-a1-first", "evt-a1-second", "evt-a2"}
	if destinationIn(t, 9) < destinationIn(t, 3) {
		want = []string{"evt-a2", "evt-a1-first", "evt-a1-second"}
	}
	if !slices.Equal(ids, want) || list.GetTruncated() || list.GetMoreUnarchived() != 0 {
		t.Errorf("listed %v (truncated %v, %d more), want %v destination by destination, all", ids, list.GetTruncated(), list.GetMoreUnarchived(), want)
	}
	checkUnread(t, "list", list.GetLedgerPartitions(), list.GetUnreadLedgers())
	for _, a := range []*routeAgent{a1, a2} {
		if calls := a.callsOf(); len(calls) < 1 || calls[len(calls)-1] != "ListDeadLetters" {
			t.Errorf("agent %s was not asked for its ledgers: %v", a.name, calls)
		}
	}

	cut, err := c.archive().ListDeadLetters(ctx(t), connect.NewRequest(&rivorav1.ListDeadLettersRequest{Limit: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if len(cut.Msg.GetDeadLetters()) != 1 || !cut.Msg.GetTruncated() || cut.Msg.GetMoreUnarchived() != 2 {
		t.Errorf("limit 1: %d listed, truncated %v, %d more; want 1, true, 2", len(cut.Msg.GetDeadLetters()), cut.Msg.GetTruncated(), cut.Msg.GetMoreUnarchived())
	}

	st, err := c.archive().DeadLetterStats(ctx(t), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Msg.GetTotal() != 3 || st.Msg.GetArchiveUnavailable() != archiveRefused || st.Msg.GetObjects() != 0 {
		t.Errorf("stats: total %d, archive_unavailable %q, %d objects; want 3, the agent's error, 0", st.Msg.GetTotal(), st.Msg.GetArchiveUnavailable(), st.Msg.GetObjects())
	}
	if counts := st.Msg.GetCounts(); len(counts) != 3 || counts[0].GetNewest().AsTime().Before(counts[2].GetNewest().AsTime()) {
		t.Errorf("stats counts %v, want 3, newest first", counts)
	}
	checkUnread(t, "stats", st.Msg.GetLedgerPartitions(), st.Msg.GetUnreadLedgers())

	// Asked for the ledgers alone: the same merge, no archive read.
	only, err := c.archive().ListDeadLetters(ctx(t), connect.NewRequest(&rivorav1.ListDeadLettersRequest{LedgersOnly: true}))
	if err != nil || len(only.Msg.GetDeadLetters()) != 3 || only.Msg.GetArchiveUnavailable() != "" {
		t.Errorf("ledgers_only: %v, %v; want the 3 dead letters, no archive_unavailable", only, err)
	}
}

// dlq show of a dead letter waiting in another agent's ledger finds it
// there (the first agent's archive could not be read, and its own ledger
// does not hold it), saying why the archive was not read; one in no
// ledger is Unavailable, naming the archive's error and the agent that
// did not answer.
func TestOperatorShowsALedgersDeadLetterWhileTheArchiveIsDown(t *testing.T) {
	c, a1, _ := startLedgerCell(t)
	resp, err := c.archive().GetDeadLetter(ctx(t), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "evt-a2"}))
	if err != nil {
		t.Fatal(err)
	}
	if dl := resp.Msg.GetDeadLetter(); dl.GetEvent().GetEventId() != "evt-a2" || !dl.GetUnarchived() || resp.Msg.GetArchiveUnavailable() != archiveRefused {
		t.Errorf("show evt-a2: %v, want a2's ledger's, marked, saying the archive's error", resp.Msg)
	}
	_, err = c.archive().GetDeadLetter(ctx(t), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "evt-nowhere"}))
	wantErr(t, "show of a dead letter in no ledger", err, connect.CodeUnavailable, "the archive cannot be read ("+archiveRefused+")", "no agent's ledger holds it", "agent a3 did not answer")
	_, err = c.archive().GetDeadLetter(ctx(t), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "evt-nowhere", LedgersOnly: true}))
	wantErr(t, "ledgers_only show of a dead letter in no ledger", err, connect.CodeUnavailable, "agent a3 did not answer")

	// The archive readable again: answered from it, as before.
	a1.downArchive("", routeLedger{})
	resp, err = c.archive().GetDeadLetter(ctx(t), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "evt-a2"}))
	if err != nil || resp.Msg.GetDeadLetter().GetLastError() != "from-a1" || resp.Msg.GetArchiveUnavailable() != "" {
		t.Errorf("show with a1's archive back: %v, %v; want a1's archive answer", resp, err)
	}
}

// An agent cut off from the archive answers from its ledgers, but another
// agent may still reach it (only the first one's link is cut): list,
// stats and show are then answered from the archive, through that agent.
func TestOperatorPrefersAnotherAgentsArchiveToTheLedgers(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1 := c.agent("a1", 0, 1, 2, 3, 4, 5, 6, 7)
	c.agent("a2", 8, 9, 10, 11, 12, 13, 14, 15)
	a1.downArchive(archiveRefused, routeLedger{dls: []*rivorav1.DeadLetter{ledgerDead(t, "evt-a1", 3, 1)}, read: []uint32{0, 1, 2, 3, 4, 5, 6, 7}})
	list, err := c.archive().ListDeadLetters(ctx(t), connect.NewRequest(&rivorav1.ListDeadLettersRequest{}))
	if err != nil || list.Msg.GetArchiveUnavailable() != "" || len(list.Msg.GetDeadLetters()) != 1 || list.Msg.GetDeadLetters()[0].GetLastError() != "from-a2" {
		t.Errorf("list with only a1 cut off from the archive: %v, %v; want a2's archive answer", list, err)
	}
	st, err := c.archive().DeadLetterStats(ctx(t), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{}))
	if err != nil || st.Msg.GetArchiveUnavailable() != "" || st.Msg.GetTotal() != 7 {
		t.Errorf("stats with only a1 cut off from the archive: %v, %v; want a2's archive answer (total 7)", st, err)
	}
	show, err := c.archive().GetDeadLetter(ctx(t), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "evt-elsewhere"}))
	if err != nil || show.Msg.GetArchiveUnavailable() != "" || show.Msg.GetDeadLetter().GetLastError() != "from-a2" {
		t.Errorf("show with only a1 cut off from the archive: %v, %v; want a2's archive answer", show, err)
	}
}

// With a1 cut off from the archive, a2's archive, which needs longer than
// askTimeout, is given the caller's remaining time less the ledgers'
// (askTimeout): list, stats and show answer from it, not from the ledgers
// (they did: a2 had at most askTimeout). The first archive answer ends
// the others' calls: a3, whose archive never answers, does not hold the
// answer up.
func TestOperatorGivesASlowArchiveTheRemainingTime(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1 := c.agent("a1", 0, 1, 2, 3, 4, 5)
	a2 := c.agent("a2", 6, 7, 8, 9, 10)
	a3 := c.agent("a3", 11, 12, 13, 14, 15)
	a1.downArchive(archiveRefused, routeLedger{dls: []*rivorav1.DeadLetter{ledgerDead(t, "evt-a1", 3, 1)}, read: []uint32{0, 1, 2, 3, 4, 5}})
	a2.mu.Lock()
	a2.archiveSlow = time.Second // askTimeout is 300 ms
	a2.mu.Unlock()
	a3.mu.Lock()
	a3.archiveSlow = time.Hour
	a3.mu.Unlock()
	call := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 8*time.Second)
	}

	ctx, cancel := call()
	start := time.Now()
	list, err := c.archive().ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{}))
	took := time.Since(start)
	cancel()
	if err != nil || list.Msg.GetArchiveUnavailable() != "" || len(list.Msg.GetDeadLetters()) != 1 || list.Msg.GetDeadLetters()[0].GetLastError() != "from-a2" {
		t.Errorf("list: %v, %v; want a2's archive answer", list, err)
	}
	if took > 5*time.Second {
		t.Errorf("list took %v: it waited for a3 after a2 answered (a3 had until 8 s less askTimeout)", took)
	}
	ctx, cancel = call()
	st, err := c.archive().DeadLetterStats(ctx, connect.NewRequest(&rivorav1.DeadLetterStatsRequest{}))
	cancel()
	if err != nil || st.Msg.GetArchiveUnavailable() != "" || st.Msg.GetTotal() != 7 {
		t.Errorf("stats: %v, %v; want a2's archive answer (total 7)", st, err)
	}
	ctx, cancel = call()
	show, err := c.archive().GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "evt-elsewhere"}))
	cancel()
	if err != nil || show.Msg.GetArchiveUnavailable() != "" || show.Msg.GetDeadLetter().GetLastError() != "from-a2" {
		t.Errorf("show: %v, %v; want a2's archive answer", show, err)
	}
	poll.True(t, "a3's archive reads cancelled once a2 answered", 5*time.Second, func() bool {
		a3.mu.Lock()
		defer a3.mu.Unlock()
		return a3.archiveCanceled == 3
	})
}

// An agent whose calls hang (a blackholed host), first by name, does not
// take the caller's whole time: the others are asked too after
// hedgeAfter, and the first archive answer wins; with no archive
// readable, every ledger is asked in the time left, the blackholed
// agent's partitions named as not answered. (The first agent's call took
// the caller's deadline: every call failed with DeadlineExceeded.)
func TestOperatorDoesNotWaitForABlackholedAgent(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	c.blackholed("a0", 0, 1, 2, 3)
	a1 := c.agent("a1", 4, 5, 6, 7, 8, 9)
	a2 := c.agent("a2", 10, 11, 12, 13, 14, 15)
	a1.downArchive(archiveRefused, routeLedger{dls: []*rivorav1.DeadLetter{ledgerDead(t, "evt-a1", 5, 1)}, read: []uint32{4, 5, 6, 7, 8, 9}})
	call := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	list, err := c.archive().ListDeadLetters(call(), connect.NewRequest(&rivorav1.ListDeadLettersRequest{}))
	if err != nil || list.Msg.GetArchiveUnavailable() != "" || list.Msg.GetDeadLetters()[0].GetLastError() != "from-a2" {
		t.Fatalf("list with a0 blackholed: %v, %v; want a2's archive answer", list, err)
	}
	st, err := c.archive().DeadLetterStats(call(), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{}))
	if err != nil || st.Msg.GetTotal() != 7 {
		t.Errorf("stats with a0 blackholed: %v, %v; want a2's archive answer (total 7)", st, err)
	}
	show, err := c.archive().GetDeadLetter(call(), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "evt-elsewhere"}))
	if err != nil || show.Msg.GetDeadLetter().GetLastError() != "from-a2" {
		t.Errorf("show with a0 blackholed: %v, %v; want a2's archive answer", show, err)
	}

	a2.downArchive(archiveRefused, routeLedger{dls: []*rivorav1.DeadLetter{ledgerDead(t, "evt-a2", 11, 2)}, read: []uint32{10, 11, 12, 13, 14, 15}})
	list, err = c.archive().ListDeadLetters(call(), connect.NewRequest(&rivorav1.ListDeadLettersRequest{}))
	if err != nil {
		t.Fatalf("list with a0 blackholed and no archive readable: %v; want the ledgers' answer", err)
	}
	unread := list.Msg.GetUnreadLedgers()
	if len(list.Msg.GetDeadLetters()) != 2 || list.Msg.GetArchiveUnavailable() != archiveRefused ||
		len(unread) != 1 || unread[0].GetAgent() != "a0" || !slices.Equal(unread[0].GetPartitions(), []uint32{0, 1, 2, 3}) || !strings.Contains(unread[0].GetReason(), "did not answer") {
		t.Errorf("list from the ledgers: %v; want a1's and a2's dead letters, 0-3 unread as a0 did not answer", list.Msg)
	}
	show, err = c.archive().GetDeadLetter(call(), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "evt-a2"}))
	if err != nil || show.Msg.GetDeadLetter().GetEvent().GetEventId() != "evt-a2" {
		t.Errorf("show of a2's ledger's dead letter with a0 blackholed: %v, %v", show, err)
	}
}

// The operator notices' scan reads the archive: an agent that answers
// from its ledgers (the archive cannot be read) makes the read fail, as
// before the ledgers could answer, so that no deadletter.created notice
// comes from a ledger and the scan retries from the archive later.
func TestNoticesScanCountsALedgerAnswerAsFailed(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1 := c.agent("a1", 0, 1, 2, 3, 4, 5, 6, 7)
	c.agent("a2", 8, 9, 10, 11, 12, 13, 14, 15)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := c.cp.agents.deadLetters(ctx, "", time.Now().Add(-time.Hour)); err != nil {
		t.Fatalf("scan with the archive up: %v", err)
	}
	a1.downArchive(archiveRefused, routeLedger{dls: []*rivorav1.DeadLetter{ledgerDead(t, "evt-a1", 3, 1)}, read: []uint32{0, 1, 2, 3, 4, 5, 6, 7}})
	dls, _, err := c.cp.agents.deadLetters(ctx, "", time.Now().Add(-time.Hour))
	if err == nil || !strings.Contains(err.Error(), "a1") {
		t.Errorf("scan with a1 answering from its ledgers: %v, %v; want a failed read naming a1", dls, err)
	}
}

// During a handoff the old owner and the new may both read a partition's
// ledger: the merge takes the current owner's answer (ownerOf: the one it
// is assigned to), not the first by name; and an answer's overflow past
// the limit is not counted when some of its partitions are another's
// (it may be the dead letters dropped as duplicates).
func TestOperatorMergesTheCurrentOwnersLedgerDuringAHandoff(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1 := c.agent("a1", 0, 1, 2, 3, 4, 5, 6, 7, 8) // still reports 8, handed to a2
	a2 := c.agent("a2", 8, 9, 10, 11, 12, 13, 14, 15)
	c.cp.agents.mu.Lock()
	c.cp.agents.agents["a1"].partition = []uint32{0, 1, 2, 3, 4, 5, 6, 7}
	c.cp.agents.agents["a2"].partition = []uint32{8, 9, 10, 11, 12, 13, 14, 15}
	c.cp.agents.mu.Unlock()
	a1.downArchive(archiveRefused, routeLedger{
		dls:  []*rivorav1.DeadLetter{ledgerDead(t, "evt-a1", 3, 1), ledgerDead(t, "evt-old", 8, 2)},
		read: []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8},
	})
	a2.downArchive(archiveRefused, routeLedger{
		dls:  []*rivorav1.DeadLetter{ledgerDead(t, "evt-new", 8, 3)},
		read: []uint32{8, 9, 10, 11, 12, 13, 14, 15},
	})
	list := func(limit int32) *rivorav1.ListDeadLettersResponse {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.archive().ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{LedgersOnly: true, Limit: limit}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	all := list(0)
	var ids []string
	for _, dl := range all.GetDeadLetters() {
		ids = append(ids, dl.GetEvent().GetEventId())
	}
	if slices.Sort(ids); !slices.Equal(ids, []string{"evt-a1", "evt-new"}) {
		t.Errorf("listed %v, want evt-a1 and a2's evt-new (a2 owns partition 8 now), not a1's evt-old", ids)
	}
	// Limit 1: a1 answers evt-a1 and 1 more (its evt-old, a duplicate),
	// a2 evt-new; the merge keeps one of the two and leaves 1 out.
	if one := list(1); len(one.GetDeadLetters()) != 1 || one.GetMoreUnarchived() != 1 || !one.GetTruncated() {
		t.Errorf("limit 1: %d listed, %d more, truncated %v; want 1, 1 more (not a1's duplicate), truncated", len(one.GetDeadLetters()), one.GetMoreUnarchived(), one.GetTruncated())
	}
}
