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

// Book is the stretches as the agent last knew them, and the file they
// are kept in. Only the agent's config follower uses it (no lock).
type Book struct {
	path  string
	held  map[Kind]map[string]Held
	dirty bool
}

// Open reads the book in dir. A missing file is an empty book; an
// unreadable or corrupt one is an empty book too, with an error to log:
// the agent starts all the same, as it did before it kept stretches.
func Open(dir string) (*Book, error) {
	b := &Book{path: filepath.Join(dir, FileName), held: map[Kind]map[string]Held{Destination: {}, Subscription: {}}}
	data, err := os.ReadFile(b.path)
	if errors.Is(err, fs.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return b, fmt.Errorf("read the stretches of unusable configs (%s): %w", b.path, err)
	}
	var saved map[Kind]map[string]Held
	if err := json.Unmarshal(data, &saved); err != nil {
		return b, fmt.Errorf("read the stretches of unusable configs (%s): %w; starting without them", b.path, err)
	}
	for kind := range b.held {
		for id, h := range saved[kind] {
			if len(h.Stretches) > 0 {
				b.held[kind][id] = h
			}
		}
	}
	return b, nil
}

// Recalled is what the book holds of kind: the stretches each held
// before the agent started, for the registries to carry on (a copy).
func (b *Book) Recalled(kind Kind) map[string]Held {
	return maps.Clone(b.held[kind])
}

// Note records the stretches of one destination or subscription as the
// registry now holds them (none: it has none, and is forgotten).
func (b *Book) Note(kind Kind, id string, generation uint64, stretches retry.Pauses) {
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
	if _, had := b.held[kind][id]; had {
		delete(b.held[kind], id)
		b.dirty = true
	}
}

// Retain drops the stretches of kind's ids that keep says are gone (after
// a whole config: those it does not hold).
func (b *Book) Retain(kind Kind, keep func(id string) bool) {
	for id := range b.held[kind] {
		if !keep(id) {
			b.Forget(kind, id)
		}
	}
}

// Save writes the book if it changed since it was last written. A failed
// write is tried again at the next Save.
func (b *Book) Save() error {
	if !b.dirty {
		return nil
	}
	data, err := json.Marshal(b.held)
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
