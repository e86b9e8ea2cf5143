// Package subscriptions holds the agent's view of the cell's subscriptions
// and event-type catalogue, as pushed by the control plane: which of a
// customer's events go where (the ingest gateway fans out by it), how a
// subscription's deliveries differ from its destination's (the delivery
// path asks), and which event types exist with which schema.
package subscriptions

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/rivora/rivora/agent/heldtime"
	"github.com/rivora/rivora/agent/retry"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
	"github.com/rivora/rivora/sdk/webhook"
)

// Subscription is a subscription as the agent uses it.
type Subscription struct {
	ID          string
	Customer    string
	Destination string
	Types       []string
	// Filter is nil when the subscription has none.
	Filter *routing.Filter
	// URL is where deliveries go ("" : the destination's URL).
	URL string
	// Signer signs deliveries (nil: the destination's signer).
	Signer *webhook.Signer
	// DestinationSecretUntil (zero: never) is the end of the grace of
	// the rotation that gave the subscription its own secret: until then
	// its destination's secret signs too (Destination.Endpoint).
	DestinationSecretUntil time.Time
	// Headers are added over the destination's (canonical names; shared,
	// not to be modified).
	Headers http.Header
	// Paused: its customer paused it (the control plane's value, never
	// this agent's own hold: see Held).
	Paused bool
	// Pauses are its recent pauses (PausedBetween).
	Pauses retry.Pauses
	// Unusable is why this agent could not load the subscription's
	// config (nil: it could): its filter, its secret, or both, e.g. a
	// filter function or a secret format a newer control plane takes.
	// Such a subscription is installed all the same, never an error
	// that stops the rest of the config (every customer's) applying. A
	// filter that did not load fails every event, as a filter's runtime
	// error does (Matches): no event is held for a filter this agent
	// cannot run. A secret that did not load leaves it without a signer
	// and held as a paused one (UnusableHeld, Held): its events are
	// kept, neither sent unsigned nor signed with its destination's
	// secret, until a config of it loads.
	Unusable error
	// UnusableHeld: its secret did not load, so it is held (Held).
	UnusableHeld bool
	// UnusableStretches are when this agent held the subscription as
	// unusable (the last has no end while it lasts): time that, like a
	// pause, does not count against an event's window. They are this
	// agent's, kept in its data directory for its next run (heldtime;
	// Table.Recall), as destinations.Destination's are.
	UnusableStretches retry.Pauses
	// filterUnusable: its filter did not load (Unusable says why).
	filterUnusable bool

	// removed: the table dropped it (a reader may still hold it): its
	// filter errors are no longer counted, so its series stays deleted.
	removed atomic.Bool
}

// Held reports whether the agent holds the subscription's events: its
// customer paused it, or its secret did not load here (UnusableHeld).
// Paused alone stays the customer's, which a mended config keeps.
func (s *Subscription) Held() bool { return s.Paused || s.UnusableHeld }

// PausedBetween is how long the subscription was paused between from and
// to: time that does not count against an event's window.
func (s *Subscription) PausedBetween(from, to time.Time) time.Duration {
	return s.HeldPauses().Between(from, to)
}

// HeldPauses are its pauses and the stretches it was held unusable, as
// one list (a time in both once): what holds an event's window, for
// destinations.Destination.PausedBetweenWith.
func (s *Subscription) HeldPauses() retry.Pauses {
	if len(s.UnusableStretches) == 0 {
		return s.Pauses
	}
	return s.Pauses.Merge(s.UnusableStretches)
}

// Matches tells whether an event of the subscription's customer matches
// its types and filter, the filter run within ctx (routing.FilterContext).
// input is called only when the filter needs it. err is set only when
// the filter could not answer, which is not a filter error: ctx ended
// first (the event's filter budget spent, or its publisher gone: the
// answer is unknown, not "no"), or the filter went past its cost limit
// on the event's data (a *routing.FilterCostError: routing.OverCost).
func (s *Subscription) Matches(ctx context.Context, typ string, input func() routing.Input) (bool, error) {
	if !routing.TypeMatches(s.Types, typ) {
		return false, nil
	}
	if s.filterUnusable {
		// Its filter did not load here: as a filter that fails on every
		// event, the subscription gets none, each counted.
		if !s.removed.Load() {
			filterErrors.WithLabelValues(s.ID).Inc()
		}
		return false, nil
	}
	if s.Filter == nil {
		return true, nil
	}
	in := input()
	ok, err := s.Filter.Match(ctx, in)
	if err != nil && ctx.Err() != nil {
		return false, ctx.Err()
	}
	if routing.OverCost(err) {
		return false, err
	}
	if routing.FilterFailed(in, err) && !s.removed.Load() {
		filterErrors.WithLabelValues(s.ID).Inc()
	}
	return ok, nil
}

// filterErrors counts, per subscription, events its filter failed on for
// another reason than a missing field (routing.FilterFailed): each is an
// event the subscription did not get, most often because the filter is
// wrong for every event, or reads data its events do not carry as JSON.
var filterErrors = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "rivora_subscription_filter_errors_total",
	Help: "Events a subscription's filter failed on (not a missing field: an operation its types do not allow, an answer that is not a boolean, a field of data read on a payload whose content type is not JSON); each is an event the subscription did not get.",
}, []string{"subscription"})

// Collectors are this package's metrics, registered in the default
// registry as well: for a process with a registry of its own (an edge).
func Collectors() []prometheus.Collector { return []prometheus.Collector{filterErrors} }

// Table is the current set of subscriptions. A change touches only what
// it changes: with 100k subscriptions, one more costs the agent as little
// as the first did. A customer's list is replaced, never modified in
// place, so a reader may keep the slice ForCustomer gave it.
type Table struct {
	mu   sync.RWMutex
	byID map[string]*Subscription
	// byCustomer lists each customer's subscriptions, by id.
	byCustomer map[string][]*Subscription
	// recalled are the stretches of being held unusable that the
	// agent's previous run kept (heldtime), by subscription id, each
	// until that subscription's first config here carries it on; none
	// once a whole config applied. Only the config follower uses it.
	recalled map[string]heldtime.Held
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{byID: map[string]*Subscription{}, byCustomer: map[string][]*Subscription{}}
}

// Recall gives the table, before its first config, the stretches of
// being held unusable that the agent's previous run kept
// (destinations.Registry.Recall).
func (t *Table) Recall(held map[string]heldtime.Held) { t.recalled = held }

// Replace installs a new set of subscriptions (a snapshot). It returns
// every one it installed, an unusable one (Subscription.Unusable) among
// them: one subscription's config that does not load never stops the
// rest of the set, nor every later config after it. now is the
// caller's clock's time, when a subscription becomes unusable or usable
// (its UnusableStretches).
func (t *Table) Replace(now time.Time, list []*rivorav1.Subscription) []*Subscription {
	subs := t.load(now, list)
	t.recalled = nil // what no subscription took is of subscriptions gone
	byID := make(map[string]*Subscription, len(subs))
	byCustomer := make(map[string][]*Subscription)
	for _, s := range subs {
		byID[s.ID] = s
	}
	for _, s := range byID {
		byCustomer[s.Customer] = append(byCustomer[s.Customer], s)
	}
	for _, list := range byCustomer {
		sortByID(list)
	}
	t.mu.Lock()
	for id, old := range t.byID {
		if _, kept := byID[id]; !kept {
			old.removed.Store(true)
			filterErrors.DeleteLabelValues(id)
		}
	}
	t.byID, t.byCustomer = byID, byCustomer
	t.mu.Unlock()
	return subs
}

// Update changes and adds the listed subscriptions and removes the removed
// ones, keeping the rest. It returns the changed ones, and takes now,
// as Replace.
func (t *Table) Update(now time.Time, changed []*rivorav1.Subscription, removed []string) []*Subscription {
	subs := t.load(now, changed)
	t.mu.Lock()
	defer t.mu.Unlock()
	// touched: the customers whose list changes, with their changed
	// subscriptions.
	touched := map[string][]*Subscription{}
	touch := func(customer string) {
		if _, ok := touched[customer]; !ok {
			touched[customer] = nil
		}
	}
	for _, id := range removed {
		if old, ok := t.byID[id]; ok {
			touch(old.Customer)
			delete(t.byID, id)
			old.removed.Store(true)
			filterErrors.DeleteLabelValues(id)
		}
	}
	for _, s := range subs {
		if old, ok := t.byID[s.ID]; ok {
			touch(old.Customer)
		}
		touched[s.Customer] = append(touched[s.Customer], s)
		t.byID[s.ID] = s
	}
	for customer, added := range touched {
		t.reindex(customer, added)
	}
	return subs
}

// reindex builds customer's list anew: its previous entries still in
// byID for it (as byID holds them now), and added; under mu.
func (t *Table) reindex(customer string, added []*Subscription) {
	list := make([]*Subscription, 0, len(t.byCustomer[customer])+len(added))
	seen := map[string]bool{}
	for _, s := range slices.Concat(t.byCustomer[customer], added) {
		if cur, ok := t.byID[s.ID]; ok && cur.Customer == customer && !seen[s.ID] {
			seen[s.ID] = true
			list = append(list, cur)
		}
	}
	if len(list) == 0 {
		delete(t.byCustomer, customer)
		return
	}
	sortByID(list)
	t.byCustomer[customer] = list
}

func sortByID(list []*Subscription) {
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
}

// load is list as the agent uses it, each with its stretches of being
// unusable carried on from the value it replaces in t, as of now. Only
// the config follower changes t, so what it reads of t here is still
// there when it installs them.
func (t *Table) load(now time.Time, list []*rivorav1.Subscription) []*Subscription {
	out := make([]*Subscription, 0, len(list))
	for _, pb := range list {
		s := fromProto(pb)
		previous, _ := t.Get(s.ID)
		s.UnusableStretches = unusableStretches(t.earlier(previous, s), s, now)
		out = append(out, s)
	}
	return out
}

// maxUnusableStretches bounds the stretches a subscription keeps: one
// that breaks and mends more often than this has the two stretches
// closest in time folded into one covering both and the gap between
// (retry.Pauses.Bounded): that over-credits a pending event's window by
// that gap, never under-credits it, as dropping the oldest would for an
// event pending since then.
const maxUnusableStretches = 16

// earlier are s's stretches of being held unusable before this config:
// those of previous (the value s replaces; nil: none), or at s's first
// config since the agent started those its previous run kept (Recall).
func (t *Table) earlier(previous, s *Subscription) retry.Pauses {
	if previous != nil {
		return previous.UnusableStretches
	}
	held, ok := t.recalled[s.ID]
	if !ok {
		return nil
	}
	delete(t.recalled, s.ID)
	return held.Stretches
}

// unusableStretches are s's stretches of being held unusable, from
// before (its stretches so far: earlier) as of now: one opens as s
// becomes held, and closes as it loads again.
func unusableStretches(before retry.Pauses, s *Subscription, now time.Time) retry.Pauses {
	open := len(before) > 0 && before[len(before)-1].End.IsZero()
	switch {
	case s.UnusableHeld && !open:
		before = append(slices.Clip(before), retry.Pause{Start: now})
	case !s.UnusableHeld && open:
		before = slices.Clone(before) // the previous value's stays as published
		before[len(before)-1].End = now
	}
	return before.Bounded(maxUnusableStretches)
}

// Get returns a subscription by id.
func (t *Table) Get(id string) (*Subscription, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s, ok := t.byID[id]
	return s, ok
}

// ForCustomer lists a customer's subscriptions, by id (shared, not to be
// modified).
func (t *Table) ForCustomer(customer string) []*Subscription {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byCustomer[customer]
}

// Len counts the subscriptions.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byID)
}

// FromProto converts a control-plane subscription (already validated
// there) into the agent's form; an error if part of it does not load
// here (the Table installs such a one unusable instead).
func FromProto(pb *rivorav1.Subscription) (*Subscription, error) {
	s := fromProto(pb)
	if s.Unusable != nil {
		return nil, s.Unusable
	}
	return s, nil
}

// fromProto is pb as the agent uses it; what of it does not load is
// left out and said in Unusable (the error names what is wrong, never
// the secret).
func fromProto(pb *rivorav1.Subscription) *Subscription {
	s := &Subscription{
		ID:          pb.GetId(),
		Customer:    pb.GetCustomerId(),
		Destination: pb.GetDestinationId(),
		Types:       pb.GetTypes(),
		URL:         pb.GetDeliveryUrl(),
		Paused:      pb.GetPaused(),
	}
	var filterErr, secretErr error
	if f := pb.GetFilter(); f != "" {
		s.Filter, filterErr = routing.LoadFilter(f)
		s.filterUnusable = filterErr != nil
	}
	if pb.GetSecret() != "" {
		signer, err := signerFromProto(pb)
		if secretErr = err; err == nil {
			s.Signer = signer
			if until := pb.GetDestinationSecretUntil(); until != nil {
				s.DestinationSecretUntil = until.AsTime()
			}
		}
		s.UnusableHeld = secretErr != nil
	}
	switch {
	case filterErr != nil && secretErr != nil:
		s.Unusable = fmt.Errorf("subscription %q: %w; %w", s.ID, filterErr, secretErr)
	case filterErr != nil:
		s.Unusable = fmt.Errorf("subscription %q: %w", s.ID, filterErr)
	case secretErr != nil:
		s.Unusable = fmt.Errorf("subscription %q: %w", s.ID, secretErr)
	}
	if len(pb.GetHeaders()) > 0 {
		s.Headers = make(http.Header, len(pb.GetHeaders()))
		for _, h := range pb.GetHeaders() {
			s.Headers[http.CanonicalHeaderKey(h.GetName())] = []string{h.GetValue()}
		}
	}
	s.Pauses = retry.PausesFromProto(pb.GetPauses())
	return s
}

// signerFromProto is what signs pb's deliveries: its secret, and during
// a rotation's grace its previous one too.
func signerFromProto(pb *rivorav1.Subscription) (*webhook.Signer, error) {
	signer, err := webhook.NewSigner(pb.GetSecret())
	if err != nil {
		return nil, err
	}
	if pb.GetPreviousSecret() != "" && pb.GetPreviousSecretExpiresAt() != nil {
		return signer.WithPrevious(pb.GetPreviousSecret(), pb.GetPreviousSecretExpiresAt().AsTime())
	}
	return signer, nil
}
