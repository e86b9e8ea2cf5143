// Package checker judges a faulted run of a cell after the fact, in the
// style of Jepsen's checkers: from what the publishers had acknowledged,
// what the partners received, what was archived, and when each agent
// owned each partition (its log), it counts what must never happen —
// acknowledged events lost, lanes delivered out of order, writes by an
// owner that had been fenced off, events whose window ended but that were
// never archived — and the duplicates at-least-once allows, each with its
// explanation.
//
// It does no I/O except ParseOwnership reading logs; the e2e tests and
// the chaos run feed it (History) and print its Verdict.
package checker

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Publish is one acknowledged publish: the event's id and where it sits
// in its lane's publish order. A lane's events are published one after
// the other, each once the previous was acknowledged.
type Publish struct {
	ID          string
	Destination string
	Customer    string
	Lane        string // the lane key
	Seq         int    // 0, 1, 2, … within (destination, customer, lane)
	Partition   int
}

// Delivery is one request a partner received (any answer).
type Delivery struct {
	ID          string // webhook-id
	Destination string
	Partition   int
	Agent       string // who sent it (rivora's user-agent)
	Status      int
	At          time.Time
}

// Term is one stretch in which an agent held a partition's lock: from
// (its log line "partition owned", with the lock's epoch) to its stop
// (lost, handed off, failed, or the process's end; zero: still owning).
type Term struct {
	Partition int
	Agent     string
	Epoch     uint64
	From      time.Time
	To        time.Time
}

// History is everything the checker judges.
type History struct {
	Acked      []Publish
	Deliveries []Delivery
	Terms      []Term
	// Archived are the ids in the dead-letter archive.
	Archived []string
	// Expired are acknowledged ids whose window ended before the check
	// (they must be archived, unless delivered).
	Expired []string
	// StopGrace is how long after an agent's own stop a request of an
	// attempt already in flight may still arrive (default 2s).
	StopGrace time.Duration
}

// Verdict is the checker's answer. Lost, ReorderedLanes,
// OverlappingWriters, StaleDeliveries and Unarchived must be 0;
// Duplicates are allowed when explained.
type Verdict struct {
	Acked          int `json:"acked"`
	Delivered      int `json:"delivered"` // acked events delivered with a 2xx
	Archived       int `json:"archived"`  // acked events archived and never delivered
	Lost           int `json:"lost"`
	ReorderedLanes int `json:"reordered_lanes"`
	Duplicates     int `json:"duplicates"` // 2xx deliveries beyond each event's first
	// DuplicatesExplained: the 2xx deliveries of the event came from
	// different ownership terms (the first's outcome was lost with its
	// owner, the next owner sent it again).
	DuplicatesExplained int `json:"duplicates_explained"`
	// OverlappingWriters: (partition, agent, epoch) that wrote after a
	// newer epoch of the partition was granted — two writers at once.
	OverlappingWriters int `json:"overlapping_writers"`
	// StaleDeliveries: requests an agent sent for a partition after it
	// had stopped owning it (beyond StopGrace), or never owned.
	StaleDeliveries int `json:"stale_deliveries"`
	Unarchived      int `json:"unarchived"` // expired, never delivered, not archived
	// Unacked are deliveries of ids nobody saw acknowledged (a publish
	// that failed after the event was stored): not errors.
	Unacked int `json:"unacked_delivered"`
	// Examples of each problem, a few each, for the log.
	Problems []string `json:"problems,omitempty"`
}

// maxExamples bounds Problems per kind.
const maxExamples = 5

// OK is nil when nothing that must not happen happened.
func (v Verdict) OK() error {
	var errs []string
	add := func(n int, what string) {
		if n > 0 {
			errs = append(errs, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(v.Lost, "acknowledged events lost")
	add(v.ReorderedLanes, "lanes delivered out of order")
	add(v.OverlappingWriters, "overlapping writers")
	add(v.StaleDeliveries, "deliveries by a non-owner")
	add(v.Unarchived, "expired events not archived")
	add(v.Duplicates-v.DuplicatesExplained, "unexplained duplicates")
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, ", ") + ": " + strings.Join(v.Problems, "; "))
}

// JSON is the verdict as one line.
func (v Verdict) JSON() string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Check judges h.
func Check(h History) Verdict {
	if h.StopGrace == 0 {
		h.StopGrace = 2 * time.Second
	}
	deliveries := slices.Clone(h.Deliveries)
	sort.SliceStable(deliveries, func(i, j int) bool { return deliveries[i].At.Before(deliveries[j].At) })
	c := &run{h: h, deliveries: deliveries, problems: map[string]int{}}
	c.outcomes()
	c.order()
	c.writers()
	c.duplicates()
	return c.v
}

type run struct {
	h          History
	deliveries []Delivery // by arrival
	v          Verdict
	problems   map[string]int // examples so far, per kind
}

func (c *run) problem(kind, format string, args ...any) {
	if c.problems[kind] < maxExamples {
		c.v.Problems = append(c.v.Problems, kind+": "+fmt.Sprintf(format, args...))
	}
	c.problems[kind]++
}

// outcomes counts delivered, archived, lost and unarchived events.
func (c *run) outcomes() {
	acked := map[string]bool{}
	for _, p := range c.h.Acked {
		acked[p.ID] = true
	}
	ok := map[string]bool{}
	for _, d := range c.deliveries {
		if d.Status/100 == 2 {
			ok[d.ID] = true
		}
		if !acked[d.ID] {
			c.v.Unacked++
		}
	}
	archived := map[string]bool{}
	for _, id := range c.h.Archived {
		archived[id] = true
	}
	c.v.Acked = len(acked)
	for id := range acked {
		switch {
		case ok[id]:
			c.v.Delivered++
		case archived[id]:
			c.v.Archived++
		default:
			c.v.Lost++
			c.problem("lost", "%s acknowledged, never delivered nor archived", id)
		}
	}
	for _, id := range c.h.Expired {
		if !ok[id] && !archived[id] {
			c.v.Unarchived++
			c.problem("unarchived", "%s: window ended, not archived", id)
		}
	}
}

// order: within a lane, a request for an event is sent only once every
// earlier event of the lane was delivered (2xx) or archived.
func (c *run) order() {
	type pos struct {
		lane string
		seq  int
	}
	where := map[string]pos{}
	lanes := map[string][]string{} // lane → ids by seq
	for _, p := range c.h.Acked {
		lane := p.Destination + "/" + p.Customer + "/" + p.Lane
		where[p.ID] = pos{lane, p.Seq}
		lanes[lane] = append(lanes[lane], p.ID)
	}
	bySeq := map[string]map[int]string{}
	for lane, ids := range lanes {
		bySeq[lane] = map[int]string{}
		for _, id := range ids {
			bySeq[lane][where[id].seq] = id
		}
	}
	archived := map[string]bool{}
	for _, id := range c.h.Archived {
		archived[id] = true
	}
	done := map[string]bool{}
	// frontier[lane]: every seq below it is done (delivered or archived).
	frontier := map[string]int{}
	bad := map[string]bool{}
	for _, d := range c.deliveries {
		p, known := where[d.ID]
		if !known {
			continue
		}
		f := frontier[p.lane]
		for {
			id, ok := bySeq[p.lane][f]
			if !ok || !(done[id] || archived[id]) {
				break
			}
			f++
		}
		frontier[p.lane] = f
		if p.seq > f && !bad[p.lane] {
			bad[p.lane] = true
			c.problem("reordered", "lane %s: #%d (%s) sent by %s at %s while #%d was not yet delivered", p.lane, p.seq, d.ID, d.Agent, d.At.Format("15:04:05.000"), f)
		}
		if d.Status/100 == 2 {
			done[d.ID] = true
		}
	}
	c.v.ReorderedLanes = len(bad)
}

// writers: a request is a write of its partition's owner. One sent by an
// agent whose latest term of the partition (at the request) has an epoch
// older than one already granted is an overlapping write; one sent while
// the agent held no term (StopGrace after a stop allowed) is stale.
func (c *run) writers() {
	terms := map[int][]Term{}
	for _, t := range c.h.Terms {
		terms[t.Partition] = append(terms[t.Partition], t)
	}
	for p := range terms {
		sort.Slice(terms[p], func(i, j int) bool { return terms[p][i].From.Before(terms[p][j].From) })
	}
	overlapping := map[string]bool{}
	for _, d := range c.deliveries {
		var mine *Term
		var newest uint64
		for i, t := range terms[d.Partition] {
			if t.From.After(d.At) {
				break
			}
			newest = max(newest, t.Epoch)
			if t.Agent == d.Agent {
				mine = &terms[d.Partition][i]
			}
		}
		switch {
		case mine == nil:
			c.v.StaleDeliveries++
			c.problem("stale", "%s sent %s (partition %d) at %s without ever owning the partition", d.Agent, d.ID, d.Partition, d.At.Format("15:04:05.000"))
		case mine.Epoch < newest:
			key := fmt.Sprintf("p%d/%s/epoch%d", d.Partition, d.Agent, mine.Epoch)
			if !overlapping[key] {
				overlapping[key] = true
				c.problem("overlap", "%s (epoch %d) sent %s at %s after epoch %d of partition %d was granted", d.Agent, mine.Epoch, d.ID, d.At.Format("15:04:05.000"), newest, d.Partition)
			}
		case !mine.To.IsZero() && d.At.After(mine.To.Add(c.h.StopGrace)):
			c.v.StaleDeliveries++
			c.problem("stale", "%s sent %s (partition %d) at %s, %s after it stopped owning it", d.Agent, d.ID, d.Partition, d.At.Format("15:04:05.000"), d.At.Sub(mine.To).Round(time.Millisecond))
		}
	}
	c.v.OverlappingWriters = len(overlapping)
}

// duplicates counts 2xx deliveries beyond the first per event, explained
// when they came from different terms (agent or epoch).
func (c *run) duplicates() {
	terms := map[int][]Term{}
	for _, t := range c.h.Terms {
		terms[t.Partition] = append(terms[t.Partition], t)
	}
	termOf := func(d Delivery) string {
		best := ""
		var from time.Time
		for _, t := range terms[d.Partition] {
			if t.Agent == d.Agent && !t.From.After(d.At) && !t.From.Before(from) {
				best, from = fmt.Sprintf("%s@%d/%s", t.Agent, t.Epoch, t.From.Format(time.RFC3339Nano)), t.From
			}
		}
		return best
	}
	first := map[string]string{} // id → term of its first 2xx
	for _, d := range c.deliveries {
		if d.Status/100 != 2 {
			continue
		}
		term := termOf(d)
		prev, seen := first[d.ID]
		if !seen {
			first[d.ID] = term
			continue
		}
		c.v.Duplicates++
		if term != prev {
			c.v.DuplicatesExplained++
		} else {
			c.problem("duplicate", "%s delivered twice by %s in one term", d.ID, d.Agent)
		}
	}
}
