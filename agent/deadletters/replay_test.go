package deadletters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// The replay engine's tests: no Connect stream, a real archive directory
// and marks bucket, a recording ingest and a manual clock.

// waitClock is a manual clock that says when the code under test waits
// on it, so a test advances it exactly when and by what the code waits.
type waitClock struct {
	*clock.Manual
	waits chan time.Duration
}

func (c waitClock) NewTimer(d time.Duration) clock.Timer {
	t := c.Manual.NewTimer(d)
	c.waits <- d
	return t
}

// reingest records what the engine re-ingests, and when (on the clock).
type reingest struct {
	clock clock.Clock
	mu    sync.Mutex
	calls [][]string
	at    []time.Time
	// events are the events re-ingested, in order.
	events []*rivorav1.Event
	// fail, when set, answers call n (1-based) with its error.
	fail func(n int) error
	// dup answers these event ids as already present.
	dup map[string]bool
	// gone refuses the dead letters routed by these subscriptions.
	gone map[string]bool
	// unknown destinations are not registered.
	unknown map[string]bool
}

func (r *reingest) Replayable(_ context.Context, dl *rivorav1.DeadLetter) error {
	if dest := dl.GetEvent().GetDestinationId(); r.unknown[dest] {
		return errkind.Errorf(errkind.Precondition, "destination %q is not registered", dest)
	}
	if sub := dl.GetEvent().GetSubscriptionId(); r.gone[sub] {
		return errkind.Errorf(errkind.Precondition, "subscription %q was deleted", sub)
	}
	return nil
}

func (r *reingest) DeletedSubscription(dl *rivorav1.DeadLetter) string {
	if sub := dl.GetEvent().GetSubscriptionId(); r.gone[sub] {
		return sub
	}
	return ""
}

func (r *reingest) Reingest(_ context.Context, dls []*rivorav1.DeadLetter) (stored, duplicates int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		if err := r.fail(len(r.calls) + 1); err != nil {
			r.calls = append(r.calls, nil)
			r.at = append(r.at, r.clock.Now())
			return 0, 0, err
		}
	}
	var ids []string
	for _, dl := range dls {
		r.events = append(r.events, dl.GetEvent())
		ids = append(ids, dl.GetEvent().GetEventId())
		if r.dup[dl.GetEvent().GetEventId()] {
			duplicates++
		} else {
			stored++
		}
	}
	r.calls = append(r.calls, ids)
	r.at = append(r.at, r.clock.Now())
	return stored, duplicates, nil
}

// ids are the event ids re-ingested, in order.
func (r *reingest) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Concat(r.calls...)
}

type replayRig struct {
	arch   *archive.Dir
	kv     jetstream.KeyValue
	clock  waitClock
	ingest *reingest
	replay *Replay
	// now is when the rig's clock starts; the dead letters died before.
	now time.Time
	// cancelAt, when set, is the wait of a run at which it calls cancel
	// instead of advancing the clock (1: the first).
	cancelAt int
	cancel   context.CancelFunc
	// onWait, when set, is called at each wait of a run (1: the first)
	// before the clock is advanced past it.
	onWait func(n int)
}

func newReplayRig(t *testing.T) *replayRig {
	t.Helper()
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("start embedded nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	kv, err := srv.JetStream().CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: CheckpointBucket})
	if err != nil {
		t.Fatal(err)
	}
	arch, err := archive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Hour).Add(30 * time.Minute)
	clk := waitClock{clock.NewManual(now), make(chan time.Duration)}
	rg := &replayRig{arch: arch, kv: kv, clock: clk, ingest: &reingest{clock: clk}, now: now}
	rg.replay = NewReplay(arch, rg.ingest, kv, clk, slog.New(slog.DiscardHandler))
	return rg
}

// put archives dead letters as one object of partition p, dead ago
// before the rig's now.
func (rg *replayRig) put(t *testing.T, dest string, p int, first uint64, ago time.Duration, dls ...*rivorav1.DeadLetter) {
	t.Helper()
	deadAt := rg.now.Add(-ago)
	for _, dl := range dls {
		dl.Event.DestinationId = dest
		dl.DeadAt = timestamppb.New(deadAt)
	}
	if _, err := rg.arch.Put(context.Background(), archive.Key(dest, deadAt, p, first, first+uint64(len(dls))-1), dls); err != nil {
		t.Fatal(err)
	}
}

func dead(id, customer string, reason rivorav1.DeadReason) *rivorav1.DeadLetter {
	return &rivorav1.DeadLetter{Event: &rivorav1.Event{EventId: id, CustomerId: customer, LaneKey: "l"}, Reason: reason}
}

// deads are n dead letters of acme, ids prefix-0 … prefix-(n-1).
func deads(prefix string, n int) []*rivorav1.DeadLetter {
	var out []*rivorav1.DeadLetter
	for i := range n {
		out = append(out, dead(fmt.Sprintf("%s-%02d", prefix, i), "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS))
	}
	return out
}

// run runs the engine to its end, advancing the clock by each wait, and
// returns every progress report, where it got to and its error.
func (rg *replayRig) run(ctx context.Context, req ReplayRequest, progress func(Progress) error) ([]Progress, Progress, error) {
	var reports []Progress
	type result struct {
		p   Progress
		err error
	}
	done := make(chan result)
	go func() {
		p, err := rg.replay.Run(ctx, req, func(p Progress) error {
			reports = append(reports, p)
			if progress != nil {
				return progress(p)
			}
			return nil
		})
		done <- result{p, err}
	}()
	waits := 0
	for {
		select {
		case d := <-rg.clock.waits:
			if waits++; waits == rg.cancelAt {
				rg.cancel()
				continue
			}
			if rg.onWait != nil {
				rg.onWait(waits)
			}
			rg.clock.Advance(d)
		case r := <-done:
			return reports, r.p, r.err
		}
	}
}

func rate(r float64) *float64 { return &r }

// The filter picks what is replayed, in archive (lane) order; what it
// matches is counted before anything is re-ingested.
func TestReplayFilter(t *testing.T) {
	const maxAttempts, window = rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS, rivorav1.DeadReason_DEAD_REASON_WINDOW
	// Each case replays an archive of its own: a replay does not send
	// again what another replay sent.
	archived := func() *replayRig {
		rg := newReplayRig(t)
		// Put out of order: the archive's key order is the replay's order.
		rg.put(t, "orders", 1, 1, time.Hour, dead("b1", "acme", maxAttempts), dead("b2", "globex", maxAttempts))
		rg.put(t, "orders", 0, 1, 3*time.Hour, dead("a1", "acme", maxAttempts), dead("a2", "acme", window), dead("a3", "acme", maxAttempts))
		rg.put(t, "orders", 0, 4, time.Hour, dead("c1", "acme", maxAttempts))
		rg.put(t, "billing", 0, 1, time.Hour, dead("x1", "acme", maxAttempts))
		return rg
	}
	now := archived().now
	cases := []struct {
		name   string
		filter *rivorav1.DeadLetterFilter
		want   []string
	}{
		{"destination", &rivorav1.DeadLetterFilter{DestinationId: "orders"}, []string{"a1", "a2", "a3", "c1", "b1", "b2"}},
		{"customer and reason", &rivorav1.DeadLetterFilter{DestinationId: "orders", CustomerId: "acme", Reason: maxAttempts}, []string{"a1", "a3", "c1", "b1"}},
		{"since", &rivorav1.DeadLetterFilter{DestinationId: "orders", Since: timestamppb.New(now.Add(-2 * time.Hour))}, []string{"c1", "b1", "b2"}},
		{"until", &rivorav1.DeadLetterFilter{DestinationId: "orders", Until: timestamppb.New(now.Add(-2 * time.Hour))}, []string{"a1", "a2", "a3"}},
		{"nothing", &rivorav1.DeadLetterFilter{DestinationId: "orders", CustomerId: "initech"}, nil},
	}
	for _, tc := range cases {
		rg := archived()
		reports, end, err := rg.run(context.Background(), ReplayRequest{Filter: tc.filter}, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := rg.ingest.ids(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: re-ingested %v, want %v", tc.name, got, tc.want)
		}
		n := int64(len(tc.want))
		if first := reports[0]; first.Total != n || first.Replayed != 0 || first.Done {
			t.Errorf("%s: first report %+v, want the %d matches counted before any is re-ingested", tc.name, first, n)
		}
		if end.Total != n || end.Replayed != n || end.Skipped != 0 || !end.Done || reports[len(reports)-1].Replayed != n {
			t.Errorf("%s: ended at %+v (last report %+v), want %d of %d replayed, done", tc.name, end, reports[len(reports)-1], n, n)
		}
	}
}

// An idempotency conflict's copy died under the id of the event its key
// was first used for: it is replayed under an id of its own (the same in
// every run), naming the old one (replay_of), and the progress lists it.
// The other dead letters keep their ids, and the archive is unchanged.
func TestReplayGivesAConflictsCopyAnIDOfItsOwn(t *testing.T) {
	rg := newReplayRig(t)
	conflict := dead("0190d3c2-0000-7000-8000-000000000001", "acme", rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT)
	conflict.Event.Payload = []byte(`{"n":7001}`)
	rg.put(t, "orders", 0, 1, time.Hour, dead("a1", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS), conflict)
	var renamed []*rivorav1.ReplayRename
	replayAll := func(restart bool) string {
		t.Helper()
		rg.ingest.calls, rg.ingest.events, renamed = nil, nil, nil
		_, end, err := rg.run(context.Background(), ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}, Restart: restart}, func(p Progress) error {
			renamed = append(renamed, p.Renamed...)
			return nil
		})
		if err != nil || end.Replayed != 2 {
			t.Fatalf("replay: %+v, %v; want 2 replayed", end, err)
		}
		ids := rg.ingest.ids()
		if len(ids) != 2 || ids[0] != "a1" || ids[1] == conflict.Event.EventId || lanes.ValidateEventID("event_id", ids[1]) != nil {
			t.Fatalf("re-ingested %v: want a1 as it was, then the conflict's copy under a valid id of its own", ids)
		}
		if of := rg.ingest.events[1].GetReplayOf(); of != conflict.Event.EventId || rg.ingest.events[0].GetReplayOf() != "" {
			t.Fatalf("replay_of %q and %q: want none, then %s", rg.ingest.events[0].GetReplayOf(), of, conflict.Event.EventId)
		}
		if len(renamed) != 1 || renamed[0].GetEventId() != conflict.Event.EventId || renamed[0].GetReplayedAs() != ids[1] {
			t.Fatalf("progress renamed %v: want %s replayed as %s", renamed, conflict.Event.EventId, ids[1])
		}
		return ids[1]
	}
	first := replayAll(false)
	if again := replayAll(true); again != first {
		t.Fatalf("a second replay gave the copy id %s, the first %s: want the same", again, first)
	}
	dls, err := rg.arch.Get(context.Background(), archive.Key("orders", rg.now.Add(-time.Hour), 0, 1, 2))
	if err != nil || dls[1].GetEvent().GetEventId() != conflict.Event.EventId || dls[1].GetEvent().GetReplayOf() != "" {
		t.Fatalf("archived copy after the replays: %v, %v; want it unchanged", dls, err)
	}
}

// A dry run counts what a replay would do, per destination and customer,
// and replays nothing: the replay after it still replays everything.
func TestReplayDryRun(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, append(deads("a", 3), dead("g", "globex", rivorav1.DeadReason_DEAD_REASON_WINDOW))...)
	reports, _, err := rg.run(context.Background(), ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}, DryRun: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 1 || !reports[0].Done || reports[0].Total != 4 || len(rg.ingest.ids()) != 0 {
		t.Fatalf("dry run: reports %+v, re-ingested %v; want one report, done, 4 matching, nothing re-ingested", reports, rg.ingest.ids())
	}
	counts := map[string]int64{}
	for _, c := range reports[0].Counts {
		counts[c.GetDestinationId()+"/"+c.GetCustomerId()] = c.GetCount()
	}
	if len(counts) != 2 || counts["orders/acme"] != 3 || counts["orders/globex"] != 1 {
		t.Errorf("dry-run counts %v, want orders/acme 3, orders/globex 1", counts)
	}
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}, nil); err != nil || end.Replayed != 4 {
		t.Fatalf("replay after a dry run: %+v, %v; want all 4 replayed", end, err)
	}
}

// A replay of a destination that is not registered and has no dead
// letters (a typo) says so, instead of "0 match": the dry run in Refused,
// the replay as its error.
func TestReplayOfAnUnknownDestinationSaysSo(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, deads("a", 2)...)
	rg.ingest.unknown = map[string]bool{"ordres": true}
	typo := &rivorav1.DeadLetterFilter{DestinationId: "ordres"}
	reports, _, err := rg.run(context.Background(), ReplayRequest{Filter: typo, DryRun: true}, nil)
	if err != nil || len(reports) != 1 || reports[0].Total != 0 || !strings.Contains(reports[0].Refused, `destination "ordres" is not registered`) {
		t.Fatalf("dry run of an unknown destination: %+v, %v; want 0 matching, refused naming it", reports, err)
	}
	if _, _, err := rg.run(context.Background(), ReplayRequest{Filter: typo}, nil); errkind.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("replay of an unknown destination: %v, want failed_precondition", err)
	}
	// A registered destination with nothing to replay is just empty.
	reports, _, err = rg.run(context.Background(), ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders", CustomerId: "initech"}, DryRun: true}, nil)
	if err != nil || reports[0].Total != 0 || reports[0].Refused != "" {
		t.Fatalf("dry run matching nothing: %+v, %v; want 0 matching, not refused", reports, err)
	}
}

// A replay some of whose dead letters cannot be re-ingested (their
// subscription was deleted) is refused before anything is re-ingested,
// and leaves no mark: they are not "replayed". A replay narrowed to
// the others goes ahead.
func TestReplayRefusedUpFrontWhenSomeCannotBeReplayed(t *testing.T) {
	rg := newReplayRig(t)
	gone := dead("s-1", "acme", rivorav1.DeadReason_DEAD_REASON_DELETED)
	gone.Event.SubscriptionId = "sub_gone"
	rg.put(t, "orders", 0, 1, time.Hour, append(deads("a", 3), gone)...)
	rg.ingest.gone = map[string]bool{"sub_gone": true}
	all := &rivorav1.DeadLetterFilter{DestinationId: "orders"}
	_, end, err := rg.run(context.Background(), ReplayRequest{Filter: all}, nil)
	if !errors.Is(err, errkind.Precondition) || !strings.Contains(err.Error(), "sub_gone") || end.Replayed != 0 || len(rg.ingest.ids()) != 0 {
		t.Fatalf("replay with a deleted subscription's dead letter: %+v, %v, re-ingested %v; want precondition naming it, nothing re-ingested", end, err, rg.ingest.ids())
	}
	if reports, _, err := rg.run(context.Background(), ReplayRequest{Filter: all, DryRun: true}, nil); err != nil || reports[0].Total != 4 || reports[0].Skipped != 0 || !strings.Contains(reports[0].Refused, "sub_gone") {
		t.Fatalf("dry run after the refusal: %+v, %v; want 4 matching, none replayed before, and why a replay is refused", reports, err)
	}
	rg.ingest.gone = nil // the subscription is back (in this test's world)
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: all}, nil); err != nil || end.Replayed != 4 {
		t.Fatalf("replay once it can: %+v, %v; want all 4", end, err)
	}
}

// One customer's deleted subscription does not hold every other
// customer's dead letters of a shared destination: a replay matching
// dead letters of deleted subscriptions is refused saying how many of
// them and of which subscriptions, and suggesting
// SkipDeletedSubscriptions, which replays the others and leaves those in
// the archive, unmarked (a later replay finds them again). A dry run
// says up front what would be refused or left. A subscription deleted
// once the count is done is left too.
func TestReplaySkipsDeletedSubscriptions(t *testing.T) {
	rg := newReplayRig(t)
	routed := func(id, customer, sub string) *rivorav1.DeadLetter {
		dl := dead(id, customer, rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS)
		dl.Event.SubscriptionId = sub
		return dl
	}
	rg.put(t, "poison", 0, 1, time.Hour, routed("a1", "acme", "sub_acme"), routed("g1", "globex", "sub_globex"), routed("a2", "acme", "sub_acme"))
	rg.put(t, "poison", 1, 1, 30*time.Minute, dead("d1", "globex", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS), routed("i1", "initech", "sub_initech"), routed("g2", "globex", "sub_globex2"))
	rg.ingest.gone = map[string]bool{"sub_acme": true, "sub_initech": true}
	all := &rivorav1.DeadLetterFilter{DestinationId: "poison"}
	wantDeleted := DeletedSubscriptions{DeadLetters: 3, Subscriptions: []string{"sub_acme", "sub_initech"}, Count: 2}
	deletedOf := func(p Progress) DeletedSubscriptions {
		return DeletedSubscriptions{DeadLetters: p.Deleted.DeadLetters, Subscriptions: slices.Clone(p.Deleted.Subscriptions), Count: p.Deleted.Count}
	}

	_, end, err := rg.run(context.Background(), ReplayRequest{Filter: all}, nil)
	for _, want := range []string{"3 of the 6 dead letters", "2 subscriptions (sub_acme, sub_initech)", "leave those in the archive", "--skip-deleted-subscriptions"} {
		if !errors.Is(err, errkind.Precondition) || !strings.Contains(err.Error(), want) {
			t.Fatalf("replay matching 3 dead letters of 2 deleted subscriptions: %v; want precondition with %q", err, want)
		}
	}
	if end.Replayed != 0 || len(rg.ingest.ids()) != 0 {
		t.Fatalf("refused replay re-ingested %v", rg.ingest.ids())
	}
	reports, _, err := rg.run(context.Background(), ReplayRequest{Filter: all, DryRun: true}, nil)
	if err != nil || !strings.Contains(reports[0].Refused, "2 subscriptions (sub_acme, sub_initech)") || !reflect.DeepEqual(deletedOf(reports[0]), wantDeleted) {
		t.Fatalf("dry run: %+v, %v; want refused naming both, and deleted %+v", reports, err, wantDeleted)
	}
	reports, _, err = rg.run(context.Background(), ReplayRequest{Filter: all, DryRun: true, SkipDeletedSubscriptions: true}, nil)
	if err != nil || reports[0].Refused != "" || !reflect.DeepEqual(deletedOf(reports[0]), wantDeleted) || countOf(reports[0].Counts) != 3 {
		t.Fatalf("dry run leaving them: %+v, %v; want not refused, 3 would replay, deleted %+v", reports, err, wantDeleted)
	}

	reports, end, err = rg.run(context.Background(), ReplayRequest{Filter: all, SkipDeletedSubscriptions: true}, nil)
	if err != nil || end.Replayed != 3 || end.Skipped != 0 || !reflect.DeepEqual(deletedOf(end), wantDeleted) || !reflect.DeepEqual(deletedOf(reports[0]), wantDeleted) {
		t.Fatalf("replay leaving them: %+v, %v; want 3 replayed, the deleted ones reported from the first report", end, err)
	}
	if got := rg.ingest.ids(); !slices.Equal(got, []string{"g1", "d1", "g2"}) {
		t.Fatalf("re-ingested %v, want g1, d1, g2", got)
	}
	_, end, err = rg.run(context.Background(), ReplayRequest{Filter: all, SkipDeletedSubscriptions: true}, nil)
	if err != nil || end.Replayed != 0 || end.Skipped != 3 || end.Deleted.DeadLetters != 3 {
		t.Fatalf("second replay: %+v, %v; want the 3 replayed skipped, the 3 left found again", end, err)
	}
	rg.ingest.gone = nil // back, in this test's world: they were not marked
	if _, end, err = rg.run(context.Background(), ReplayRequest{Filter: all}, nil); err != nil || end.Replayed != 3 || end.Deleted.DeadLetters != 0 {
		t.Fatalf("replay once they can go: %+v, %v; want the 3 left replayed", end, err)
	}

	// Deleted once counted: left as well, not a failed replay.
	late := newReplayRig(t)
	late.put(t, "poison", 0, 1, time.Hour, routed("x1", "acme", "sub_late"), routed("x2", "globex", "sub_stays"))
	late.ingest.gone = map[string]bool{}
	reports, end, err = late.run(context.Background(), ReplayRequest{Filter: all, SkipDeletedSubscriptions: true}, func(p Progress) error {
		late.ingest.gone["sub_late"] = true
		return nil
	})
	if err != nil || end.Replayed != 1 || end.Deleted.DeadLetters != 1 || reports[0].Deleted.DeadLetters != 0 || !slices.Equal(late.ingest.ids(), []string{"x2"}) {
		t.Fatalf("a subscription deleted after the count: %+v, %v, re-ingested %v; want x2 replayed, x1 left", end, err, late.ingest.ids())
	}
}

// countOf sums counts.
func countOf(counts []*rivorav1.DeadLetterCount) int64 {
	var n int64
	for _, c := range counts {
		n += c.GetCount()
	}
	return n
}

// A paced replay re-ingests a tenth of a second's worth at a time, each
// batch once the previous one's share of time has passed; progress is
// reported at most every 200 ms, with the rate so far, and at the end.
func TestReplayPacing(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, deads("a", 25)...)
	reports, end, err := rg.run(context.Background(), ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}, Rate: rate(100)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	var at []time.Duration
	for i, c := range rg.ingest.calls {
		sizes = append(sizes, len(c))
		at = append(at, rg.ingest.at[i].Sub(rg.now))
	}
	if want := []int{10, 10, 5}; !slices.Equal(sizes, want) {
		t.Errorf("batches of %v, want %v (a tenth of a second's worth at 100/s)", sizes, want)
	}
	if want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}; !slices.Equal(at, want) {
		t.Errorf("batches re-ingested at %v, want %v", at, want)
	}
	if len(reports) != 3 {
		t.Fatalf("%d reports %+v, want 3: the count, one at 200 ms, the end", len(reports), reports)
	}
	if mid := reports[1]; mid.Replayed != 25 || mid.RatePerSecond != 125 || mid.Done {
		t.Errorf("report at 200 ms: %+v, want 25 replayed at 125/s, not done", mid)
	}
	if !end.Done || end.Replayed != 25 || !reports[2].Done || reports[2].Replayed != 25 {
		t.Errorf("end %+v, last report %+v; want done, 25 replayed", end, reports[2])
	}
	// Unpaced: one batch per object, no wait.
	rg.ingest.calls = nil
	if _, _, err := rg.run(context.Background(), ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}, Restart: true}, nil); err != nil || len(rg.ingest.calls) != 1 {
		t.Fatalf("unpaced replay: %d calls, %v; want one batch of 25", len(rg.ingest.calls), err)
	}
}

// A pace slower than the reports (here 1/s: a batch of one a second)
// reports before each wait: a replay stopped meanwhile (Ctrl-C) knows
// what it did. The report after each batch fell within 200 ms of the one
// before, so the last batch before a long wait was never reported.
func TestASlowReplayReportsBeforeEachWait(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, deads("a", 3)...)
	reports, end, err := rg.run(context.Background(), ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}, Rate: rate(1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var replayed []int64
	for _, r := range reports {
		replayed = append(replayed, r.Replayed)
	}
	// The count; the first batch, before the first wait; the second and
	// third, each after its batch (a second after the report before); the
	// end. No report repeats the one before but the end's.
	if want := []int64{0, 1, 2, 3, 3}; !slices.Equal(replayed, want) || !end.Done {
		t.Fatalf("reports of %v replayed (end %+v), want %v", replayed, end, want)
	}
}

// A replay that stops (ingest fails, the caller leaves) keeps its
// mark: a re-run with the same filter resumes after what was
// re-ingested, counting the rest as skipped, and re-ingests nothing twice.
// Restart ignores the marks.
func TestReplayResumesAfterWhatItMarked(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, 2*time.Hour, deads("a", 3)...)
	rg.put(t, "orders", 0, 4, time.Hour, deads("b", 3)...)
	orders := &rivorav1.DeadLetterFilter{DestinationId: "orders"}
	rg.ingest.fail = func(n int) error {
		if n == 2 {
			// As ingest's store answers a publisher.
			return errkind.Tag(errkind.Unavailable, errkind.WithAdvice(errors.New("store event: INGEST stream unreachable"), "retry with the same idempotency key"))
		}
		return nil
	}
	_, end, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, nil)
	if !errors.Is(err, errkind.Unavailable) || end.Replayed != 3 {
		t.Fatalf("replay with ingest failing on the second object: %+v, %v; want 3 replayed, then Unavailable", end, err)
	}
	// It says how to resume the replay, not a publisher's retry.
	if msg := errkind.AsConnect(err).Error(); !strings.Contains(msg, "INGEST stream unreachable") || !strings.Contains(msg, "3 of 6 dead letters done") ||
		!strings.Contains(msg, "to resume, try again: the same `rivoractl replay` skips what was already replayed") || strings.Contains(msg, "idempotency key") {
		t.Errorf("stopped replay says %q; want what failed, how far it got, and that a re-run resumes", msg)
	}
	// An ingest error with a kind keeps it.
	rg.ingest.fail = func(int) error { return errkind.Errorf(errkind.Precondition, "destination not registered") }
	if _, _, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, nil); errkind.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("ingest refusing: %v, want its failed_precondition", err)
	}
	rg.ingest.fail = nil
	reports, end, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first := reports[0]; first.Total != 6 || first.Skipped != 3 {
		t.Errorf("resumed replay's first report %+v, want 6 matching, 3 skipped (the first run's)", first)
	}
	if want := []string{"a-00", "a-01", "a-02", "b-00", "b-01", "b-02"}; !slices.Equal(rg.ingest.ids(), want) || end.Replayed != 3 || end.Skipped != 3 {
		t.Errorf("re-ingested %v over the runs (ended %+v), want each once: %v", rg.ingest.ids(), end, want)
	}
	// Done: a re-run replays nothing; Restart replays everything again.
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, nil); err != nil || end.Replayed != 0 || end.Skipped != 6 {
		t.Errorf("re-run of a finished replay: %+v, %v; want nothing replayed, 6 skipped", end, err)
	}
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: orders, Restart: true}, nil); err != nil || end.Replayed != 6 {
		t.Errorf("restart: %+v, %v; want 6 replayed", end, err)
	}
}

// What one replay handled, another with another filter does not send
// again: after the stream's dedup window receivers would see the same
// webhook-id twice. Restart does.
func TestReplayDoesNotResendWhatAnotherFilterReplayed(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, 2*time.Hour, dead("a-acme", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS), dead("a-globex", "globex", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS))
	rg.put(t, "orders", 0, 3, time.Hour, dead("b-acme", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS), dead("b-globex", "globex", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS))
	acme := &rivorav1.DeadLetterFilter{DestinationId: "orders", CustomerId: "acme"}
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: acme}, nil); err != nil || end.Replayed != 2 {
		t.Fatalf("replay of acme's: %+v, %v; want 2 replayed", end, err)
	}
	reports, end, err := rg.run(context.Background(), ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a-acme", "b-acme", "a-globex", "b-globex"}; !slices.Equal(rg.ingest.ids(), want) {
		t.Errorf("re-ingested %v over both replays, want each once: %v", rg.ingest.ids(), want)
	}
	if reports[0].Total != 4 || reports[0].Skipped != 2 || end.Replayed != 2 || end.Skipped != 2 {
		t.Errorf("the whole destination's replay: first report %+v, end %+v; want 4 matching, acme's 2 skipped, 2 replayed", reports[0], end)
	}
	// A dry run counts them as skipped too.
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: acme, DryRun: true}, nil); err != nil || end.Total != 2 || end.Skipped != 2 {
		t.Errorf("dry run of acme's again: %+v, %v; want 2 matching, both skipped", end, err)
	}
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: acme, Restart: true}, nil); err != nil || end.Replayed != 2 {
		t.Errorf("restarted replay of acme's: %+v, %v; want 2 replayed again", end, err)
	}
}

// Two replays marking lines of one object at once keep each other's
// marks, each line with its time.
func TestReplayMarksOfConcurrentReplaysAddUp(t *testing.T) {
	rg := newReplayRig(t)
	ctx := context.Background()
	one, other := newReplayMarks(rg.kv), newReplayMarks(rg.kv)
	const object = "deadletter/orders/2026/12/06/00/p0-1-20.ndjson.gz"
	for _, m := range []*replayMarks{one, other} {
		if _, err := m.load(ctx, object); err != nil {
			t.Fatal(err)
		}
	}
	if err := one.mark(ctx, object, []int{0, 1, 9}, 1_000); err != nil {
		t.Fatal(err)
	}
	// other read the object's marks before one wrote them.
	if err := other.mark(ctx, object, []int{2, 17}, 2_000); err != nil {
		t.Fatal(err)
	}
	fresh := newReplayMarks(rg.kv)
	if _, err := fresh.load(ctx, object); err != nil {
		t.Fatal(err)
	}
	got := map[int]int64{}
	for i := range 24 {
		if at, ok := fresh.handledAt(object, i); ok {
			got[i] = at
		}
	}
	if want := map[int]int64{0: 1_000, 1: 1_000, 2: 2_000, 9: 1_000, 17: 2_000}; !maps.Equal(got, want) {
		t.Errorf("marked lines %v, want both replays' %v", got, want)
	}
}

// An event replayed that died again is replayed again by the next replay,
// at its new death: it was not sent since. (Its first death, handled,
// stays skipped.)
func TestReplayResendsAnEventThatDiedAgainAfterIt(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, deads("a", 2)...)
	orders := &rivorav1.DeadLetterFilter{DestinationId: "orders"}
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, nil); err != nil || end.Replayed != 2 {
		t.Fatalf("first replay: %+v, %v; want 2 replayed", end, err)
	}
	// a-01 was delivered; a-00 died again after the replay.
	rg.clock.Advance(time.Minute)
	again := dead("a-00", "acme", rivorav1.DeadReason_DEAD_REASON_WINDOW)
	again.Event.Replayed = true
	rg.put(t, "orders", 0, 3, -30*time.Second, again)
	rg.clock.Advance(time.Minute)
	reports, end, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a-00", "a-01", "a-00"}; !slices.Equal(rg.ingest.ids(), want) {
		t.Errorf("re-ingested %v over both replays, want %v: a-00 again at its new death", rg.ingest.ids(), want)
	}
	if reports[0].Total != 3 || reports[0].Skipped != 2 || end.Replayed != 1 {
		t.Errorf("second replay: first report %+v, end %+v; want 3 matching, the 2 handled skipped, 1 replayed", reports[0], end)
	}
}

// A later death a replay skipped (its event sent at an earlier death) is
// marked too: a replay whose filter matches only that later death does
// not send the event again.
func TestReplayMarksTheLaterDeathsItSkips(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, 2*time.Hour, dead("a-00", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS))
	// Resent, it died again, of its window.
	again := dead("a-00", "acme", rivorav1.DeadReason_DEAD_REASON_WINDOW)
	again.Event.Resent = true
	rg.put(t, "orders", 0, 2, time.Hour, again)
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}, nil); err != nil || end.Replayed != 1 || end.Skipped != 1 {
		t.Fatalf("replay of the destination: %+v, %v; want a-00 sent once, its later death skipped", end, err)
	}
	windowOnly := &rivorav1.DeadLetterFilter{DestinationId: "orders", Reason: rivorav1.DeadReason_DEAD_REASON_WINDOW}
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: windowOnly}, nil); err != nil || end.Replayed != 0 || end.Skipped != 1 {
		t.Fatalf("replay of the window deaths: %+v, %v; want nothing sent (a-00 was sent by the first replay)", end, err)
	}
	if ids := rg.ingest.ids(); !slices.Equal(ids, []string{"a-00"}) {
		t.Errorf("re-ingested %v, want a-00 once", ids)
	}
}

// An event replayed before that died again has a dead letter per death:
// one replay re-accepts it once, at its first death (lane order), and
// skips the later ones, also when it resumes. An idempotency conflict's
// copy under the same id is another event, not a repeat.
func TestReplayReacceptsAnEventThatDiedTwiceOnce(t *testing.T) {
	again := func(dl *rivorav1.DeadLetter) *rivorav1.DeadLetter { dl.Event.Replayed = true; return dl }
	const maxAttempts = rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS
	archived := func() *replayRig {
		rg := newReplayRig(t)
		rg.put(t, "orders", 0, 1, 3*time.Hour, deads("a", 3)...)
		// a-00 and a-02 were replayed, and died again; a-01's
		// conflicting copy died too.
		rg.put(t, "orders", 0, 4, 2*time.Hour, again(dead("a-00", "acme", maxAttempts)), again(dead("a-02", "acme", maxAttempts)))
		rg.put(t, "orders", 0, 6, time.Hour, dead("a-01", "acme", rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT), dead("b-00", "acme", maxAttempts))
		return rg
	}
	rg := archived()
	orders := &rivorav1.DeadLetterFilter{DestinationId: "orders"}

	reports, end, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := rg.ingest.ids()
	if len(ids) != 5 || !slices.Equal(ids[:3], []string{"a-00", "a-01", "a-02"}) || ids[3] == "a-01" || ids[4] != "b-00" {
		t.Fatalf("re-ingested %v: want a-00 a-01 a-02 once each, in order, then a-01's conflicting copy under its own id, then b-00", ids)
	}
	if reports[0].Total != 7 || reports[0].Skipped != 2 || end.Replayed != 5 || end.Skipped != 2 {
		t.Fatalf("first report %+v, end %+v: want 7 matching, the 2 later deaths skipped, 5 replayed", reports[0], end)
	}

	// Resumed after the second object (its two lines both later
	// deaths, nothing to re-ingest): they are still skipped.
	rg = archived()
	rg.ingest.fail = func(n int) error {
		if n == 2 {
			return errors.New("INGEST stream unreachable")
		}
		return nil
	}
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, nil); err == nil || end.Replayed != 3 {
		t.Fatalf("replay with ingest failing at the third object: %+v, %v; want the first object's 3 replayed", end, err)
	}
	rg.ingest.fail = nil
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, nil); err != nil || end.Replayed != 2 || end.Skipped != 5 {
		t.Fatalf("resumed: %+v, %v; want the last object's 2 replayed, 5 skipped (3 done, 2 later deaths)", end, err)
	}
	ids = rg.ingest.ids()
	if len(ids) != 5 || !slices.Equal(ids[:3], []string{"a-00", "a-01", "a-02"}) || ids[4] != "b-00" {
		t.Fatalf("re-ingested over the runs %v: want each once", ids)
	}
}

// Within an object, the marks are written per batch: a paced replay whose
// caller leaves mid-object resumes at the next line; its error is
// Canceled, saying how to resume. Duplicates count as skipped.
func TestReplayInterruptedResumesMidObject(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, deads("a", 5)...)
	req := ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}, Rate: rate(10)}
	ctx, cancel := context.WithCancel(context.Background())
	rg.cancelAt, rg.cancel = 2, cancel // the caller leaves while the third batch waits its turn
	_, end, err := rg.run(ctx, req, nil)
	if !errors.Is(err, errkind.Canceled) || err.Error() != "replay interrupted; run it again to resume" || end.Replayed != 2 {
		t.Fatalf("interrupted replay: %+v, %v; want 2 replayed, then Canceled saying to run it again", end, err)
	}
	rg.cancelAt = 0
	rg.ingest.dup = map[string]bool{"a-03": true}
	reports, end, err := rg.run(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if reports[0].Skipped != 2 || end.Replayed != 2 || end.Skipped != 3 {
		t.Errorf("resumed: first report %+v, end %+v; want 2 skipped first, then 2 replayed and 3 skipped (a-03 a duplicate)", reports[0], end)
	}
	if want := []string{"a-00", "a-01", "a-02", "a-03", "a-04"}; !slices.Equal(rg.ingest.ids(), want) {
		t.Errorf("re-ingested %v, want %v", rg.ingest.ids(), want)
	}
}

// An error from the progress callback (the stream is gone) stops the
// replay; what it re-ingested is marked.
func TestReplayProgressErrorStops(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, 2*time.Hour, deads("a", 3)...)
	orders := &rivorav1.DeadLetterFilter{DestinationId: "orders"}
	errGone := errors.New("stream gone")
	if _, _, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, func(Progress) error { return errGone }); !errors.Is(err, errGone) || len(rg.ingest.calls) != 0 {
		t.Fatalf("first report failing: %v after %d re-ingests; want the callback's error, nothing re-ingested", err, len(rg.ingest.calls))
	}
	if _, _, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, func(p Progress) error {
		if p.Done {
			return errGone
		}
		return nil
	}); !errors.Is(err, errGone) {
		t.Fatalf("last report failing: %v, want the callback's error", err)
	}
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: orders}, nil); err != nil || end.Replayed != 0 || end.Skipped != 3 {
		t.Errorf("after a run whose last report failed: %+v, %v; want all 3 skipped (marked)", end, err)
	}
}

// A request the engine cannot run is Invalid, and re-ingests nothing.
func TestReplayRefusesBadRequests(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, deads("a", 2)...)
	for name, req := range map[string]ReplayRequest{
		"no destination":    {Filter: &rivorav1.DeadLetterFilter{CustomerId: "acme"}},
		"bad destination":   {Filter: &rivorav1.DeadLetterFilter{DestinationId: "../x"}},
		"rate 0":            {Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}, Rate: rate(0)},
		"rate under Min":    {Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}, Rate: rate(1e-10)},
		"since after until": {Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders", Since: timestamppb.New(rg.now), Until: timestamppb.New(rg.now.Add(-time.Hour))}},
	} {
		if _, _, err := rg.run(context.Background(), req, nil); !errors.Is(err, errkind.Invalid) {
			t.Errorf("%s: %v, want Invalid", name, err)
		}
	}
	if n := len(rg.ingest.ids()); n != 0 {
		t.Errorf("%d dead letters re-ingested by refused requests", n)
	}
}

// A resend of a dead letter marks it handled, as a replay does: the
// REPLAYED column says so, no later replay sends that death again, and
// when the resent copy died too, a replay sends the event at that death
// (under its own dedup id), not at the death the resend already sent.
func TestAResendMarksItsDeadLetterHandled(t *testing.T) {
	rg := newReplayRig(t)
	ctx := context.Background()
	rg.put(t, "orders", 0, 1, 2*time.Hour, dead("a-00", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS))
	s := &Service{archive: rg.arch, replay: rg.replay}
	dl, mark, err := s.ForResend(ctx, "a-00", "orders")
	if err != nil || dl.GetEvent().GetEventId() != "a-00" {
		t.Fatalf("for resend: %v, %v", dl, err)
	}
	resentAt := rg.now.Add(-90 * time.Minute)
	if err := mark(ctx, resentAt); err != nil {
		t.Fatal(err)
	}
	shown, err := s.GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "a-00", DestinationId: "orders"}))
	if err != nil || !shown.Msg.GetDeadLetter().GetReplayedAt().AsTime().Equal(resentAt.Truncate(time.Millisecond)) {
		t.Fatalf("the resent dead letter: replayed_at %v, %v; want %v", shown.Msg.GetDeadLetter().GetReplayedAt(), err, resentAt)
	}
	orders := &rivorav1.DeadLetterFilter{DestinationId: "orders"}
	if _, end, err := rg.run(ctx, ReplayRequest{Filter: orders}, nil); err != nil || end.Replayed != 0 || end.Skipped != 1 {
		t.Fatalf("replay after the resend: %+v, %v; want the resent dead letter skipped", end, err)
	}
	// The resent copy died as well.
	again := dead("a-00", "acme", rivorav1.DeadReason_DEAD_REASON_WINDOW)
	again.Event.Resent = true
	rg.put(t, "orders", 0, 2, time.Hour, again)
	if _, end, err := rg.run(ctx, ReplayRequest{Filter: orders}, nil); err != nil || end.Replayed != 1 {
		t.Fatalf("replay after the resent copy died: %+v, %v; want it sent once", end, err)
	}
	if evs := rg.ingest.events; len(evs) != 1 || !evs[0].GetResent() {
		t.Fatalf("re-ingested %v; want the resent copy's death (resent), not the death the resend sent", evs)
	}
}
