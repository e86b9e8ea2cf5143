package deadletters

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/internal/rates"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/eventid"
)

// Replay is the replay engine: it re-ingests the dead letters a filter
// matches, in archive order (lane order), paced to a rate, marking after
// every batch which dead letters it handled (replayMarks), so that no
// replay, whatever its filter, sends one of them again and a re-run
// resumes where one stopped, and reports its progress through a callback.
// It knows nothing of Connect: Service.Replay maps a request to it and its
// progress onto a stream.
type Replay struct {
	archive archive.Archive
	ingest  Reingester
	marks   jetstream.KeyValue
	clock   clock.Clock
	log     *slog.Logger
}

// NewReplay returns an engine that reads arch, re-ingests through ingest
// and keeps its marks in the marks bucket (CheckpointBucket); clk paces
// it and times its progress reports.
func NewReplay(arch archive.Archive, ingest Reingester, marks jetstream.KeyValue, clk clock.Clock, log *slog.Logger) *Replay {
	return &Replay{archive: arch, ingest: ingest, marks: marks, clock: clk, log: log}
}

// ReplayRequest says what to replay, and how.
type ReplayRequest struct {
	// Filter selects the dead letters; it must name a destination.
	Filter *rivorav1.DeadLetterFilter
	// Rate bounds re-ingest in events per second, within rates (nil: as
	// fast as ingest takes them).
	Rate *float64
	// DryRun counts what would be replayed (Progress.Counts), replaying
	// nothing.
	DryRun bool
	// Restart replays again what earlier replays handled (their marks).
	Restart bool
	// SkipDeletedSubscriptions leaves the dead letters whose subscription
	// was deleted in the archive, unmarked, and replays the others;
	// without it a replay matching any of them is refused before
	// anything is re-ingested (Progress.Deleted says which).
	SkipDeletedSubscriptions bool
}

// Progress is where a replay is.
type Progress struct {
	// Total is how many dead letters match (known before the first is
	// re-ingested): how many deaths, a dead letter archived twice (a
	// duplicate object) counted once.
	Total int64
	// Replayed were re-accepted by this run.
	Replayed int64
	// Skipped were handled by an earlier replay, with this filter or
	// another (replayMarks), were already present (duplicate), or are a
	// later death of an event this replay re-accepts at its first
	// (repeats).
	Skipped int64
	// ReplayedByAnother were handled by another replay running at the
	// same time, after this one counted them and before it reached them:
	// this one leaves them (a dead letter is sent by one replay only).
	ReplayedByAnother int64
	// RatePerSecond is this run's replay rate so far.
	RatePerSecond float64
	// Counts, per destination and customer, come with a dry run's answer
	// and with Done.
	Counts []*rivorav1.DeadLetterCount
	Done   bool
	// Refused (dry run) is why the replay itself would be refused before
	// re-ingesting anything; "" when it would go ahead.
	Refused string
	// Renamed are the dead letters re-accepted since the last report
	// under an id of their own (replayedAs).
	Renamed []*rivorav1.ReplayRename
	// Deleted are the matching dead letters, not handled by an earlier
	// replay, whose subscription was deleted: left in the archive
	// (SkipDeletedSubscriptions), else why the replay is refused.
	Deleted DeletedSubscriptions
}

// DeletedSubscriptions are the dead letters of a replay whose
// subscription was deleted, and those subscriptions.
type DeletedSubscriptions struct {
	// DeadLetters is how many.
	DeadLetters int64
	// Subscriptions are their subscriptions' ids, sorted: the first
	// maxDeletedListed of Count.
	Subscriptions []string
	Count         int64
}

// maxDeletedListed bounds the deleted subscriptions a progress report
// lists; maxDeletedNamed those a message names.
const (
	maxDeletedListed = 100
	maxDeletedNamed  = 3
)

// named says the subscriptions: "subscription sub_a, which was
// deleted", "3 subscriptions (sub_a, sub_b, sub_c), which were deleted",
// "7 subscriptions (sub_a, sub_b, sub_c and 4 more), which were deleted".
func (d DeletedSubscriptions) named() string {
	if d.Count == 1 && len(d.Subscriptions) == 1 {
		return "subscription " + d.Subscriptions[0] + ", which was deleted"
	}
	shown := d.Subscriptions[:min(len(d.Subscriptions), maxDeletedNamed)]
	list := strings.Join(shown, ", ")
	if more := d.Count - int64(len(shown)); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("%d subscriptions (%s), which were deleted", d.Count, list)
}

// refusal is why a replay matching d's dead letters, of total to replay
// (those no earlier replay handled), is refused without
// SkipDeletedSubscriptions.
func (d DeletedSubscriptions) refusal(total int64) error {
	var which string
	switch {
	case d.DeadLetters == 1 && total == 1:
		which = "the dead letter to replay was"
	case d.DeadLetters == total:
		which = fmt.Sprintf("all %d dead letters to replay were", total)
	case d.DeadLetters == 1:
		which = fmt.Sprintf("1 of the %d dead letters to replay was", total)
	default:
		which = fmt.Sprintf("%d of the %d dead letters to replay were", d.DeadLetters, total)
	}
	return errkind.Errorf(errkind.Precondition, "%s routed by %s: a deleted subscription's dead letters cannot be delivered as they would have been (its URL, secret and headers went with it), so nothing is replayed; replay the others and leave those in the archive (`rivoractl replay --skip-deleted-subscriptions`), or narrow the replay (--customer, --lane, --subscription of one that exists)",
		which, d.named())
}

// plural is n and the noun, singular for one.
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// deletedLines are the dead letters a replay leaves in the archive for
// their deleted subscription: the lines, per archive object, and the
// dead letters per subscription.
type deletedLines struct {
	lines map[string]map[int]bool
	subs  map[string]int64
	n     int64
}

func (d *deletedLines) add(k string, i int, sub string) {
	if d.lines == nil {
		d.lines, d.subs = map[string]map[int]bool{}, map[string]int64{}
	}
	if d.lines[k] == nil {
		d.lines[k] = map[int]bool{}
	}
	if d.lines[k][i] {
		return
	}
	d.lines[k][i] = true
	d.subs[sub]++
	d.n++
}

// progress is what a report says of them.
func (d *deletedLines) progress() DeletedSubscriptions {
	if d.n == 0 {
		return DeletedSubscriptions{}
	}
	ids := slices.Sorted(maps.Keys(d.subs))
	return DeletedSubscriptions{DeadLetters: d.n, Subscriptions: ids[:min(len(ids), maxDeletedListed)], Count: int64(len(ids))}
}

// reportEvery spaces the progress reports while replaying; a pace that
// waits longer between batches reports before each wait.
const reportEvery = 200 * time.Millisecond

// Run replays req, calling progress with the count of what matches before
// re-ingesting any (a dry run's only report, with Done), then every
// reportEvery or so (and before each wait of a slower pace), and last with
// Done. An error progress returns stops
// the replay. Run returns where the replay got to, and why it stopped: a
// request that is wrong (errkind.Invalid), the archive, ingest or the
// marks bucket failing (their kind, else errkind.Unavailable), ctx
// ending (errkind.Canceled: a re-run resumes).
func (r *Replay) Run(ctx context.Context, req ReplayRequest, progress func(Progress) error) (Progress, error) {
	if err := req.check(); err != nil {
		return Progress{}, err
	}
	f := req.Filter
	keys, err := objects(ctx, r.archive, f, r.clock.Now())
	if err != nil {
		return Progress{}, err
	}
	run := &replayRun{Replay: r, req: req, marked: newReplayMarks(r.marks), report: progress}
	counts, err := run.count(ctx, keys)
	if err != nil {
		return run.p, err
	}
	if req.DryRun {
		run.p.Counts, run.p.Done = counts.list(), true
		return run.p, progress(run.p)
	}
	if err := progress(run.p); err != nil {
		return run.p, err
	}
	if err := run.replay(ctx, keys); err != nil {
		return run.p, err
	}
	run.p.Done, run.p.Counts = true, counts.list()
	r.log.Info("replay finished", "destination", f.GetDestinationId(), "replayed", run.p.Replayed, "skipped", run.p.Skipped, "replayed_by_another", run.p.ReplayedByAnother, "left_deleted_subscriptions", run.p.Deleted.DeadLetters)
	return run.p, run.progress(true)
}

// check refuses a request that names no destination, a bad filter, or a
// rate outside rates.
func (req ReplayRequest) check() error {
	if req.Filter.GetDestinationId() == "" {
		return errkind.Errorf(errkind.Invalid, "replay needs a destination")
	}
	if err := checkFilter(req.Filter); err != nil {
		return err
	}
	// A replay's rate has the bounds of a destination's (rates): under
	// 1e-10 the pacer's wait overflowed (unpaced), just above it stalled
	// for years.
	if req.Rate != nil && !rates.Valid(*req.Rate) {
		return errkind.Errorf(errkind.Invalid, "rate must be %s (unset: as fast as ingest takes them), got %v", rates.Bound(), *req.Rate)
	}
	return nil
}

// replayRun is one run of a replay: its marks, progress and pace.
type replayRun struct {
	*Replay
	req    ReplayRequest
	marked *replayMarks
	p      Progress
	report func(Progress) error
	pace   *pacer
	// start is when re-ingest began, lastReport when progress was last
	// reported, and reportedDone how many were done then.
	start, lastReport time.Time
	reportedDone      int64
	// repeats are the lines, per archive object, that this replay skips:
	// an event replayed before that died again has a dead letter per
	// death, and is re-accepted once, at its first death no replay
	// handled (count finds them).
	repeats map[string]map[int]bool
	// copies are the lines, per archive object, that hold a death
	// already read in an earlier line (the same dead letter archived
	// twice: an owner that changed between an object's write and its
	// ledger's purge writes it again): the death counts once, at its
	// first line, and a copy is marked with it (true) unless that first
	// line is left in the archive (false).
	copies map[string]map[int]bool
	// todo are, per archive object, the lines this run re-ingests.
	todo map[string]map[int]bool
	// deleted are the lines whose subscription was deleted: left in the
	// archive (ReplayRequest.SkipDeletedSubscriptions), else the replay
	// is refused.
	deleted deletedLines
	// leftSince are the deaths left in the archive for a subscription
	// deleted since the count: their copies are left unmarked too.
	leftSince map[idKey]bool
}

// idKey is an event id as count remembers it: a 128-bit hash, a fixed
// few bytes per dead letter however long the ids.
type idKey [16]byte

func keyOf(id string) idKey {
	h := fnv.New128a()
	h.Write([]byte(id))
	var k idKey
	h.Sum(k[:0])
	return k
}

// deathKey identifies one death of an event: its id, when it died, why,
// and where its dead letter was in its partition's ledger. Two lines
// with the same key are one dead letter archived twice; a death of the
// event after a replay has another time (and ledger sequence).
func deathKey(dl *rivorav1.DeadLetter) idKey {
	return keyOf(fmt.Sprintf("%s\x00%d\x00%d\x00%d\x00%d", dl.GetEvent().GetEventId(), dl.GetDeadAt().AsTime().UnixNano(), dl.GetReason(), dl.GetPartition(), dl.GetLaneSeq()))
}

// deaths is what count knows, per event, of the deaths before the one it
// reads: whether this run re-accepts the event at one of them (seen), and
// when an earlier replay last handled one of them (handled, Unix ms).
type deaths struct {
	seen    map[idKey]struct{}
	handled map[idKey]int64
}

// repeat tells whether dl, not handled by an earlier replay, is a later
// death of an event already sent: this run re-accepts it at an earlier
// death, or an earlier replay handled an earlier death after dl died (so
// that replay found dl, and sent the event once). A death after that
// replay is the replayed event dying again: it is replayed in its turn.
// Only a death of a replayed or resent event can be a repeat; an
// idempotency conflict's copy is another event under the same id
// (replayedAs).
func (d deaths) repeat(dl *rivorav1.DeadLetter) bool {
	k := keyOf(dl.GetEvent().GetEventId())
	ev := dl.GetEvent()
	again := (ev.GetReplayed() || ev.GetResent()) && dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT
	_, sent := d.seen[k]
	if at, ok := d.handled[k]; ok && dl.GetDeadAt().AsTime().UnixMilli() < at-clockMargin.Milliseconds() {
		sent = true
	}
	if again && sent {
		return true
	}
	d.seen[k] = struct{}{}
	return false
}

// clockMargin is how far apart the clocks of the agent that ran a replay
// and of the one that dead-lettered an event may be: a death within it
// of the replay is taken for a new one, so a doubt sends the event again
// rather than never.
const clockMargin = 2 * time.Second

// handledAt records that an earlier replay handled a death of dl's event
// at (Unix ms).
func (d deaths) handledAt(dl *rivorav1.DeadLetter, at int64) {
	k := keyOf(dl.GetEvent().GetEventId())
	d.handled[k] = max(d.handled[k], at)
}

// count is the first pass: how many dead letters match, how many of them
// an earlier replay handled, and the rest grouped (Progress.Counts).
//
// It also finds the repeats, reading every match in archive order, marked
// ones included (deaths), so that a resumed run skips the same lines.
func (run *replayRun) count(ctx context.Context, keys []string) (*counter, error) {
	counts := newCounter()
	before := deaths{seen: map[idKey]struct{}{}, handled: map[idKey]int64{}}
	run.repeats, run.todo, run.copies = map[string]map[int]bool{}, map[string]map[int]bool{}, map[string]map[int]bool{}
	// A death's lines are all in one hour directory (hours): what is kept
	// to tell its copies apart is one hour's.
	for _, hour := range hours(keys) {
		if err := run.countHour(ctx, hour, before, counts); err != nil {
			return nil, err
		}
	}
	if err := run.judgeDeleted(); err != nil {
		return nil, err
	}
	if run.p.Total == 0 {
		// Nothing matches: say so of a destination that does not exist
		// (a typo), or that does not take the filter's customer's events,
		// rather than answer an empty archive.
		f := run.req.Filter
		probe := &rivorav1.DeadLetter{Event: &rivorav1.Event{DestinationId: f.GetDestinationId(), CustomerId: f.GetCustomerId()}}
		if err := run.ingest.Replayable(ctx, probe); err != nil {
			if !run.req.DryRun {
				return nil, err
			}
			run.p.Refused = err.Error()
		}
	}
	return counts, nil
}

// hours splits keys (sorted) into runs of one hour directory each
// (archive.HourPrefix). A copy of a death has its destination and its
// dead_at, so it is archived in the same hour directory: a death's lines
// are all in one run.
func hours(keys []string) [][]string {
	var out [][]string
	for start := 0; start < len(keys); {
		end := start + 1
		for end < len(keys) && path.Dir(keys[end]) == path.Dir(keys[start]) {
			end++
		}
		out = append(out, keys[start:end])
		start = end
	}
	return out
}

// countHour counts the objects of one hour directory, keys (count).
func (run *replayRun) countHour(ctx context.Context, keys []string, before deaths, counts *counter) error {
	handledDeaths, err := run.handledDeaths(ctx, keys)
	if err != nil {
		return err
	}
	// read are the deaths read so far, and whether their copies are
	// marked with them.
	read := map[idKey]bool{}
	for _, k := range keys {
		// Read again if handledDeaths read it: holding the hour's marked
		// objects (payloads and all) until here could take gigabytes.
		dls, err := run.archive.Get(ctx, k)
		if err != nil {
			return archiveError(err)
		}
		for i, dl := range dls {
			if !matches(run.req.Filter, dl) {
				continue
			}
			if _, err := run.marked.load(ctx, k); err != nil {
				return errkind.Tag(errkind.Unavailable, err)
			}
			death := deathKey(dl)
			if mark, ok := read[death]; ok {
				addLine(run.copies, k, i, mark)
				continue
			}
			read[death] = true
			run.p.Total++
			at, ok := run.handledBefore(k, i)
			if !ok {
				at, ok = handledDeaths[death]
			}
			if ok {
				// Its copies stay as they are: marked now, they would
				// date the death's handling later than it was (deaths).
				read[death] = false
				before.handledAt(dl, at)
				run.p.Skipped++
				continue
			}
			if before.repeat(dl) {
				addLine(run.repeats, k, i, true)
				run.p.Skipped++
				continue
			}
			// Its subscription deleted: left in the archive, or the
			// replay refused, once all are counted.
			if sub := run.ingest.DeletedSubscription(dl); sub != "" {
				run.deleted.add(k, i, sub)
				read[death] = false
				continue
			}
			// A replay that would be refused midway is refused before
			// anything is re-ingested; a dry run says so.
			if err := run.ingest.Replayable(ctx, dl); err != nil {
				if !run.req.DryRun {
					return err
				}
				if run.p.Refused == "" {
					run.p.Refused = err.Error()
				}
			}
			counts.add(dl, false)
			addLine(run.todo, k, i, true)
		}
	}
	return nil
}

// addLine sets line i of object k in lines.
func addLine(lines map[string]map[int]bool, k string, i int, v bool) {
	if lines[k] == nil {
		lines[k] = map[int]bool{}
	}
	lines[k][i] = v
}

// handledDeaths are the deaths an earlier replay handled, by the latest
// time one did (Unix ms), read from the objects that have marks: a
// death archived twice is handled when either line is marked (a replay
// may have marked the one object before the other was written). None
// for a restart. It holds one object at a time.
func (run *replayRun) handledDeaths(ctx context.Context, keys []string) (map[idKey]int64, error) {
	handled := map[idKey]int64{}
	if run.req.Restart {
		return handled, nil
	}
	for _, k := range keys {
		om, err := run.marked.load(ctx, k)
		if err != nil {
			return nil, errkind.Tag(errkind.Unavailable, err)
		}
		if len(om.at) == 0 {
			continue
		}
		dls, err := run.archive.Get(ctx, k)
		if err != nil {
			return nil, archiveError(err)
		}
		for i, at := range om.at {
			if i < len(dls) {
				death := deathKey(dls[i])
				handled[death] = max(handled[death], at)
			}
		}
	}
	return handled, nil
}

// judgeDeleted refuses a replay (a dry run: says it would be refused)
// that matches dead letters whose subscription was deleted, unless it
// leaves them in the archive.
func (run *replayRun) judgeDeleted() error {
	run.p.Deleted = run.deleted.progress()
	if run.deleted.n == 0 || run.req.SkipDeletedSubscriptions {
		return nil
	}
	err := run.p.Deleted.refusal(run.p.Total - run.p.Skipped)
	if !run.req.DryRun {
		return err
	}
	if run.p.Refused == "" {
		run.p.Refused = err.Error()
	}
	return nil
}

// handledBefore reports whether an earlier replay handled line i of
// object k, and when (Unix ms); never for a restart.
func (run *replayRun) handledBefore(k string, i int) (int64, bool) {
	if run.req.Restart {
		return 0, false
	}
	return run.marked.handledAt(k, i)
}

// handled reports whether an earlier replay handled line i of object k
// (handledBefore).
func (run *replayRun) handled(k string, i int) bool {
	_, ok := run.handledBefore(k, i)
	return ok
}

// replay is the second pass: it re-ingests, object by object, what count
// found to do.
func (run *replayRun) replay(ctx context.Context, keys []string) error {
	var rate float64
	if run.req.Rate != nil {
		rate = *run.req.Rate
	}
	run.pace = newPacer(rate, run.clock)
	run.start = run.clock.Now()
	run.lastReport = run.start
	for _, k := range keys {
		// An object with only repeats is visited too: marking them keeps
		// a later replay with another filter (one that does not match
		// the earlier death) from sending the event again.
		// So is one with only copies: marking them keeps the death
		// handled whichever of its lines a later replay reads.
		if len(run.todo[k]) == 0 && len(run.repeats[k]) == 0 && len(run.copies[k]) == 0 {
			continue
		}
		if err := run.object(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// object re-ingests the matches of one archive object in paced batches,
// those an earlier replay handled left out, marking after each what it
// handled.
func (run *replayRun) object(ctx context.Context, k string) error {
	dls, err := run.archive.Get(ctx, k)
	if err != nil {
		return archiveError(err)
	}
	for i := 0; i < len(dls); {
		batch, sent, handled, end := run.batch(k, dls, i)
		// A slow pace's wait is preceded by a report: what was done
		// shows before it, and a caller who stops the replay meanwhile
		// (Ctrl-C) knows where it got.
		if len(batch) > 0 && run.pace.ahead() > reportEvery && run.p.Replayed+run.p.Skipped != run.reportedDone {
			if err := run.progress(true); err != nil {
				return err
			}
		}
		if err := run.pace.wait(ctx, len(batch)); err != nil {
			return run.stop(ctx, err)
		}
		// Another replay may have sent some of the batch since the marks
		// were read (during the count, or the wait): read them again and
		// leave those to it.
		if len(batch) > 0 {
			var err error
			if batch, handled, err = run.leaveToAnother(ctx, k, batch, sent, handled); err != nil {
				return errkind.Tag(errkind.Unavailable, err)
			}
		}
		// The mark's time is before the batch is stored: a death of one
		// of its events comes after it.
		at := run.clock.Now().UnixMilli()
		if len(batch) > 0 {
			batch, renamed := replayedAs(batch)
			stored, dups, err := run.ingest.Reingest(ctx, batch)
			run.p.Replayed += int64(stored)
			run.p.Skipped += int64(dups)
			if err != nil {
				return run.stop(ctx, err)
			}
			run.p.Renamed = append(run.p.Renamed, renamed...)
		}
		i = end
		if err := run.markHandled(ctx, k, handled, at); err != nil {
			return errkind.Tag(errkind.Unavailable, err)
		}
		if err := run.progress(false); err != nil {
			return err
		}
	}
	return nil
}

// markTimeout bounds writing a batch's marks once the replay's call ended.
const markTimeout = 10 * time.Second

// markHandled marks lines of object k handled, at at, even when the
// call ended meanwhile (its caller hung up, its token was revoked): the
// batch is stored, and its marks are where a re-run resumes.
func (run *replayRun) markHandled(ctx context.Context, k string, lines []int, at int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	return run.marked.mark(ctx, k, lines, at)
}

// batch is the next batch of dls[i:] to re-ingest, the lines count put in
// todo (no other line is sent), as large as the pace allows; the lines it handles (the batch's, and the repeats
// and copies among them); and where the batch after it starts. A line
// this run was to re-ingest that another replay marked since the count
// is left to it, and counted (ReplayedByAnother).
func (run *replayRun) batch(k string, dls []*rivorav1.DeadLetter, i int) (batch []*rivorav1.DeadLetter, sent, handled []int, end int) {
	batch = make([]*rivorav1.DeadLetter, 0, run.pace.batch())
	for end = i; end < len(dls) && len(batch) < cap(batch); end++ {
		mark, copied := run.copies[k][end]
		switch {
		case !matches(run.req.Filter, dls[end]):
		case copied:
			if mark && !run.handled(k, end) && !run.leftSince[deathKey(dls[end])] {
				handled = append(handled, end)
			}
		case run.handled(k, end):
			if run.todo[k][end] {
				run.p.ReplayedByAnother++
			}
		case run.repeats[k][end]:
			handled = append(handled, end)
		case !run.todo[k][end]:
			// Counted but not to send: a death handled through a marked
			// copy elsewhere, or left for its deleted subscription. Only
			// what count put in todo is sent, so a real run sends what a
			// dry run counts and nothing else.
		case run.deletedSince(k, end, dls[end]):
		default:
			batch = append(batch, dls[end])
			sent = append(sent, end)
			handled = append(handled, end)
		}
	}
	return batch, sent, handled, end
}

// leaveToAnother reads object k's marks again, bypassing those read
// before, and takes out of batch (its lines: sent) and of handled the
// lines another replay marked since: counted as replayed by it
// (ReplayedByAnother), neither sent nor marked again. A batch both take
// before either marks it is still sent by both: within the stream's
// dedup window a duplicate it drops (replays have their own dedup id).
func (run *replayRun) leaveToAnother(ctx context.Context, k string, batch []*rivorav1.DeadLetter, sent, handled []int) ([]*rivorav1.DeadLetter, []int, error) {
	if _, err := run.marked.reload(ctx, k); err != nil {
		return nil, nil, err
	}
	gone := map[int]bool{}
	kept := batch[:0]
	for j, dl := range batch {
		if run.handled(k, sent[j]) {
			gone[sent[j]] = true
			run.p.ReplayedByAnother++
			continue
		}
		kept = append(kept, dl)
	}
	if len(gone) == 0 {
		return kept, handled, nil
	}
	return kept, slices.DeleteFunc(handled, func(i int) bool { return gone[i] }), nil
}

// deletedSince tells whether dl (line i of object k) was routed by a
// subscription deleted since the count, and leaves it in the archive
// then too when the replay leaves such dead letters (without
// SkipDeletedSubscriptions, Reingest refuses it).
func (run *replayRun) deletedSince(k string, i int, dl *rivorav1.DeadLetter) bool {
	if !run.req.SkipDeletedSubscriptions {
		return false
	}
	sub := run.ingest.DeletedSubscription(dl)
	if sub == "" {
		return false
	}
	run.deleted.add(k, i, sub)
	run.p.Deleted = run.deleted.progress()
	if run.leftSince == nil {
		run.leftSince = map[idKey]bool{}
	}
	run.leftSince[deathKey(dl)] = true
	return true
}

// progress reports where the run is: when forced, else at most every
// reportEvery.
func (run *replayRun) progress(force bool) error {
	now := run.clock.Now()
	if !force && now.Sub(run.lastReport) < reportEvery {
		return nil
	}
	run.lastReport, run.reportedDone = now, run.p.Replayed+run.p.Skipped
	if secs := now.Sub(run.start).Seconds(); secs > 0 {
		run.p.RatePerSecond = float64(run.p.Replayed) / secs
	}
	err := run.report(run.p)
	run.p.Renamed = nil
	return err
}

// replayedAs gives each idempotency_conflict dead letter of batch the id
// it is replayed under. It died under an id that names another payload
// (its key's first use, which receivers may have had): replayed under it,
// every receiver that dedupes on webhook-id would drop it. Its own id is
// derived from the old one and its payload, so a re-run of the replay
// derives the same (and its dedup id stores it once); Event.replay_of
// keeps the old one.
func replayedAs(batch []*rivorav1.DeadLetter) ([]*rivorav1.DeadLetter, []*rivorav1.ReplayRename) {
	var renamed []*rivorav1.ReplayRename
	for i, dl := range batch {
		if dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT || dl.GetEvent().GetReplayOf() != "" {
			continue
		}
		dl = proto.Clone(dl).(*rivorav1.DeadLetter)
		ev := dl.GetEvent()
		payload := sha256.Sum256(ev.GetPayload())
		ev.ReplayOf = ev.GetEventId()
		ev.EventId = eventid.FromKey(ev.GetDestinationId(), ev.GetCustomerId(), "rivora-replay-of:"+ev.GetEventId()+":"+hex.EncodeToString(payload[:16]))
		renamed = append(renamed, &rivorav1.ReplayRename{EventId: ev.GetReplayOf(), ReplayedAs: ev.GetEventId()})
		batch[i] = dl
	}
	return batch, renamed
}

// stop ends an interrupted run; its marks already say where. A call
// ended for a reason of its own (ctx's cause: its token revoked, say)
// stops with it, and otherwise as Canceled. An error of ingest keeps its
// kind; one without is Unavailable.
func (run *replayRun) stop(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		run.log.Info("replay interrupted; a re-run resumes", "destination", run.req.Filter.GetDestinationId(), "replayed", run.p.Replayed, "cause", cause)
		if cause != ctx.Err() && errkind.Coded(cause) {
			return fmt.Errorf("replay interrupted (run it again to resume): %w", cause)
		}
		return errkind.Errorf(errkind.Canceled, "replay interrupted; run it again to resume")
	}
	if !errkind.Coded(err) {
		err = errkind.Tag(errkind.Unavailable, err)
	}
	if errors.Is(err, errkind.Unavailable) || errors.Is(err, errkind.Deadline) {
		return run.resumable(err)
	}
	return err
}

// stoppedError is an error that stopped a replay, told as a replay's:
// its message is its own, its kind (and details) the error's.
type stoppedError struct {
	msg string
	err error
}

func (e *stoppedError) Error() string { return e.msg }
func (e *stoppedError) Unwrap() error { return e.err }

// resumable tells err, which stopped the run and which a re-run may not
// meet, with how far the run got and how to resume it: ingest's advice
// to a publisher (errkind.WithAdvice: a replay has no idempotency key;
// it resumes by running again) is left out.
func (run *replayRun) resumable(err error) error {
	msg := errkind.WithoutAdvice(err)
	done := run.p.Replayed + run.p.Skipped + run.p.ReplayedByAnother + run.p.Deleted.DeadLetters
	return &stoppedError{err: err, msg: fmt.Sprintf("replay stopped with %d of %d dead letters done (%d replayed): %s; to resume, try again: the same `rivoractl replay` skips what was already replayed (each dead letter re-accepted is marked)", done, run.p.Total, run.p.Replayed, msg)}
}

// pacer spreads re-ingest over time at a rate (0: unpaced).
type pacer struct {
	rate  float64
	clock clock.Clock
	next  time.Time
}

// newPacer paces at rate, held within rates (Replay checked it): the
// wait for n events is then at most 500/rates.Min seconds, far from
// overflowing a time.Duration.
func newPacer(rate float64, clk clock.Clock) *pacer {
	if rate != 0 { // 0: unpaced
		rate = rates.Clamp(rate)
	}
	return &pacer{rate: rate, clock: clk, next: clk.Now()}
}

// batch is how many events to re-ingest at once: a tenth of a second's
// worth (1 to 500).
func (p *pacer) batch() int {
	if p.rate <= 0 {
		return 500
	}
	return int(min(500, max(1, p.rate/10)))
}

// ahead is how long the next batch waits (0 or less: none).
func (p *pacer) ahead() time.Duration {
	if p.rate <= 0 {
		return 0
	}
	return p.next.Sub(p.clock.Now())
}

// wait returns when n more events may go: once the previous batch's
// share of time has passed.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p.rate <= 0 || n == 0 {
		return ctx.Err()
	}
	if d := p.next.Sub(p.clock.Now()); d > 0 {
		t := p.clock.NewTimer(d)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	p.next = p.clock.Now().Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	return nil
}
