package history

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Filter selects the delivered and dead events List returns.
type Filter struct {
	// Destination is required.
	Destination string
	// Customer, Lane and Subscription, when set, must match.
	Customer, Lane, Subscription string
	// Delivered and Dead select the kinds listed (neither: both).
	Delivered, Dead bool
	// Since and Until bound the time an event was delivered or
	// dead-lettered (zero: now minus the retention; now).
	Since, Until time.Time
	// Limit bounds the events returned (> 0).
	Limit int
	// MaxRecords bounds the records read (DefaultMaxListRecords when 0).
	MaxRecords int
}

// Finished is a delivered or dead event, from its terminal record.
type Finished struct {
	Outcome *rivorav1.EventOutcome
	// At is when it was delivered or dead-lettered.
	At time.Time
}

// Listing is List's answer.
type Listing struct {
	// Events, newest first; an event delivered (or dead) more than once
	// appears once, at its latest, and only when that latest is of a kind
	// the filter asks for.
	Events []Finished
	// Truncated: more events matched than Limit.
	Truncated bool
	// SearchedBackTo is set when the search stopped at MaxRecords before
	// Since: older history was not searched.
	SearchedBackTo time.Time
}

// List scans write buckets newest first, from Until back to Since, and
// returns the terminal records matching f. Its cost is the records of the
// buckets it reads (all destinations' records are in them), bounded by
// f.MaxRecords, and one subject listing per hour; the hours before the
// oldest retained record are not visited.
func (h *History) List(ctx context.Context, f Filter) (Listing, error) {
	if f.Destination == "" || f.Limit <= 0 {
		return Listing{}, fmt.Errorf("list history: destination and a positive limit are required")
	}
	if f.MaxRecords <= 0 {
		f.MaxRecords = DefaultMaxListRecords
	}
	now := h.now()
	until, since := f.Until, f.Since
	if until.IsZero() || until.After(now) {
		until = now
	}
	if oldest := now.Add(-h.retention); since.Before(oldest) {
		since = oldest
	}
	info, err := h.stream.Info(ctx)
	if err != nil {
		return Listing{}, fmt.Errorf("list history: %w", err)
	}
	if info.State.Msgs == 0 {
		return Listing{}, nil
	}
	// No bucket before the oldest message's holds a record; a record is
	// recorded up to a flush interval (and the writer's queue) before its
	// message is stored, hence the slack.
	from := since
	if oldest := info.State.FirstTime.Add(-time.Minute); from.Before(oldest) {
		from = oldest
	}
	s := scan{f: f, since: since, until: until, seen: make(map[string]bool)}
	first, last := Bucket(from), Bucket(until)
	for hour := hourOf(last, BucketWidth); hour >= hourOf(first, BucketWidth) && !s.done; hour-- {
		if err := h.scanHour(ctx, &s, hour, first, last); err != nil {
			return Listing{}, err
		}
	}
	return s.out, nil
}

// scan is the state of one List.
type scan struct {
	f            Filter
	since, until time.Time
	read         int
	seen         map[string]bool
	out          Listing
	done         bool
}

// scanHour reads the buckets of one hour within [first, last], newest
// first.
func (h *History) scanHour(ctx context.Context, s *scan, hour, first, last int64) error {
	subjects, err := subjectsOf(ctx, h.stream, fmt.Sprintf("%s%d.>", outcomePrefix, hour))
	if err != nil {
		return err
	}
	counts := make(map[int64]uint64)
	perBucket := make(map[int64]int)
	var buckets []int64
	for _, sc := range subjects {
		if sc.bucket < first || sc.bucket > last {
			continue
		}
		if counts[sc.bucket] == 0 {
			buckets = append(buckets, sc.bucket)
		}
		counts[sc.bucket] += sc.count
		perBucket[sc.bucket]++
	}
	slices.Sort(buckets)
	for i := len(buckets) - 1; i >= 0 && !s.done; i-- {
		if err := h.scanBucket(ctx, s, hour, buckets[i], counts[buckets[i]], perBucket[buckets[i]]); err != nil {
			return err
		}
	}
	return nil
}

// scanBucket adds the matching records written in bucket w, newest
// first. It reads the bucket in one pass (a wildcard read walks its
// blocks once; one read per subject would walk them once per subject).
// A bucket that takes the records read past MaxRecords is not added (the
// count of records is known only once it is read; before, that it holds
// at least a record per subject, and at least its messages less one index
// per subject).
func (h *History) scanBucket(ctx context.Context, s *scan, hour, w int64, messages uint64, subjects int) error {
	if atLeast := max(subjects, int(messages)-subjects); s.read > 0 && s.read+atLeast > s.f.MaxRecords {
		return s.stopAt(w)
	}
	var found []Finished
	records := 0
	err := h.read(ctx, h.stream, fmt.Sprintf("%s%d.%d.>", outcomePrefix, hour, w), messages, true, func(r record) error {
		mayMatch := bytes.Contains(r.data, []byte(s.f.Destination))
		return eachOutcome(r.data, r.at, func(data []byte, at time.Time) {
			records++
			if !mayMatch || at.Before(s.since) || at.After(s.until) {
				return
			}
			if fin, ok := s.match(at, data); ok {
				found = append(found, fin)
			}
		})
	})
	if err != nil {
		return err
	}
	if s.read > 0 && s.read+records > s.f.MaxRecords {
		return s.stopAt(w)
	}
	s.read += records
	// Newest first; of records recorded at the same time, the later read.
	slices.Reverse(found)
	slices.SortStableFunc(found, func(x, y Finished) int { return y.At.Compare(x.At) })
	for _, fin := range found {
		id := fin.Outcome.GetEventId()
		if s.seen[id] {
			continue
		}
		s.seen[id] = true
		// The kind asked for is the event's latest: one that died, was
		// replayed and then delivered is not listed as dead.
		if !s.f.wants(fin.Outcome.GetKind()) {
			continue
		}
		if len(s.out.Events) == s.f.Limit {
			s.out.Truncated, s.done = true, true
			return nil
		}
		s.out.Events = append(s.out.Events, fin)
	}
	return nil
}

// stopAt ends the scan before bucket w: MaxRecords is reached.
func (s *scan) stopAt(w int64) error {
	s.out.SearchedBackTo = BucketStart(w + 1)
	s.done = true
	return nil
}

// match decodes a record written at when it may match the filter
// (records of other destinations are skipped undecoded).
func (s *scan) match(at time.Time, data []byte) (Finished, bool) {
	if !bytes.Contains(data, []byte(s.f.Destination)) {
		return Finished{}, false
	}
	o := &rivorav1.EventOutcome{}
	if err := proto.Unmarshal(data, o); err != nil {
		return Finished{}, false
	}
	f := s.f
	switch {
	case o.GetDestinationId() != f.Destination,
		f.Customer != "" && o.GetCustomerId() != f.Customer,
		f.Lane != "" && o.GetLaneKey() != f.Lane,
		f.Subscription != "" && o.GetSubscriptionId() != f.Subscription:
		return Finished{}, false
	}
	return Finished{Outcome: o, At: at}, true
}

func (f Filter) wants(k rivorav1.EventOutcome_Kind) bool {
	switch k {
	case rivorav1.EventOutcome_KIND_DELIVERED:
		return f.Delivered || !f.Dead
	case rivorav1.EventOutcome_KIND_DEAD:
		return f.Dead || !f.Delivered
	}
	return false
}
