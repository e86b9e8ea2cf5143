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
	// Customer and Lane, when set, must match.
	Customer, Lane string
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
	// appears once, at its latest.
	Events []Finished
	// Truncated: more events matched than Limit.
	Truncated bool
	// SearchedBackTo is set when the search stopped at MaxRecords before
	// Since: older history was not searched.
	SearchedBackTo time.Time
}

// List scans write minutes newest first, from Until back to Since, and
// returns the terminal records matching f. Its cost is the records of the
// minutes it reads (all destinations' records are in them), bounded by
// f.MaxRecords; the minutes before the oldest retained record are not
// visited.
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
	if first := info.State.FirstTime; since.Before(first) {
		since = first
	}
	s := scan{f: f, since: since, until: until, seen: make(map[string]bool)}
	for w := Minute(until); w >= Minute(since) && !s.done; w-- {
		if err := h.scanMinute(ctx, &s, w); err != nil {
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

// scanMinute adds the matching records written in minute w, newest first.
func (h *History) scanMinute(ctx context.Context, s *scan, w int64) error {
	subjects, err := h.subjects(ctx, fmt.Sprintf("%s%d.*.*", outcomePrefix, w))
	if err != nil {
		return err
	}
	total := 0
	for _, sc := range subjects {
		total += int(sc.count)
	}
	if s.read > 0 && s.read+total > s.f.MaxRecords {
		s.out.SearchedBackTo = time.Unix((w+1)*60, 0).UTC()
		s.done = true
		return nil
	}
	s.read += total
	var found []Finished
	for _, sc := range subjects {
		err := h.read(ctx, sc.name, sc.count, func(r record) error {
			if fin, ok := s.match(r); ok {
				found = append(found, fin)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	slices.SortFunc(found, func(x, y Finished) int { return y.At.Compare(x.At) })
	for _, fin := range found {
		id := fin.Outcome.GetEventId()
		if s.seen[id] {
			continue
		}
		s.seen[id] = true
		if len(s.out.Events) == s.f.Limit {
			s.out.Truncated, s.done = true, true
			return nil
		}
		s.out.Events = append(s.out.Events, fin)
	}
	return nil
}

// match decodes r when it may match the filter (records of other
// destinations are skipped undecoded).
func (s *scan) match(r record) (Finished, bool) {
	if r.at.Before(s.since) || r.at.After(s.until) || !bytes.Contains(r.data, []byte(s.f.Destination)) {
		return Finished{}, false
	}
	o := &rivorav1.EventOutcome{}
	if err := proto.Unmarshal(r.data, o); err != nil {
		return Finished{}, false
	}
	f := s.f
	switch {
	case o.GetDestinationId() != f.Destination,
		f.Customer != "" && o.GetCustomerId() != f.Customer,
		f.Lane != "" && o.GetLaneKey() != f.Lane,
		!f.wants(o.GetKind()):
		return Finished{}, false
	}
	return Finished{Outcome: o, At: r.at}, true
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
