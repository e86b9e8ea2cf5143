// Package heldtime keeps, across an agent's restarts, the stretches of
// time the agent held destinations and subscriptions whose config it
// could not build (destinations.Destination.UnusableStretches,
// subscriptions.Subscription.UnusableStretches). Like a pause, that time
// does not count against a pending event's window; kept in memory alone,
// a restart forgot it, and an event held for most of its window by a
// config this agent could not build died (reason window) soon after the
// restart.
//
// The stretches are this agent's (another agent, of another version,
// may build the same config), so they are kept in its data directory,
// not in the cell. They change only when a config becomes unusable or
// usable again: the file is written rarely, and holds only the
// destinations and subscriptions that have stretches.
//
// While a stretch is open the agent also notes, every AliveEvery, that
// it is still running (Alive). A stretch open when the agent stopped is
// closed, at the next start, where the agent was last seen running (plus
// AliveEvery): the agent's downtime is not credited to the events'
// windows, any more than it is for a destination that was usable (the
// cell's other agents may have held and attempted those events
// meanwhile). If the destination is still unusable at the first config
// after the restart, a new stretch opens then.
package heldtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/internal/durable"
)

// FileName is the book's file in the agent's data directory.
const FileName = "unusable-stretches.json"

// Kind is what a held thing is.
type Kind string

const (
	Destination  Kind = "destinations"
	Subscription Kind = "subscriptions"
)

// Held is one destination's or subscription's stretches. Generation
// tells a destination made again under the same id (its
// CreatedVersion; 0 for a subscription) from the one the stretches
// were of.
type Held struct {
	Generation uint64       `json:"generation,omitempty"`
	Stretches  retry.Pauses `json:"stretches"`
}

// AliveEvery is how often a running agent with an open stretch notes it
// is still running (Alive).
const AliveEvery = time.Minute

// saved is the file's content.
type saved struct {
	// AliveAt is when the agent was last seen running with a stretch
	// open (zero: never).
	AliveAt       time.Time       `json:"alive_at,omitzero"`
	Destinations  map[string]Held `json:"destinations"`
	Subscriptions map[string]Held `json:"subscriptions"`
}

// Book is the stretches as the agent last knew them, and the file they
// are kept in. The config follower notes them; a ticker notes the agent
// alive; both save.
type Book struct {
	path string

	mu      sync.Mutex
	held    map[Kind]map[string]Held
	aliveAt time.Time
	dirty   bool
}

// Open reads the book in dir as the agent starts, at now. A missing file
// is an empty book; an unreadable or corrupt one is an empty book too,
// with an error to log: the agent starts all the same, as it did before
// it kept stretches.
func Open(dir string, now time.Time) (*Book, error) {
	b := &Book{path: filepath.Join(dir, FileName), held: map[Kind]map[string]Held{Destination: {}, Subscription: {}}}
	data, err := os.ReadFile(b.path)
	if errors.Is(err, fs.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return b, fmt.Errorf("read the stretches of unusable configs (%s): %w", b.path, err)
	}
	var file saved
	if err := json.Unmarshal(data, &file); err != nil {
		return b, fmt.Errorf("read the stretches of unusable configs (%s): %w; starting without them", b.path, err)
	}
	// A stretch open at the stop ends where the agent was last seen
	// running (or, not seen since it opened, where it opened: the agent
	// stopped within AliveEvery of it), plus AliveEvery, and at the
	// latest now.
	for kind, list := range map[Kind]map[string]Held{Destination: file.Destinations, Subscription: file.Subscriptions} {
		for id, h := range list {
			if !valid(h.Stretches) || h.Stretches[len(h.Stretches)-1].Start.After(now) {
				continue
			}
			if last := &h.Stretches[len(h.Stretches)-1]; last.End.IsZero() {
				last.End = earlier(later(file.AliveAt, last.Start).Add(AliveEvery), now)
				b.dirty = true
			}
			b.held[kind][id] = h
		}
	}
	return b, nil
}

// valid reports whether stretches are as the registries make them: in
// order, none empty or reversed, only the last open. A file edited by
// hand or by another version may not be; such stretches are dropped.
func valid(stretches retry.Pauses) bool {
	for i, p := range stretches {
		open := p.End.IsZero()
		if p.Start.IsZero() || (open && i != len(stretches)-1) || (!open && p.End.Before(p.Start)) {
			return false
		}
		if i > 0 && p.Start.Before(stretches[i-1].End) {
			return false
		}
	}
	return len(stretches) > 0
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Recalled is what the book holds of kind: the stretches each held
// before the agent started, every one closed, for the registries to
// carry on (a copy of the map; the stretches are not to be changed in
// place, as the registries never do).
func (b *Book) Recalled(kind Kind) map[string]Held {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.held[kind])
}

// Note records the stretches of one destination or subscription as the
// registry now holds them (none: it has none, and is forgotten).
func (b *Book) Note(kind Kind, id string, generation uint64, stretches retry.Pauses) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, had := b.held[kind][id]
	if len(stretches) == 0 {
		if had {
			delete(b.held[kind], id)
			b.dirty = true
		}
		return
	}
	if had && old.Generation == generation && samePauses(old.Stretches, stretches) {
		return
	}
	b.held[kind][id] = Held{Generation: generation, Stretches: slices.Clone(stretches)}
	b.dirty = true
}

// Forget drops the stretches of a destination or subscription that is
// gone.
func (b *Book) Forget(kind Kind, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forget(kind, id)
}

func (b *Book) forget(kind Kind, id string) {
	if _, had := b.held[kind][id]; had {
		delete(b.held[kind], id)
		b.dirty = true
	}
}

// Retain drops the stretches of kind's ids that keep says are gone (after
// a whole config: those it does not hold).
func (b *Book) Retain(kind Kind, keep func(id string) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id := range b.held[kind] {
		if !keep(id) {
			b.forget(kind, id)
		}
	}
}

// Alive notes that the agent runs at now, if a stretch is open (the
// next start closes it there: Open).
func (b *Book) Alive(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, list := range b.held {
		for _, h := range list {
			if h.Stretches[len(h.Stretches)-1].End.IsZero() {
				b.aliveAt, b.dirty = now, true
				return
			}
		}
	}
}

// Save writes the book if it changed since it was last written. A failed
// write is tried again at the next Save.
func (b *Book) Save() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.dirty {
		return nil
	}
	data, err := json.Marshal(saved{AliveAt: b.aliveAt, Destinations: b.held[Destination], Subscriptions: b.held[Subscription]})
	if err != nil {
		return err
	}
	if err := durable.WriteFile(b.path, data); err != nil {
		return fmt.Errorf("keep the stretches of unusable configs (%s): %w", b.path, err)
	}
	b.dirty = false
	return nil
}

// samePauses reports whether a and b are the same stretches (their times
// equal, whatever their monotonic readings or locations).
func samePauses(a, b retry.Pauses) bool {
	return slices.EqualFunc(a, b, func(x, y retry.Pause) bool {
		return x.Start.Equal(y.Start) && x.End.Equal(y.End)
	})
}
