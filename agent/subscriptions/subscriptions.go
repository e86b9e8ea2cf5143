// Package subscriptions holds the agent's view of the cell's subscriptions
// and event-type catalogue, as pushed by the control plane: which of a
// customer's events go where (the ingest gateway fans out by it), how a
// subscription's deliveries differ from its destination's (the delivery
// path asks), and which event types exist with which schema.
package subscriptions

import (
	"fmt"
	"net/http"
	"sort"
	"sync/atomic"
	"time"

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
	// Headers are added over the destination's (canonical names; shared,
	// not to be modified).
	Headers http.Header
	Paused  bool
	// Pauses are its recent pauses (PausedBetween).
	Pauses retry.Pauses
}

// PausedBetween is how long the subscription was paused between from and
// to: time that does not count against an event's window.
func (s *Subscription) PausedBetween(from, to time.Time) time.Duration {
	return s.Pauses.Between(from, to)
}

// Matches tells whether an event of the subscription's customer matches
// its types and filter. data is called only when the filter needs it.
func (s *Subscription) Matches(typ string, input func() routing.Input) bool {
	if !routing.TypeMatches(s.Types, typ) {
		return false
	}
	if s.Filter == nil {
		return true
	}
	ok, _ := s.Filter.Match(input())
	return ok
}

// Table is the current set of subscriptions. Reads are lock-free; the
// whole set is replaced on every config change.
type Table struct {
	current atomic.Pointer[snapshot]
}

type snapshot struct {
	byID map[string]*Subscription
	// byCustomer lists each customer's subscriptions, by id.
	byCustomer map[string][]*Subscription
}

// NewTable returns an empty table.
func NewTable() *Table {
	t := &Table{}
	t.current.Store(index(map[string]*Subscription{}))
	return t
}

// Replace installs a new set of subscriptions (a snapshot).
func (t *Table) Replace(list []*rivorav1.Subscription) error {
	return t.apply(map[string]*Subscription{}, list, nil)
}

// Update changes and adds the listed subscriptions and removes the removed
// ones, keeping the rest.
func (t *Table) Update(changed []*rivorav1.Subscription, removed []string) error {
	next := make(map[string]*Subscription, len(t.current.Load().byID))
	for id, s := range t.current.Load().byID {
		next[id] = s
	}
	return t.apply(next, changed, removed)
}

func (t *Table) apply(next map[string]*Subscription, changed []*rivorav1.Subscription, removed []string) error {
	for _, pb := range changed {
		s, err := FromProto(pb)
		if err != nil {
			return err
		}
		next[s.ID] = s
	}
	for _, id := range removed {
		delete(next, id)
	}
	t.current.Store(index(next))
	return nil
}

func index(byID map[string]*Subscription) *snapshot {
	byCustomer := make(map[string][]*Subscription)
	for _, s := range byID {
		byCustomer[s.Customer] = append(byCustomer[s.Customer], s)
	}
	for _, list := range byCustomer {
		sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	}
	return &snapshot{byID: byID, byCustomer: byCustomer}
}

// Get returns a subscription by id.
func (t *Table) Get(id string) (*Subscription, bool) {
	s, ok := t.current.Load().byID[id]
	return s, ok
}

// ForCustomer lists a customer's subscriptions, by id (shared, not to be
// modified).
func (t *Table) ForCustomer(customer string) []*Subscription {
	return t.current.Load().byCustomer[customer]
}

// Len counts the subscriptions.
func (t *Table) Len() int { return len(t.current.Load().byID) }

// FromProto converts a control-plane subscription (already validated
// there) into the agent's form.
func FromProto(pb *rivorav1.Subscription) (*Subscription, error) {
	s := &Subscription{
		ID:          pb.GetId(),
		Customer:    pb.GetCustomerId(),
		Destination: pb.GetDestinationId(),
		Types:       pb.GetTypes(),
		URL:         pb.GetDeliveryUrl(),
		Paused:      pb.GetPaused(),
	}
	if f := pb.GetFilter(); f != "" {
		filter, err := routing.CompileFilter(f)
		if err != nil {
			return nil, fmt.Errorf("subscription %q: %w", s.ID, err)
		}
		s.Filter = filter
	}
	if secret := pb.GetSecret(); secret != "" {
		signer, err := webhook.NewSigner(secret)
		if err != nil {
			return nil, fmt.Errorf("subscription %q: %w", s.ID, err)
		}
		if pb.GetPreviousSecret() != "" && pb.GetPreviousSecretExpiresAt() != nil {
			if signer, err = signer.WithPrevious(pb.GetPreviousSecret(), pb.GetPreviousSecretExpiresAt().AsTime()); err != nil {
				return nil, fmt.Errorf("subscription %q: %w", s.ID, err)
			}
		}
		s.Signer = signer
	}
	if len(pb.GetHeaders()) > 0 {
		s.Headers = make(http.Header, len(pb.GetHeaders()))
		for _, h := range pb.GetHeaders() {
			s.Headers[http.CanonicalHeaderKey(h.GetName())] = []string{h.GetValue()}
		}
	}
	s.Pauses = retry.PausesFromProto(pb.GetPauses())
	return s, nil
}
