// Package deadletters serves the archive (tier 3) to people: list, show and
// count dead letters, and replay them through ingest, marking each dead
// letter re-accepted so that no replay sends it again and an interrupted
// replay resumes where it stopped. While the archive cannot be read, list,
// show and count answer from the dead letters still waiting in the
// ledgers of the partitions this agent owns, marked so (ledgers.go). The replay itself is an engine (Replay:
// filter, pacing, marks, progress) that knows nothing
// of Connect; the Service's handlers map requests to it and return errors
// tagged with their kind (internal/errkind).
package deadletters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/upstream"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/bounds"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Reingester accepts dead letters again (the ingest gateway).
type Reingester interface {
	Reingest(ctx context.Context, dls []*rivorav1.DeadLetter) (stored, duplicates int, err error)
	// Replayable says why a dead letter cannot be re-ingested now (its
	// destination or subscription is gone, or its destination is another
	// customer's own), nil when it can; told as the caller of ctx's call
	// may be told it.
	Replayable(ctx context.Context, dl *rivorav1.DeadLetter) error
	// DeletedSubscription is the subscription that routed dl when it was
	// deleted since, "" when it was not: one of Replayable's reasons,
	// which a replay may leave in the archive instead
	// (ReplayRequest.SkipDeletedSubscriptions).
	DeletedSubscription(dl *rivorav1.DeadLetter) string
}

// Service implements rivora.v1.ArchiveService: list, show and count
// answered here, replay by its engine (Replay).
type Service struct {
	archive archive.Archive
	ledgers Ledgers
	// ledgerReserve is the reserve for the ledgers' answer (0: the
	// package's ledgerReserve; tests shorten it).
	ledgerReserve time.Duration
	replay        *Replay
	log           *slog.Logger
	// audit records a replay in the audit log, its author the caller of
	// ctx's call (nil: not recorded).
	audit func(ctx context.Context, e *rivorav1.AuditEntry) error
}

// CheckpointBucket is the KV bucket holding the replay marks: which lines
// of each archive object a replay handled (replayMarks). Its name is from
// when it held one checkpoint per filter.
const CheckpointBucket = "REPLAY_CHECKPOINTS"

// New returns the service, creating the marks bucket if needed.
// audit (nil: none) makes every replay (not a dry run) two audit
// entries: as it begins (deadletters.replay.began: what matches) and when
// it ends (deadletters.replay: what it replayed, and how it ended).
// replicas is the bucket's replica count in a cell (0 means 1). ledgers
// answer while the archive cannot be read.
func New(ctx context.Context, js jetstream.JetStream, arch archive.Archive, ledgers Ledgers, ingest Reingester, audit func(ctx context.Context, e *rivorav1.AuditEntry) error, replicas int, log *slog.Logger) (*Service, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      CheckpointBucket,
		Description: "Which dead letters a replay re-accepted, by archive object and line: no replay sends one again, and a re-run resumes.",
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", CheckpointBucket, err)
	}
	return &Service{archive: arch, ledgers: ledgers, replay: NewReplay(arch, ingest, kv, clock.Real{}, log), log: log, audit: audit}, nil
}

// checkFilter validates a filter like every other request naming a
// destination, customer or lane (lanes.ValidateID, ValidateLaneKey):
// the ids become archive key prefixes, so "../" must never reach the
// archive. Its error is errkind.Invalid.
func checkFilter(f *rivorav1.DeadLetterFilter) error {
	var err error
	if f.GetDestinationId() != "" {
		err = lanes.ValidateID("filter.destination_id", f.GetDestinationId())
	}
	if err == nil && f.GetCustomerId() != "" {
		err = lanes.ValidateID("filter.customer_id", f.GetCustomerId())
	}
	if err == nil && f.GetLaneKey() != "" {
		err = lanes.ValidateLaneKey(f.GetLaneKey())
	}
	if err == nil && f.GetSubscriptionId() != "" {
		err = lanes.ValidateID("filter.subscription_id", f.GetSubscriptionId())
	}
	for name, ts := range map[string]*timestamppb.Timestamp{"filter.since": f.GetSince(), "filter.until": f.GetUntil()} {
		if err == nil && ts != nil {
			if e := ts.CheckValid(); e != nil {
				err = fmt.Errorf("%s: %w", name, e)
			}
		}
	}
	if _, known := rivorav1.DeadReason_name[int32(f.GetReason())]; err == nil && !known {
		err = fmt.Errorf("filter.reason %d is not a dead-letter reason (max_attempts, window, deleted, manual, idempotency_conflict)", f.GetReason())
	}
	if err == nil && f.GetSince() != nil && f.GetUntil() != nil && !f.GetSince().AsTime().Before(f.GetUntil().AsTime()) {
		err = fmt.Errorf("filter.since (%s) must be before filter.until (%s)", f.GetSince().AsTime().Format(time.RFC3339), f.GetUntil().AsTime().Format(time.RFC3339))
	}
	return errkind.Tag(errkind.Invalid, err)
}

// matches reports whether a dead letter passes a filter.
func matches(f *rivorav1.DeadLetterFilter, dl *rivorav1.DeadLetter) bool {
	ev := dl.GetEvent()
	switch {
	case f.GetDestinationId() != "" && ev.GetDestinationId() != f.GetDestinationId():
		return false
	case f.GetCustomerId() != "" && ev.GetCustomerId() != f.GetCustomerId():
		return false
	case f.GetLaneKey() != "" && ev.GetLaneKey() != f.GetLaneKey():
		return false
	case f.GetSubscriptionId() != "" && ev.GetSubscriptionId() != f.GetSubscriptionId():
		return false
	case f.GetSince() != nil && dl.GetDeadAt().AsTime().Before(f.GetSince().AsTime()):
		return false
	case f.GetUntil() != nil && !dl.GetDeadAt().AsTime().Before(f.GetUntil().AsTime()):
		return false
	case f.GetReason() != rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED && dl.GetReason() != f.GetReason():
		return false
	}
	return true
}

// objects lists the objects of arch that may hold matches, in lane order.
// Object keys carry the hour their dead letters died in, so a time filter
// skips whole hours (up to the hour after now).
func objects(ctx context.Context, arch archive.Archive, f *rivorav1.DeadLetterFilter, now time.Time) ([]string, error) {
	prefixes := []string{archive.Prefix}
	if d := f.GetDestinationId(); d != "" {
		prefixes = []string{archive.DestinationPrefix(d)}
		if f.GetSince() != nil {
			if hours := hourPrefixes(d, f.GetSince().AsTime(), now); hours != nil {
				prefixes = hours
			}
		}
	}
	var keys []string
	for _, prefix := range prefixes {
		k, err := arch.List(ctx, prefix)
		if err != nil {
			return nil, archiveError(err)
		}
		keys = append(keys, k...)
	}
	out := keys[:0]
	for _, k := range keys {
		if hour, ok := keyHour(k); ok {
			if f.GetUntil() != nil && !hour.Before(f.GetUntil().AsTime()) {
				continue
			}
			if f.GetSince() != nil && hour.Add(time.Hour).Before(f.GetSince().AsTime()) {
				continue
			}
		}
		out = append(out, k)
	}
	return out, nil
}

// archiveError tags a failure to read the archive: Precondition when the
// store refused access (waiting does not fix credentials or a bucket; the
// message names the flags that set them), else Unavailable.
func archiveError(err error) error {
	if code, refused := archive.Refused(err); refused {
		return errkind.Tag(errkind.Precondition, fmt.Errorf("the archive refused access (%s): check the agent's --s3-access-key, --s3-secret-key and --s3-bucket: %w", code, err))
	}
	return errkind.Tag(errkind.Unavailable, err)
}

// maxHourLists bounds listing a destination hour by hour: a since
// further back lists its whole prefix instead.
const maxHourLists = 48

// hourPrefixes are the key prefixes of one destination's objects from
// since's hour to the hour after now (a clock a little ahead), in key
// order; nil when that is more than maxHourLists hours. Listing them
// instead of the destination's whole prefix keeps a recent since cheap
// however large the archive (the operator notices ask every few seconds).
func hourPrefixes(destination string, since, now time.Time) []string {
	start := since.UTC().Truncate(time.Hour)
	end := now.UTC().Add(time.Hour)
	if end.Sub(start) > maxHourLists*time.Hour {
		return nil
	}
	var out []string
	for h := start; !h.After(end); h = h.Add(time.Hour) {
		out = append(out, archive.HourPrefix(destination, h))
	}
	return out
}

// keyHour reads the hour out of deadletter/<dest>/<yyyy>/<mm>/<dd>/<hh>/….
func keyHour(key string) (time.Time, bool) {
	parts := strings.Split(key, "/")
	if len(parts) < 7 {
		return time.Time{}, false
	}
	t, err := time.Parse(archive.HourLayout, strings.Join(parts[2:6], "/"))
	return t, err == nil
}

func (s *Service) ListDeadLetters(ctx context.Context, req *connect.Request[rivorav1.ListDeadLettersRequest]) (*connect.Response[rivorav1.ListDeadLettersResponse], error) {
	f := req.Msg.GetFilter()
	if err := checkFilter(f); err != nil {
		return nil, err
	}
	// A limit over the bound (or none) is the bound: the answer says
	// truncated when more match, as for any limit.
	limit := int(req.Msg.GetLimit())
	if limit <= 0 || limit > bounds.DeadLetterList {
		limit = bounds.DeadLetterList
	}
	if req.Msg.GetLedgersOnly() {
		return connect.NewResponse(s.listWaiting(ctx, f, limit)), nil
	}
	arch := s.reachArchive()
	resp, err := s.listArchived(ctx, arch, f, limit)
	if why, down := archiveDown(ctx, arch, err); down {
		resp = s.listWaiting(ctx, f, limit)
		resp.ArchiveUnavailable = why
		return connect.NewResponse(resp), nil
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// listArchived lists the archive's dead letters that match f, at most
// limit.
func (s *Service) listArchived(ctx context.Context, arch archive.Archive, f *rivorav1.DeadLetterFilter, limit int) (*rivorav1.ListDeadLettersResponse, error) {
	keys, err := objects(ctx, arch, f, time.Now())
	if err != nil {
		return nil, err
	}
	resp := &rivorav1.ListDeadLettersResponse{}
	marks := newReplayMarks(s.replay.marks)
	// A dead letter archived twice (deathKey) is listed once, replayed
	// when either line is marked.
	listed := map[idKey]*rivorav1.DeadLetter{}
	for _, k := range keys {
		dls, err := arch.Get(ctx, k)
		if err != nil {
			return nil, archiveError(err)
		}
		for i, dl := range dls {
			if !matches(f, dl) {
				continue
			}
			death := deathKey(dl)
			if first, ok := listed[death]; ok {
				if first.GetReplayedAt() == nil {
					s.showMarks(ctx, marks, first, k, i)
				}
				continue
			}
			if len(resp.DeadLetters) == limit {
				resp.Truncated = true
				return resp, nil
			}
			dl.Event.Payload = nil
			s.showMarks(ctx, marks, dl, k, i)
			listed[death] = dl
			resp.DeadLetters = append(resp.DeadLetters, dl)
		}
	}
	return resp, nil
}

func (s *Service) GetDeadLetter(ctx context.Context, req *connect.Request[rivorav1.GetDeadLetterRequest]) (*connect.Response[rivorav1.GetDeadLetterResponse], error) {
	id := req.Msg.GetEventId()
	if id == "" {
		return nil, errkind.Errorf(errkind.Invalid, "event_id is empty")
	}
	if err := lanes.ValidateEventID("event_id", id); err != nil {
		return nil, errkind.Tag(errkind.Invalid, err)
	}
	if err := checkFilter(&rivorav1.DeadLetterFilter{DestinationId: req.Msg.GetDestinationId()}); err != nil {
		return nil, err
	}
	if req.Msg.GetLedgersOnly() {
		resp, err := s.getWaiting(ctx, id, req.Msg.GetDestinationId())
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(resp), nil
	}
	arch := s.reachArchive()
	found, lines, err := s.latest(ctx, arch, id, req.Msg.GetDestinationId())
	if why, down := archiveDown(ctx, arch, err); down {
		return s.getWhileArchiveDown(ctx, id, req.Msg.GetDestinationId(), why)
	}
	if err != nil {
		return nil, err
	}
	marks := newReplayMarks(s.replay.marks)
	for _, l := range lines {
		if found.GetDeadLetter().GetReplayedAt() == nil {
			s.showMarks(ctx, marks, found.GetDeadLetter(), l.object, l.line)
		}
	}
	return connect.NewResponse(found), nil
}

// archiveLine is a line of an archive object.
type archiveLine struct {
	object string
	line   int
}

// deathLines track the latest death of an event read so far, and every
// line that holds it (a dead letter archived twice has two).
type deathLines struct {
	found *rivorav1.GetDeadLetterResponse
	death idKey
	lines []archiveLine
}

func (d *deathLines) add(dl *rivorav1.DeadLetter, k string, i int) {
	death := deathKey(dl)
	if d.found == nil || death != d.death {
		d.death, d.lines = death, nil
	}
	d.found = &rivorav1.GetDeadLetterResponse{DeadLetter: dl, Object: k}
	d.lines = append(d.lines, archiveLine{k, i})
}

// latest finds event id's latest dead letter in the archive (an event
// replayed and dead again has one per death), with its object, and the
// lines that hold it (its last first).
func (s *Service) latest(ctx context.Context, arch archive.Archive, id, destinationID string) (*rivorav1.GetDeadLetterResponse, []archiveLine, error) {
	filter := &rivorav1.DeadLetterFilter{DestinationId: destinationID}
	if err := checkFilter(filter); err != nil {
		return nil, nil, err
	}
	keys, err := objects(ctx, arch, filter, time.Now())
	if err != nil {
		return nil, nil, err
	}
	// A UUID typed in upper case is found as Rivora writes its ids, in
	// lower case (lanes.LowerEventID), unless an id matches as typed.
	lower, _ := lanes.LowerEventID(id)
	var exact, lowered deathLines
	for _, k := range keys {
		dls, err := arch.Get(ctx, k)
		if err != nil {
			return nil, nil, archiveError(err)
		}
		for i, dl := range dls {
			switch dl.GetEvent().GetEventId() {
			case id:
				exact.add(dl, k, i)
			case lower:
				lowered.add(dl, k, i)
			}
		}
	}
	found := exact
	if found.found == nil && lower != "" {
		found = lowered
	}
	if found.found == nil {
		// The same answer as for another customer's (auth.Policies).
		return nil, nil, auth.DeadLetterNotFound(id)
	}
	slices.Reverse(found.lines)
	return found.found, found.lines, nil
}

// ForResend is event id's latest dead letter, for a resend, and how to
// record that the resend re-accepted it, as a replay's mark (the REPLAYED
// column): no later replay sends that death again, and a death of the
// resent copy is told from it (replay's repeats). Pass mark a time taken
// before the resend was stored (a death of the resent copy comes after
// it), once it was stored or found stored already.
func (s *Service) ForResend(ctx context.Context, id, destinationID string) (*rivorav1.DeadLetter, func(ctx context.Context, at time.Time) error, error) {
	found, lines, err := s.latest(ctx, s.archive, id, destinationID)
	if err != nil {
		return nil, nil, err
	}
	// Every line that holds the death is marked: a list, stats or
	// replay reading either finds it handled.
	mark := func(ctx context.Context, at time.Time) error {
		marks := newReplayMarks(s.replay.marks)
		for _, l := range lines {
			if err := marks.mark(ctx, l.object, []int{l.line}, at.UnixMilli()); err != nil {
				return err
			}
		}
		return nil
	}
	return found.GetDeadLetter(), mark, nil
}

// showMarks sets dl.ReplayedAt from the replay marks. The marks only add
// to the answer: when they cannot be read, the dead letter is answered
// without (and the failure logged).
func (s *Service) showMarks(ctx context.Context, marks *replayMarks, dl *rivorav1.DeadLetter, object string, line int) {
	if err := marks.show(ctx, dl, object, line); err != nil {
		s.log.Warn("dead letter answered without its replay mark", "object", object, "error", err)
	}
}

func (s *Service) DeadLetterStats(ctx context.Context, req *connect.Request[rivorav1.DeadLetterStatsRequest]) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
	f := req.Msg.GetFilter()
	if err := checkFilter(f); err != nil {
		return nil, err
	}
	if req.Msg.GetLedgersOnly() {
		return connect.NewResponse(s.statsWaiting(ctx, f, req.Msg.GetBySubscription())), nil
	}
	arch := s.reachArchive()
	resp, err := s.statsArchived(ctx, arch, f, req.Msg.GetBySubscription())
	if why, down := archiveDown(ctx, arch, err); down {
		resp = s.statsWaiting(ctx, f, req.Msg.GetBySubscription())
		resp.ArchiveUnavailable = why
		return connect.NewResponse(resp), nil
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// statsArchived counts the archive's dead letters that match f.
func (s *Service) statsArchived(ctx context.Context, arch archive.Archive, f *rivorav1.DeadLetterFilter, bySubscription bool) (*rivorav1.DeadLetterStatsResponse, error) {
	keys, err := objects(ctx, arch, f, time.Now())
	if err != nil {
		return nil, err
	}
	counts := newCounter()
	counts.bySubscription = bySubscription
	marks := newReplayMarks(s.replay.marks)
	// A dead letter archived twice (deathKey) counts once, as replayed
	// when either line is marked: counted are the deaths counted, by
	// their group (nil once counted as replayed). Its lines are all in one
	// hour directory (hours), so counted holds one hour's.
	var counted map[idKey]*rivorav1.DeadLetterCount
	hour := ""
	for _, k := range keys {
		if path.Dir(k) != hour {
			hour, counted = path.Dir(k), map[idKey]*rivorav1.DeadLetterCount{}
		}
		dls, err := arch.Get(ctx, k)
		if err != nil {
			return nil, archiveError(err)
		}
		// Those a replay handled are counted apart, as dlq list's
		// REPLAYED column shows them; as for a list, marks that cannot be
		// read leave the dead letters counted, none as replayed.
		if _, err := marks.load(ctx, k); err != nil {
			s.log.Warn("dead letters counted without their replay marks", "object", k, "error", err)
		}
		for i, dl := range dls {
			if !matches(f, dl) {
				continue
			}
			death := deathKey(dl)
			n, ok := counted[death]
			if !ok {
				n = counts.add(dl, true)
				counted[death] = n
			}
			if _, replayed := marks.handledAt(k, i); replayed && n != nil {
				n.Replayed++
				counts.replayed++
				counted[death] = nil
			}
		}
		marks.forget(k)
	}
	return &rivorav1.DeadLetterStatsResponse{Counts: counts.newestFirst(), Total: counts.total, Replayed: counts.replayed, Objects: int64(len(keys))}, nil
}

// counter groups dead letters by destination, customer (and reason, and
// subscription when bySubscription).
type counter struct {
	byKey          map[string]*rivorav1.DeadLetterCount
	total          int64
	replayed       int64
	bySubscription bool
}

func newCounter() *counter { return &counter{byKey: make(map[string]*rivorav1.DeadLetterCount)} }

// add counts dl and returns its group's count.
func (c *counter) add(dl *rivorav1.DeadLetter, byReason bool) *rivorav1.DeadLetterCount {
	ev := dl.GetEvent()
	reason := rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED
	if byReason {
		reason = dl.GetReason()
	}
	subscription := ""
	if c.bySubscription {
		subscription = ev.GetSubscriptionId()
	}
	k := ev.GetDestinationId() + "\x00" + ev.GetCustomerId() + "\x00" + subscription + "\x00" + reason.String()
	n := c.byKey[k]
	if n == nil {
		n = &rivorav1.DeadLetterCount{
			DestinationId: ev.GetDestinationId(), CustomerId: ev.GetCustomerId(), SubscriptionId: subscription, Reason: reason,
			Oldest: dl.GetDeadAt(), Newest: dl.GetDeadAt(),
		}
		c.byKey[k] = n
	}
	n.Count++
	c.total++
	if dl.GetDeadAt().AsTime().Before(n.GetOldest().AsTime()) {
		n.Oldest = dl.GetDeadAt()
	}
	if dl.GetDeadAt().AsTime().After(n.GetNewest().AsTime()) {
		n.Newest = dl.GetDeadAt()
	}
	return n
}

func (c *counter) list() []*rivorav1.DeadLetterCount {
	out := make([]*rivorav1.DeadLetterCount, 0, len(c.byKey))
	for _, n := range c.byKey {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GetDestinationId() != out[j].GetDestinationId() {
			return out[i].GetDestinationId() < out[j].GetDestinationId()
		}
		if out[i].GetCustomerId() != out[j].GetCustomerId() {
			return out[i].GetCustomerId() < out[j].GetCustomerId()
		}
		if out[i].GetSubscriptionId() != out[j].GetSubscriptionId() {
			return out[i].GetSubscriptionId() < out[j].GetSubscriptionId()
		}
		return out[i].GetReason() < out[j].GetReason()
	})
	return out
}

// newestFirst lists the counts by their newest dead letter, newest first
// (then as list does): what a view that opens on what there is shows
// first.
func (c *counter) newestFirst() []*rivorav1.DeadLetterCount {
	out := c.list()
	sort.SliceStable(out, func(i, j int) bool { return out[i].GetNewest().AsTime().After(out[j].GetNewest().AsTime()) })
	return out
}

// Replay re-ingests matching dead letters in archive order (lane order):
// the engine (Replay.Run) replays, this sends its progress on the stream.
// A replay that began (not a dry run) is audited however it ends.
func (s *Service) Replay(ctx context.Context, req *connect.Request[rivorav1.ReplayRequest], stream *connect.ServerStream[rivorav1.ReplayResponse]) error {
	m := req.Msg
	r := ReplayRequest{Filter: m.GetFilter(), Rate: m.RatePerSecond, DryRun: m.GetDryRun(), Restart: m.GetRestart(), SkipDeletedSubscriptions: m.GetSkipDeletedSubscriptions()}
	began := false
	end, err := s.replay.Run(ctx, r, func(p Progress) error {
		if err := stream.Send(progressMessage(p)); err != nil {
			return err
		}
		if !began && !r.DryRun {
			began = true
			s.auditBegan(ctx, r, p)
		}
		return nil
	})
	if began {
		err = s.audited(ctx, r, end, err)
	}
	return err
}

func progressMessage(p Progress) *rivorav1.ReplayResponse {
	return &rivorav1.ReplayResponse{
		Total: p.Total, Replayed: p.Replayed, Skipped: p.Skipped, RatePerSecond: p.RatePerSecond,
		Counts: p.Counts, Done: p.Done, Refused: p.Refused, Renamed: p.Renamed,
		DeletedSubscriptionDeadLetters: p.Deleted.DeadLetters, DeletedSubscriptions: p.Deleted.Subscriptions,
		DeletedSubscriptionCount: p.Deleted.Count, ReplayedByAnother: p.ReplayedByAnother,
	}
}

// audited records a replay that began, however it ended (err), and
// returns err — or, when the replay itself succeeded, why it is not
// audited. An interrupted replay is recorded too: its caller is gone, so
// the record is made outside the call's cancellation.
func (s *Service) audited(ctx context.Context, r ReplayRequest, progress Progress, err error) error {
	if s.audit == nil {
		return err
	}
	f := r.Filter
	detail := fmt.Sprintf("%d of %d matching dead letters replayed (%d skipped)", progress.Replayed, progress.Total, progress.Skipped)
	if n := progress.ReplayedByAnother; n > 0 {
		detail += fmt.Sprintf("; %d replayed by another replay meanwhile", n)
	}
	if d := progress.Deleted; d.DeadLetters > 0 {
		detail += fmt.Sprintf("; %s left in the archive, routed by %s", plural(d.DeadLetters, "dead letter"), d.named())
	}
	if err != nil {
		detail += "; stopped: " + errkind.CodeOf(err).String()
	}
	detail += replayScope(r)
	auditCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	aerr := s.audit(auditCtx, &rivorav1.AuditEntry{Action: "deadletters.replay", DestinationId: f.GetDestinationId(), Detail: detail})
	if aerr != nil {
		s.log.Warn("replay's end not audited yet (the agent retries it unless refused)", "destination", f.GetDestinationId(), "err", aerr)
		// Queued for a control plane's return: the replay is done, and an
		// error would invite running it again (which adds audit entries).
		if err == nil && !errors.Is(aerr, upstream.ErrAuditQueued) {
			return errkind.Tag(errkind.Unavailable, aerr)
		}
	}
	return err
}

// auditBegan records a replay as it begins (deadletters.replay.began):
// one whose agent dies midway is not recorded when it ends, and what it
// re-accepted meanwhile is delivered all the same. A failed record is
// logged; the record of its end says whether it could be written.
func (s *Service) auditBegan(ctx context.Context, r ReplayRequest, p Progress) {
	if s.audit == nil {
		return
	}
	detail := fmt.Sprintf("replaying %d matching dead letters (%d skipped)", p.Total, p.Skipped)
	if d := p.Deleted; d.DeadLetters > 0 {
		detail += fmt.Sprintf("; leaving %s in the archive, routed by %s", plural(d.DeadLetters, "dead letter"), d.named())
	}
	detail += replayScope(r)
	auditCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.audit(auditCtx, &rivorav1.AuditEntry{Action: "deadletters.replay.began", DestinationId: r.Filter.GetDestinationId(), Detail: detail}); err != nil {
		s.log.Warn("replay's start not audited (the agent retries it unless refused)", "destination", r.Filter.GetDestinationId(), "err", err)
	}
}

// replayScope is a replay's filter and options beyond its destination,
// as its audit records say them: " (customer acme, reason window, …)",
// or "" when there are none.
func replayScope(r ReplayRequest) string {
	f := r.Filter
	var scope []string
	for _, kv := range [][2]string{{"customer", f.GetCustomerId()}, {"lane", f.GetLaneKey()}, {"subscription", f.GetSubscriptionId()}} {
		if kv[1] != "" {
			scope = append(scope, kv[0]+" "+kv[1])
		}
	}
	if f.GetSince() != nil {
		scope = append(scope, "since "+f.GetSince().AsTime().UTC().Format(time.RFC3339))
	}
	if f.GetUntil() != nil {
		scope = append(scope, "until "+f.GetUntil().AsTime().UTC().Format(time.RFC3339))
	}
	if f.GetReason() != rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED {
		scope = append(scope, "reason "+strings.ToLower(strings.TrimPrefix(f.GetReason().String(), "DEAD_REASON_")))
	}
	if r.Rate != nil {
		scope = append(scope, fmt.Sprintf("at %g/s", *r.Rate))
	}
	if r.Restart {
		scope = append(scope, "restarted: sending again what earlier replays re-accepted")
	}
	if r.SkipDeletedSubscriptions {
		scope = append(scope, "skipping deleted subscriptions' dead letters")
	}
	if len(scope) == 0 {
		return ""
	}
	return " (" + strings.Join(scope, ", ") + ")"
}
