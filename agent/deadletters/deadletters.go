// Package deadletters serves the archive (tier 3) to people: list, show and
// count dead letters, and replay them through ingest with a checkpoint so
// an interrupted replay resumes where it stopped.
package deadletters

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/bounds"
	"github.com/rivora/rivora/internal/rates"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Reingester accepts dead letters again (the ingest gateway).
type Reingester interface {
	Reingest(ctx context.Context, dls []*rivorav1.DeadLetter) (stored, duplicates int, err error)
}

// Service implements rivora.v1.ArchiveService.
type Service struct {
	archive     archive.Archive
	ingest      Reingester
	checkpoints jetstream.KeyValue
	log         *slog.Logger
	// audit records a replay in the audit log, its author the caller of
	// ctx's call (nil: not recorded).
	audit func(ctx context.Context, e *rivorav1.AuditEntry) error
}

// CheckpointBucket is the KV bucket holding replay checkpoints.
const CheckpointBucket = "REPLAY_CHECKPOINTS"

// New returns the service, creating the checkpoint bucket if needed.
// audit (nil: none) makes every replay (not a dry run) an audit entry,
// recorded when it ends: what it replayed, and how it ended. replicas is
// the bucket's replica count in a cell (0 means 1).
func New(ctx context.Context, js jetstream.JetStream, arch archive.Archive, ingest Reingester, audit func(ctx context.Context, e *rivorav1.AuditEntry) error, replicas int, log *slog.Logger) (*Service, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      CheckpointBucket,
		Description: "Where each replay (by filter) got to, so a re-run resumes.",
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", CheckpointBucket, err)
	}
	return &Service{archive: arch, ingest: ingest, checkpoints: kv, log: log, audit: audit}, nil
}

// checkFilter validates a filter like every other request naming a
// destination, customer or lane (lanes.ValidateID, ValidateLaneKey):
// the ids become archive key prefixes, so "../" must never reach the
// archive. Its error is InvalidArgument.
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
	for name, ts := range map[string]*timestamppb.Timestamp{"filter.since": f.GetSince(), "filter.until": f.GetUntil()} {
		if err == nil && ts != nil {
			if e := ts.CheckValid(); e != nil {
				err = fmt.Errorf("%s: %w", name, e)
			}
		}
	}
	if _, known := rivorav1.DeadReason_name[int32(f.GetReason())]; err == nil && !known {
		err = fmt.Errorf("filter.reason %d is not a dead-letter reason (max_attempts, window, deleted, manual)", f.GetReason())
	}
	if err == nil && f.GetSince() != nil && f.GetUntil() != nil && !f.GetSince().AsTime().Before(f.GetUntil().AsTime()) {
		err = fmt.Errorf("filter.since (%s) must be before filter.until (%s)", f.GetSince().AsTime().Format(time.RFC3339), f.GetUntil().AsTime().Format(time.RFC3339))
	}
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	return nil
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
	case f.GetSince() != nil && dl.GetDeadAt().AsTime().Before(f.GetSince().AsTime()):
		return false
	case f.GetUntil() != nil && !dl.GetDeadAt().AsTime().Before(f.GetUntil().AsTime()):
		return false
	case f.GetReason() != rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED && dl.GetReason() != f.GetReason():
		return false
	}
	return true
}

// objects lists the archive objects that may hold matches, in lane order.
// Object keys carry the hour their dead letters died in, so a time filter
// skips whole hours.
func (s *Service) objects(ctx context.Context, f *rivorav1.DeadLetterFilter) ([]string, error) {
	prefixes := []string{archive.Prefix}
	if d := f.GetDestinationId(); d != "" {
		prefixes = []string{archive.DestinationPrefix(d)}
		if f.GetSince() != nil {
			if hours := hourPrefixes(d, f.GetSince().AsTime(), time.Now()); hours != nil {
				prefixes = hours
			}
		}
	}
	var keys []string
	for _, prefix := range prefixes {
		k, err := s.archive.List(ctx, prefix)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
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
	keys, err := s.objects(ctx, f)
	if err != nil {
		return nil, err
	}
	resp := &rivorav1.ListDeadLettersResponse{}
	for _, k := range keys {
		dls, err := s.archive.Get(ctx, k)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
		for _, dl := range dls {
			if !matches(f, dl) {
				continue
			}
			if len(resp.DeadLetters) == limit {
				resp.Truncated = true
				return connect.NewResponse(resp), nil
			}
			dl.Event.Payload = nil
			resp.DeadLetters = append(resp.DeadLetters, dl)
		}
	}
	return connect.NewResponse(resp), nil
}

func (s *Service) GetDeadLetter(ctx context.Context, req *connect.Request[rivorav1.GetDeadLetterRequest]) (*connect.Response[rivorav1.GetDeadLetterResponse], error) {
	id := req.Msg.GetEventId()
	if id == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("event_id is empty"))
	}
	if err := lanes.ValidateEventID("event_id", id); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	filter := &rivorav1.DeadLetterFilter{DestinationId: req.Msg.GetDestinationId()}
	if err := checkFilter(filter); err != nil {
		return nil, err
	}
	keys, err := s.objects(ctx, filter)
	if err != nil {
		return nil, err
	}
	var found *rivorav1.GetDeadLetterResponse
	for _, k := range keys {
		dls, err := s.archive.Get(ctx, k)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
		for _, dl := range dls {
			// The latest death wins (an event replayed and dead again).
			if dl.GetEvent().GetEventId() == id {
				found = &rivorav1.GetDeadLetterResponse{DeadLetter: dl, Object: k}
			}
		}
	}
	if found == nil {
		// The same answer as for another customer's (auth.Policies).
		return nil, auth.DeadLetterNotFound(id)
	}
	return connect.NewResponse(found), nil
}

func (s *Service) DeadLetterStats(ctx context.Context, req *connect.Request[rivorav1.DeadLetterStatsRequest]) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
	f := req.Msg.GetFilter()
	if err := checkFilter(f); err != nil {
		return nil, err
	}
	keys, err := s.objects(ctx, f)
	if err != nil {
		return nil, err
	}
	counts := newCounter()
	for _, k := range keys {
		dls, err := s.archive.Get(ctx, k)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
		for _, dl := range dls {
			if matches(f, dl) {
				counts.add(dl, true)
			}
		}
	}
	return connect.NewResponse(&rivorav1.DeadLetterStatsResponse{Counts: counts.list(), Total: counts.total, Objects: int64(len(keys))}), nil
}

// counter groups dead letters by destination, customer (and reason).
type counter struct {
	byKey map[string]*rivorav1.DeadLetterCount
	total int64
}

func newCounter() *counter { return &counter{byKey: make(map[string]*rivorav1.DeadLetterCount)} }

func (c *counter) add(dl *rivorav1.DeadLetter, byReason bool) {
	ev := dl.GetEvent()
	reason := rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED
	if byReason {
		reason = dl.GetReason()
	}
	k := ev.GetDestinationId() + "\x00" + ev.GetCustomerId() + "\x00" + reason.String()
	n := c.byKey[k]
	if n == nil {
		n = &rivorav1.DeadLetterCount{DestinationId: ev.GetDestinationId(), CustomerId: ev.GetCustomerId(), Reason: reason, Oldest: dl.GetDeadAt(), Newest: dl.GetDeadAt()}
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
		return out[i].GetReason() < out[j].GetReason()
	})
	return out
}

// checkpoint is where a replay got to: objects fully replayed, and within
// the current object how many lines.
type checkpoint struct {
	Done    map[string]bool `json:"done"`
	Current string          `json:"current,omitempty"`
	Line    int             `json:"line,omitempty"`
}

// checkpointKey names a replay by its filter.
func checkpointKey(f *rivorav1.DeadLetterFilter) string {
	canon, _ := protojson.MarshalOptions{UseProtoNames: true}.Marshal(f)
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:16])
}

func (s *Service) loadCheckpoint(ctx context.Context, key string) (*checkpoint, error) {
	cp := &checkpoint{Done: map[string]bool{}}
	entry, err := s.checkpoints.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return cp, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(entry.Value(), cp); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", key, err)
	}
	if cp.Done == nil {
		cp.Done = map[string]bool{}
	}
	return cp, nil
}

func (s *Service) saveCheckpoint(ctx context.Context, key string, cp *checkpoint) error {
	data, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	_, err = s.checkpoints.Put(ctx, key, data)
	return err
}

// Replay re-ingests matching dead letters in archive order (lane order).
func (s *Service) Replay(ctx context.Context, req *connect.Request[rivorav1.ReplayRequest], stream *connect.ServerStream[rivorav1.ReplayResponse]) (err error) {
	f := req.Msg.GetFilter()
	if f.GetDestinationId() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("replay needs a destination"))
	}
	if err := checkFilter(f); err != nil {
		return err
	}
	// Unset: as fast as ingest takes them. A rate given must be a real one.
	// A replay's rate has the bounds of a destination's (rates): under
	// 1e-10 the pacer's wait overflowed (unpaced), just above it stalled
	// for years.
	if r := req.Msg.GetRatePerSecond(); req.Msg.RatePerSecond != nil && !rates.Valid(r) {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("rate must be %s (unset: as fast as ingest takes them), got %v", rates.Bound(), r))
	}
	keys, err := s.objects(ctx, f)
	if err != nil {
		return err
	}
	cpKey := checkpointKey(f)
	cp := &checkpoint{Done: map[string]bool{}}
	if !req.Msg.GetRestart() {
		if cp, err = s.loadCheckpoint(ctx, cpKey); err != nil {
			return connect.NewError(connect.CodeUnavailable, err)
		}
	}

	// First pass: count (and, for a dry run, group) what matches.
	counts := newCounter()
	progress := &rivorav1.ReplayResponse{}
	for _, k := range keys {
		dls, err := s.archive.Get(ctx, k)
		if err != nil {
			return connect.NewError(connect.CodeUnavailable, err)
		}
		for i, dl := range dls {
			if !matches(f, dl) {
				continue
			}
			progress.Total++
			if cp.Done[k] || (k == cp.Current && i < cp.Line) {
				progress.Skipped++
				continue
			}
			counts.add(dl, false)
		}
	}
	if req.Msg.GetDryRun() {
		progress.Counts = counts.list()
		progress.Done = true
		return stream.Send(progress)
	}
	if err := stream.Send(progress); err != nil {
		return err
	}
	defer func() { err = s.audited(ctx, req.Msg, progress, err) }()

	pace := newPacer(req.Msg.GetRatePerSecond())
	start := time.Now()
	lastReport := time.Now()
	report := func(force bool) error {
		if !force && time.Since(lastReport) < 200*time.Millisecond {
			return nil
		}
		lastReport = time.Now()
		if secs := time.Since(start).Seconds(); secs > 0 {
			progress.RatePerSecond = float64(progress.Replayed) / secs
		}
		return stream.Send(progress)
	}
	for _, k := range keys {
		if cp.Done[k] {
			continue
		}
		dls, err := s.archive.Get(ctx, k)
		if err != nil {
			return connect.NewError(connect.CodeUnavailable, err)
		}
		first := 0
		if k == cp.Current {
			first = cp.Line
		}
		for i := first; i < len(dls); {
			batch := make([]*rivorav1.DeadLetter, 0, pace.batch())
			end := i
			for ; end < len(dls) && len(batch) < cap(batch); end++ {
				if matches(f, dls[end]) {
					batch = append(batch, dls[end])
				}
			}
			if err := pace.wait(ctx, len(batch)); err != nil {
				return s.stop(ctx, cpKey, cp, err)
			}
			stored, dups, err := s.ingest.Reingest(ctx, batch)
			progress.Replayed += int64(stored)
			progress.Skipped += int64(dups)
			if err != nil {
				return s.stop(ctx, cpKey, cp, err)
			}
			i = end
			cp.Current, cp.Line = k, i
			if err := s.saveCheckpoint(ctx, cpKey, cp); err != nil {
				return connect.NewError(connect.CodeUnavailable, fmt.Errorf("save replay checkpoint: %w", err))
			}
			if err := report(false); err != nil {
				return err
			}
		}
		cp.Done[k] = true
		cp.Current, cp.Line = "", 0
		if err := s.saveCheckpoint(ctx, cpKey, cp); err != nil {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("save replay checkpoint: %w", err))
		}
	}
	progress.Done = true
	progress.Counts = counts.list()
	s.log.Info("replay finished", "destination", f.GetDestinationId(), "replayed", progress.Replayed, "skipped", progress.Skipped)
	return report(true)
}

// audited records a replay that began, however it ended (err), and
// returns err — or, when the replay itself succeeded, why it is not
// audited. An interrupted replay is recorded too: its caller is gone, so
// the record is made outside the call's cancellation.
func (s *Service) audited(ctx context.Context, m *rivorav1.ReplayRequest, progress *rivorav1.ReplayResponse, err error) error {
	if s.audit == nil {
		return err
	}
	f := m.GetFilter()
	detail := fmt.Sprintf("%d of %d matching dead letters replayed (%d skipped)", progress.GetReplayed(), progress.GetTotal(), progress.GetSkipped())
	if err != nil {
		detail += "; stopped: " + connect.CodeOf(err).String()
	}
	var scope []string
	for _, kv := range [][2]string{{"customer", f.GetCustomerId()}, {"lane", f.GetLaneKey()}} {
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
	if m.RatePerSecond != nil {
		scope = append(scope, fmt.Sprintf("at %g/s", m.GetRatePerSecond()))
	}
	if len(scope) > 0 {
		detail += " (" + strings.Join(scope, ", ") + ")"
	}
	auditCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	aerr := s.audit(auditCtx, &rivorav1.AuditEntry{Action: "deadletters.replay", DestinationId: f.GetDestinationId(), Detail: detail})
	if aerr != nil {
		s.log.Warn("replay not audited", "destination", f.GetDestinationId(), "err", aerr)
		if err == nil {
			return connect.NewError(connect.CodeUnavailable, aerr)
		}
	}
	return err
}

// stop ends an interrupted replay; the checkpoint already says where.
func (s *Service) stop(ctx context.Context, key string, cp *checkpoint, err error) error {
	if ctx.Err() != nil {
		s.log.Info("replay interrupted; a re-run resumes", "checkpoint", key, "object", cp.Current, "line", cp.Line)
		return connect.NewError(connect.CodeCanceled, errors.New("replay interrupted; run it again to resume"))
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// pacer spreads re-ingest over time at a rate (0: unpaced).
type pacer struct {
	rate float64
	next time.Time
}

// newPacer paces at rate, held within rates (Replay checked it): the
// wait for n events is then at most 500/rates.Min seconds, far from
// overflowing a time.Duration.
func newPacer(rate float64) *pacer {
	if rate != 0 { // 0: unpaced
		rate = rates.Clamp(rate)
	}
	return &pacer{rate: rate, next: time.Now()}
}

func (p *pacer) batch() int {
	if p.rate <= 0 {
		return 500
	}
	return int(min(500, max(1, p.rate/10)))
}

func (p *pacer) wait(ctx context.Context, n int) error {
	if p.rate <= 0 || n == 0 {
		return ctx.Err()
	}
	if d := time.Until(p.next); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.next = time.Now().Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	return nil
}
