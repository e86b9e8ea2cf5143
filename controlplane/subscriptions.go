package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/bounds"
	"github.com/rivora/rivora/internal/ids"
	"github.com/rivora/rivora/internal/ssrf"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
	"github.com/rivora/rivora/sdk/webhook"
)

// The subscription operations behind SubscriptionService
// (subscriptions_endpoint.go serves them). A subscription is kept as a
// destination is: a record in the store, changed only through change (one
// config version, audited under the caller's token, pushed to every
// agent). What its deliveries need — the URL (delivery_url), its secret
// and headers — is resolved and validated here, once, so the agents only
// apply it. Every operation takes the caller's scope: a customer token
// reaches only its customers' subscriptions, and another's answers as an
// absent id.

// MaxSubscriptionsPerCustomer bounds a customer's subscriptions: every
// subscription an event matches stores one more delivery, so a customer's
// subscriptions multiply what each of its publishes costs the cell.
const MaxSubscriptionsPerCustomer = 100

// subscriptionIDPrefix starts every subscription id ("sub_" + 16 hex).
const subscriptionIDPrefix = "sub_"

// newSubscriptionID makes a subscription id.
func newSubscriptionID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("subscription id: %w", err)
	}
	return subscriptionIDPrefix + hex.EncodeToString(b[:]), nil
}

// subscriptionNotFound is the answer for a subscription id that does not
// exist, or that the caller may not see: the same words for both.
func subscriptionNotFound(id string) error {
	return errorf(ErrNotFound, "subscription %q does not exist; see `rivoractl subscriptions list`", id)
}

// subscriptionIDs lists subscriptions' ids for messages (the first few).
func subscriptionIDs(subs []*rivorav1.Subscription) string {
	const shown = 5
	var out []string
	for i, s := range subs {
		if i == shown {
			out = append(out, fmt.Sprintf("and %d more", len(subs)-shown))
			break
		}
		out = append(out, s.GetId())
	}
	return strings.Join(out, ", ")
}

// checkSubscriptionFields checks what create and update set: the type
// patterns (those not among had, the subscription's before, offered by
// the catalogue, read through eventType), the filter (compiled: refused
// when it does not compile, is not boolean or may cost too much; "" for
// none, or for an update that keeps the stored one) and the description.
func (cp *ControlPlane) checkSubscriptionFields(types, had []string, eventType func(string) (*rivorav1.EventType, bool), filter, description string) error {
	if err := routing.ValidatePatterns(types); err != nil {
		return tag(ErrInvalid, err)
	}
	if err := cp.checkTypesOffered(types, had, eventType); err != nil {
		return err
	}
	if filter != "" {
		if _, err := routing.CompileFilter(filter); err != nil {
			return tag(ErrInvalid, err)
		}
	}
	if len(description) > bounds.Text {
		return errorf(ErrInvalid, "description is %d bytes; the limit is %d", len(description), bounds.Text)
	}
	return nil
}

// checkTypesOffered refuses an exact type (no "*") the subscription did
// not have (had) that the catalogue does not offer: a deprecated one, no
// longer offered for new subscriptions, or, with --strict-event-types,
// one it does not list (no event of it could be published). A type the
// subscription had stays: deprecating a type, or removing it from the
// catalogue, never blocks other edits of the subscriptions that take it.
//
// eventType must not read the store from within a change (cp.change):
// the store is locked throughout it (an update once hung the control
// plane that way), so a change passes a catalogue read before it.
func (cp *ControlPlane) checkTypesOffered(types, had []string, eventType func(string) (*rivorav1.EventType, bool)) error {
	for _, t := range types {
		if strings.Contains(t, "*") || slices.Contains(had, t) {
			continue
		}
		et, ok := eventType(t)
		switch {
		case ok && et.GetDeprecated():
			return errorf(ErrInvalid, "type %q is deprecated: it is no longer offered for new subscriptions (see `rivoractl event-types list`)", t)
		case !ok && cp.cfg.StrictEventTypes:
			return errorf(ErrInvalid, "type %q is not in the event-type catalogue, and this cell refuses events of types it does not list (--strict-event-types): see `rivoractl event-types list`", t)
		}
	}
	return nil
}

// subscriptionSecret is the secret a create asks for: given (checked as
// a destination's), generated, or none (the destination's signs).
func subscriptionSecret(given string, generate bool) (string, error) {
	switch {
	case given != "" && generate:
		return "", errorf(ErrInvalid, "set secret or generate_secret, not both")
	case generate:
		return webhook.NewSecret()
	case given != "":
		given = strings.TrimSpace(given) // as secretOrNew
		if _, err := webhook.Key(given); err != nil {
			return "", errorf(ErrInvalid, "secret: %w", err)
		}
	}
	return given, nil
}

func (cp *ControlPlane) createSubscription(m *rivorav1.CreateSubscriptionRequest, who actor, sc scope) (*rivorav1.Subscription, uint64, error) {
	if err := ids.Validate("customer_id", m.GetCustomerId()); err != nil {
		return nil, 0, tag(ErrInvalid, err)
	}
	if err := ids.Validate("destination_id", m.GetDestinationId()); err != nil {
		return nil, 0, tag(ErrInvalid, err)
	}
	if !sc.customer(m.GetCustomerId()) {
		return nil, 0, errorf(ErrDenied, "this token may not act for customer %q", m.GetCustomerId())
	}
	if err := cp.checkSubscriptionFields(m.GetTypes(), nil, cp.store.GetEventType, m.GetFilter(), m.GetDescription()); err != nil {
		return nil, 0, err
	}
	secret, err := subscriptionSecret(m.GetSecret(), m.GetGenerateSecret())
	if err != nil {
		return nil, 0, err
	}
	headers, _, err := mergeHeaders("subscription", nil, m.GetHeaders(), nil)
	if err != nil {
		return nil, 0, err
	}
	id, err := newSubscriptionID()
	if err != nil {
		return nil, 0, err
	}
	now := timestamppb.New(cp.now())
	s := &rivorav1.Subscription{
		Id: id, CustomerId: m.GetCustomerId(), DestinationId: m.GetDestinationId(), Types: slices.Clone(m.GetTypes()),
		Filter: m.GetFilter(), Path: m.GetPath(), Url: m.GetUrl(), Secret: secret, Headers: headers,
		Description: m.GetDescription(), CreatedAt: now, UpdatedAt: now,
	}
	version, err := cp.change("subscription.create", s.DestinationId, who, "", func(tx *DestinationTx) (string, error) {
		d, err := cp.subscribable(tx, s.DestinationId, s.CustomerId, sc)
		if err != nil {
			return "", err
		}
		if err := sharedRouting(d, sc, s.Path != "" || s.Url != "" || len(s.Headers) > 0); err != nil {
			return "", err
		}
		if s.Url, s.DeliveryUrl, err = cp.resolveDelivery(d, s.Path, s.Url); err != nil {
			return "", err
		}
		if tx.Subscriptions().Has(s.Id) {
			return "", errorf(ErrExists, "subscription id %s is taken (a 1 in 2^64 chance): create it again", s.Id)
		}
		if dup := sameSubscription(tx, s); dup != nil {
			return "", duplicateSubscription(dup)
		}
		if n := tx.CustomerSubscriptions(s.CustomerId); n >= MaxSubscriptionsPerCustomer {
			return "", limitReached("subscriptions_per_customer", MaxSubscriptionsPerCustomer, "customer %q has %d subscriptions, the most one customer may have (%d): every subscription an event matches stores one more delivery; delete unused ones (`rivoractl subscriptions delete ID`) or widen one's types", s.CustomerId, n, MaxSubscriptionsPerCustomer)
		}
		tx.Subscriptions().Put(s)
		return describeSubscription(s), nil
	})
	return s, version, err
}

// sameSubscription is a subscription that delivers what s would, to the
// same place: the same customer and destination, the same set of type
// patterns (in any order), the same filter text, path, URL and
// headers (name and value). Such a twin would send each event it matches
// to the partner twice, under different webhook-ids, which the partner's
// de-duplication cannot catch; the secret and description, which change
// neither what is sent nor where, are not compared. It is looked for
// within the change (the store is locked throughout one), so of two
// identical creates at once the second finds the first.
func sameSubscription(tx *DestinationTx, s *rivorav1.Subscription) *rivorav1.Subscription {
	types := typeSet(s.GetTypes())
	var dup *rivorav1.Subscription
	tx.Subscriptions().Each(func(o *rivorav1.Subscription) {
		if dup != nil || o.GetCustomerId() != s.GetCustomerId() || o.GetDestinationId() != s.GetDestinationId() ||
			o.GetFilter() != s.GetFilter() || o.GetPath() != s.GetPath() || !sameURL(o.GetUrl(), s.GetUrl()) {
			return
		}
		if slices.Equal(typeSet(o.GetTypes()), types) && sameHeaders(o.GetHeaders(), s.GetHeaders()) {
			dup = o
		}
	})
	return dup
}

// sameURL compares subscription URLs as they are dialled: one stored
// before URLs were kept with an IDNA host may be in Unicode.
func sameURL(a, b string) bool {
	if a == b {
		return true
	}
	asciiA, errA := ssrf.ASCIIURL(a)
	asciiB, errB := ssrf.ASCIIURL(b)
	return errA == nil && errB == nil && asciiA == asciiB
}

// typeSet is type patterns sorted (a pattern is never listed twice:
// routing.ValidatePatterns).
func typeSet(types []string) []string {
	out := slices.Clone(types)
	slices.Sort(out)
	return out
}

// sameHeaders compares headers as mergeHeaders leaves them (canonical
// names, sorted).
func sameHeaders(a, b []*rivorav1.Header) bool {
	return slices.EqualFunc(a, b, func(x, y *rivorav1.Header) bool { return x.GetName() == y.GetName() && x.GetValue() == y.GetValue() })
}

// duplicateSubscription refuses a create that would duplicate dup, one
// of the same customer's subscriptions (so naming it tells the caller
// nothing about another customer's).
func duplicateSubscription(dup *rivorav1.Subscription) error {
	how := "change it (`rivoractl subscriptions update " + dup.GetId() + "`) rather than adding another"
	if dup.GetPaused() {
		how = "it is paused: resume it (`rivoractl subscriptions resume " + dup.GetId() + "`) rather than adding another"
	}
	return errorf(ErrExists, "customer %q already has subscription %s to destination %q with the same types, filter, path, URL and headers: a second would send each event to the partner twice, under different webhook-ids; %s, or give the new one other types or another filter",
		dup.GetCustomerId(), dup.GetId(), dup.GetDestinationId(), how)
}

// sharedRouting refuses a customer token's path, URL or headers
// (routing: true) on a subscription to a shared destination (one no
// customer owns): the partner behind it serves every customer, and a path
// such as /in/other-tenant or a header such as X-Tenant would let one
// customer speak for another there, or override the operator's headers.
// A customer chooses which of its events go to a shared destination
// (types, filter); where and with which headers is its operator's call.
// On its own destination a customer sets them freely.
func sharedRouting(d *rivorav1.Destination, sc scope, routing bool) error {
	if !routing || !sc.limited() || d.GetOwnerCustomer() != "" {
		return nil
	}
	return errorf(ErrDenied, "destination %q is shared by the operators' customers: a customer token may choose which events go to it (types, filter), not a path, URL or headers, which could speak for another customer at its partner; ask an operator to set them, or subscribe a destination your customer owns", d.GetId())
}

// subscribable is the destination customer may subscribe to: it exists,
// the caller may see it or it is shared, and, when a customer owns it,
// that customer is the subscriber. A customer token is answered for a
// destination another customer owns exactly as for an absent one.
func (cp *ControlPlane) subscribable(tx *DestinationTx, id, customer string, sc scope) (*rivorav1.Destination, error) {
	if err := reserved(id); err != nil {
		return nil, err
	}
	d, ok := tx.Read(id)
	if !ok {
		return nil, notFound(id)
	}
	if owner := d.GetOwnerCustomer(); owner != "" && owner != customer {
		if sc.limited() && !sc.destination(d) {
			return nil, notFound(id)
		}
		return nil, errorf(ErrPrecondition, "destination %q is customer %q's own endpoint: only that customer may subscribe to it", id, owner)
	}
	return d, nil
}

// describeSubscription is the audit detail of a new subscription: never
// its secret or header values.
func describeSubscription(s *rivorav1.Subscription) string {
	detail := fmt.Sprintf("subscription %s: customer %s, types %s", s.GetId(), s.GetCustomerId(), strings.Join(s.GetTypes(), ","))
	if s.GetFilter() != "" {
		detail += ", filter " + s.GetFilter()
	}
	if s.GetDeliveryUrl() != "" {
		detail += ", delivers to " + s.GetDeliveryUrl()
	}
	if s.GetSecret() != "" {
		detail += ", own secret " + auth.Fingerprint(s.GetSecret())
	}
	return detail + describeHeaders(s.GetHeaders())
}

// resolveDelivery is where the deliveries of a subscription with path or
// rawURL on destination d go: its delivery_url ("" when neither is set:
// d's URL), and rawURL as it is stored (its host in the IDNA form it is
// dialled by, as guardURL returns it). A path replaces d's URL's path
// and query; a URL must be on d's origin (scheme, host and port), so d's
// budget still protects that partner, and passes the SSRF guard as
// destination URLs do.
func (cp *ControlPlane) resolveDelivery(d *rivorav1.Destination, path, rawURL string) (stored, delivery string, err error) {
	switch {
	case path != "" && rawURL != "":
		return "", "", errorf(ErrInvalid, "set path or url, not both")
	case path != "":
		delivery, err = withPath(d.GetUrl(), path)
		return "", delivery, err
	case rawURL == "":
		return "", "", nil
	}
	if err := validateURL(rawURL); err != nil {
		return "", "", err
	}
	if stored, err = cp.guardURL(rawURL); err != nil {
		return "", "", err
	}
	u, err := url.Parse(stored)
	if err != nil {
		return "", "", errorf(ErrInvalid, "url %q: %w", rawURL, err)
	}
	base, err := url.Parse(d.GetUrl())
	if err != nil {
		return "", "", fmt.Errorf("destination %q's url %q: %w", d.GetId(), d.GetUrl(), err)
	}
	if origin(u) != origin(base) {
		return "", "", errorf(ErrInvalid, "url %q is not on destination %q's origin %s: a subscription's URL keeps its destination's scheme, host and port (its budget protects that partner); give a path (--path /in/c1) or subscribe to another destination", rawURL, d.GetId(), origin(base))
	}
	u.Fragment, u.RawFragment = "", ""
	return stored, u.String(), nil
}

// withPath is base with its path and query replaced by path's.
func withPath(base, path string) (string, error) {
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") {
		return "", errorf(ErrInvalid, "path %q must start with a single \"/\" (e.g. /in/c1?src=rivora)", path)
	}
	if len(path) > bounds.URL {
		return "", errorf(ErrInvalid, "path is %d bytes; the limit is %d", len(path), bounds.URL)
	}
	if err := checkURLChars("path", path); err != nil {
		return "", err
	}
	p, err := url.Parse(path)
	if err != nil || p.Scheme != "" || p.Host != "" || strings.Contains(path, "#") {
		return "", errorf(ErrInvalid, "path %q: want a path and optional query, such as /in/c1?src=rivora (no fragment)", path)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("destination url %q: %w", base, err)
	}
	u.Path, u.RawPath, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = p.Path, p.RawPath, p.RawQuery, p.ForceQuery, "", ""
	return u.String(), nil
}

// rebaseSubscriptions follows destination d's new URL in tx: each of its
// subscriptions with a path keeps that path on the new URL, each with a
// URL keeps its path and query on the new origin. It says what changed.
func (cp *ControlPlane) rebaseSubscriptions(tx *DestinationTx, d *rivorav1.Destination) ([]string, error) {
	var moved []string
	tx.Subscriptions().Each(func(s *rivorav1.Subscription) {
		if s.GetDestinationId() == d.GetId() && (s.GetPath() != "" || s.GetUrl() != "") {
			moved = append(moved, s.GetId())
		}
	})
	slices.Sort(moved)
	var changes []string
	for _, id := range moved {
		s, _ := tx.Subscriptions().Get(id)
		if s.Url != "" {
			u, err := url.Parse(s.Url)
			if err != nil {
				return nil, fmt.Errorf("subscription %s's url %q: %w", id, s.Url, err)
			}
			base, _ := url.Parse(d.GetUrl()) // d.Url passed validateURL
			u.Scheme, u.Host = base.Scheme, base.Host
			s.Url = u.String()
		}
		var err error
		if s.Url, s.DeliveryUrl, err = cp.resolveDelivery(d, s.Path, s.Url); err != nil {
			return nil, fmt.Errorf("subscription %s: %w", id, err)
		}
		changes = append(changes, fmt.Sprintf("subscription %s now delivers to %s", id, s.DeliveryUrl))
	}
	return changes, nil
}

// subscription returns a subscription the caller may see and its pending
// events on the agents.
func (cp *ControlPlane) subscription(ctx context.Context, id string, sc scope) (*rivorav1.Subscription, int64, error) {
	s, ok := cp.store.GetSubscription(id)
	if !ok || !sc.subscription(s) {
		return nil, 0, subscriptionNotFound(id)
	}
	pending, err := cp.agents.pending(ctx, s.GetDestinationId(), s.GetId())
	if err != nil {
		return nil, 0, err
	}
	return s, pending, nil
}

// subscriptions lists the subscriptions the caller may see, of one
// customer and one destination when named.
func (cp *ControlPlane) subscriptions(customer, destination string, sc scope) []*rivorav1.Subscription {
	return cp.store.Subscriptions(func(s *rivorav1.Subscription) bool {
		return (customer == "" || s.GetCustomerId() == customer) && (destination == "" || s.GetDestinationId() == destination) && sc.subscription(s)
	})
}

// changeSubscription is change for one existing subscription the caller
// may see: fn edits s (its destination d to read) and says what it
// changed; it returns the edited subscription.
func (cp *ControlPlane) changeSubscription(action, id string, who actor, reason string, sc scope, fn func(s *rivorav1.Subscription, d *rivorav1.Destination) (string, error)) (*rivorav1.Subscription, uint64, error) {
	existing, ok := cp.store.GetSubscription(id)
	if !ok || !sc.subscription(existing) {
		return nil, 0, subscriptionNotFound(id)
	}
	var updated *rivorav1.Subscription
	version, err := cp.change(action, existing.GetDestinationId(), who, reason, func(tx *DestinationTx) (string, error) {
		s, ok := tx.Subscriptions().Get(id)
		if !ok || !sc.subscription(s) {
			return "", subscriptionNotFound(id)
		}
		d, ok := tx.Read(s.GetDestinationId())
		if !ok {
			return "", notFound(s.GetDestinationId())
		}
		detail, err := fn(s, d)
		if err != nil {
			return "", err
		}
		s.UpdatedAt = timestamppb.New(cp.now())
		updated = s
		return "subscription " + id + ": " + detail, nil
	})
	return updated, version, err
}

func (cp *ControlPlane) updateSubscription(m *rivorav1.UpdateSubscriptionRequest, who actor, sc scope) (*rivorav1.Subscription, uint64, error) {
	// The catalogue is read before the change: the store is locked
	// throughout it.
	catalogue := map[string]*rivorav1.EventType{}
	for _, et := range cp.store.EventTypes() {
		catalogue[et.GetName()] = et
	}
	eventType := func(name string) (*rivorav1.EventType, bool) { et, ok := catalogue[name]; return et, ok }
	return cp.changeSubscription("subscription.update", m.GetId(), who, "", sc, func(s *rivorav1.Subscription, d *rivorav1.Destination) (string, error) {
		var changes []string
		types, filter, description := s.GetTypes(), s.GetFilter(), s.GetDescription()
		// Only a filter the update sets is compiled: the stored one
		// passed the checks of its day, and a stricter check since (a
		// bad regex in matches(s, p)) must not refuse every other edit
		// of the subscription (the agents load it as before).
		checked := ""
		if m.GetSetTypes() {
			types = slices.Clone(m.GetTypes())
			changes = append(changes, "types "+strings.Join(types, ","))
		}
		if m.Filter != nil {
			filter, checked = m.GetFilter(), m.GetFilter()
			changes = append(changes, "filter "+orNone(filter))
		}
		if m.Description != nil {
			description = m.GetDescription()
			changes = append(changes, "description")
		}
		if err := cp.checkSubscriptionFields(types, s.GetTypes(), eventType, checked, description); err != nil {
			return "", err
		}
		s.Types, s.Filter, s.Description = types, filter, description
		if err := sharedRouting(d, sc, m.Path != nil || m.Url != nil || len(m.GetSetHeaders()) > 0 || len(m.GetRemoveHeaders()) > 0); err != nil {
			return "", err
		}
		if m.Path != nil || m.Url != nil {
			stored, delivery, err := cp.resolveDelivery(d, m.GetPath(), m.GetUrl())
			if err != nil {
				return "", err
			}
			s.Path, s.Url, s.DeliveryUrl = m.GetPath(), stored, delivery
			changes = append(changes, "delivers to "+orDefault(delivery, d.GetUrl()))
		}
		headers, headerChanges, err := mergeHeaders(fmt.Sprintf("subscription %q", s.GetId()), s.GetHeaders(), m.GetSetHeaders(), m.GetRemoveHeaders())
		if err != nil {
			return "", err
		}
		s.Headers = headers
		changes = append(changes, headerChanges...)
		if len(changes) == 0 {
			return "", tag(ErrInvalid, errors.New("nothing to update: set --types, --filter, --path, --url, --header, --remove-header or --description"))
		}
		return strings.Join(changes, ", "), nil
	})
}

func cloneSubscription(s *rivorav1.Subscription) *rivorav1.Subscription {
	return proto.Clone(s).(*rivorav1.Subscription)
}

func orNone(s string) string { return orDefault(s, "(none)") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (cp *ControlPlane) pauseSubscription(id string, who actor, reason string, sc scope) (*rivorav1.Subscription, uint64, error) {
	reason, err := pauseReason(reason, "subscriptions get", "its events are held")
	if err != nil {
		return nil, 0, err
	}
	return cp.changeSubscription("subscription.pause", id, who, reason, sc, func(s *rivorav1.Subscription, _ *rivorav1.Destination) (string, error) {
		if s.GetPaused() {
			return "", errorf(ErrPrecondition, "subscription %q is already paused; resume it with `rivoractl subscriptions resume %s`", s.GetId(), s.GetId())
		}
		s.Paused = true
		s.Pauses = startPause(s.Pauses, cp.now(), reason, who.name)
		return "paused", nil
	})
}

func (cp *ControlPlane) resumeSubscription(id string, who actor, sc scope) (*rivorav1.Subscription, uint64, error) {
	return cp.changeSubscription("subscription.resume", id, who, "", sc, func(s *rivorav1.Subscription, _ *rivorav1.Destination) (string, error) {
		if !s.GetPaused() {
			return "", errorf(ErrPrecondition, "subscription %q is not paused", s.GetId())
		}
		s.Paused = false
		lasted := endPause(s.Pauses, cp.now())
		return fmt.Sprintf("resumed after %s", lasted.Round(time.Millisecond)), nil
	})
}

// rotateSubscriptionSecret makes secret (generated when empty) the
// subscription's signing secret, the current one signing too for the
// grace period, as a destination's rotation does (rotate). A
// subscription signed by its destination's secret until now gets its
// own, and the destination's current v1 secret keeps signing its
// deliveries for the grace (destination_secret_until): the agents add it
// as they sign, so the subscription never holds a copy of it, and a
// rotation of the destination's secret meanwhile is followed (its new
// secret signs; its previous one, in its own grace, does not). A
// destination that signs v1a (ed25519) only has no v1 secret to keep,
// and needs no overlap: its key keeps signing the subscription's
// deliveries beside the subscription's secret (the agents add it as
// they sign).
func (cp *ControlPlane) rotateSubscriptionSecret(m *rivorav1.RotateSubscriptionSecretRequest, who actor, sc scope) (*rivorav1.Subscription, uint64, error) {
	grace, err := rotationGrace(m.GetGrace())
	if err != nil {
		return nil, 0, err
	}
	secret, err := secretOrNew(m.GetSecret())
	if err != nil {
		return nil, 0, err
	}
	return cp.changeSubscription("subscription.rotate_secret", m.GetId(), who, "", sc, func(s *rivorav1.Subscription, d *rivorav1.Destination) (string, error) {
		if secret == s.GetSecret() {
			return "", errorf(ErrInvalid, "secret: that is subscription %q's current secret; pass another one, or none to have one generated", s.GetId())
		}
		now := cp.now()
		r := rotate(s.GetSecret(), secret, grace, now)
		first := s.GetSecret() == ""
		s.Secret, s.PreviousSecret, s.PreviousSecretExpiresAt = secret, r.previous, r.until
		s.DestinationSecretUntil = nil
		// Only a destination's v1 (HMAC) secret can sign beside the
		// subscription's: one that signs v1a (ed25519) only has none.
		if first && grace > 0 && signsV1(d.GetSignatureScheme()) {
			until := now.Add(grace)
			s.DestinationSecretUntil = timestamppb.New(until)
			return fmt.Sprintf("secret set to %s; its destination's secret signs too until %s (grace %s)", auth.Fingerprint(secret), until.UTC().Format(time.RFC3339), grace), nil
		}
		return r.detail, nil
	})
}

// deleteSubscription removes a subscription the caller may see. One with
// pending events is refused unless force, which first archives them as
// dead letters (reason deleted) on the agents — the flow of
// deleteDestination: an event in flight is left to its attempt, and the
// events queued behind it are archived once it ends; the answer and the
// audit count those apart.
func (cp *ControlPlane) deleteSubscription(ctx context.Context, id string, who actor, force bool, sc scope) (archived archivedCounts, version uint64, err error) {
	s, ok := cp.store.GetSubscription(id)
	if !ok || !sc.subscription(s) {
		return archived, 0, subscriptionNotFound(id)
	}
	pending, err := cp.agents.pending(ctx, s.GetDestinationId(), id)
	if err != nil {
		return archived, 0, err
	}
	// A forced delete archives even when nothing was counted pending:
	// events accepted but not yet in their partition's lanes are not
	// counted, and the archive waits for them (owner.awaitMoved).
	if pending > 0 || force {
		if !force {
			return archived, 0, errorf(ErrPrecondition, "subscription %q has %s; wait for them, or delete with --force to archive them as dead letters", id, pendingEvents(pending))
		}
		if archived, err = cp.agents.archivePending(ctx, s.GetDestinationId(), id); err != nil {
			return archivedCounts{}, 0, fmt.Errorf("archive pending events of subscription %q (%d archived so far): %w", id, archived.archived, err)
		}
	}
	version, err = cp.change("subscription.delete", s.GetDestinationId(), who, "", func(tx *DestinationTx) (string, error) {
		if !tx.Subscriptions().Has(id) {
			return "", subscriptionNotFound(id)
		}
		tx.Subscriptions().Delete(id)
		return fmt.Sprintf("subscription %s (customer %s) deleted; %s", id, s.GetCustomerId(), archived.detail()), nil
	})
	return archived, version, err
}

// stateTimeout bounds how long an answer waits for the agents' health to
// tell its destinations' states.
const stateTimeout = 2 * time.Second

// destinationStates is each destination's state as subscriptions'
// answers show it (destination_state): "paused" (the store says so),
// else "unusable" when an agent cannot build its config (and holds its
// events), else "down" when parked on some agent, "degraded" when degraded on
// some, "healthy" when the agents report it healthy, and "unknown" when
// they do not answer or do not report it. One question to the agents.
func (cp *ControlPlane) destinationStates(ctx context.Context, destinations []string) map[string]string {
	out := make(map[string]string, len(destinations))
	if len(destinations) == 0 {
		return out
	}
	ask := ""
	if len(destinations) == 1 {
		ask = destinations[0]
	}
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	health, err := cp.agents.health(ctx, ask, false)
	rank := map[string]int{"healthy": 1, "degraded": 2, "parked": 3}
	worst := map[string]string{}
	unusable := map[string]bool{} // an agent cannot build its config: it holds the events
	for _, h := range health {
		id := h.GetDestinationId()
		if rank[h.GetState()] > rank[worst[id]] {
			worst[id] = h.GetState()
		}
		unusable[id] = unusable[id] || h.GetUnusable() != ""
	}
	for _, id := range destinations {
		state := "unknown"
		switch d, ok := cp.store.Get(id); {
		case ok && d.GetPaused():
			state = "paused"
		case err != nil:
		case unusable[id]:
			state = "unusable"
		case worst[id] == "parked":
			state = "down"
		case worst[id] != "":
			state = worst[id]
		}
		out[id] = state
	}
	return out
}

// answerSubscriptions are stored subscriptions as API answers show them
// (answerSubscription), with their destinations' states.
func (cp *ControlPlane) answerSubscriptions(ctx context.Context, subs []*rivorav1.Subscription) []*rivorav1.Subscription {
	seen := map[string]bool{}
	var dests []string
	for _, s := range subs {
		if id := s.GetDestinationId(); !seen[id] {
			seen[id] = true
			dests = append(dests, id)
		}
	}
	states := cp.destinationStates(ctx, dests)
	sc := scopeOf(ctx)
	out := make([]*rivorav1.Subscription, len(subs))
	for i, s := range subs {
		out[i] = cp.answerSubscription(s, states[s.GetDestinationId()], false, sc)
	}
	return out
}

// withoutSubscriptionSecrets replaces s's signing secrets (the previous
// one of a rotation too) and its custom header values by their
// fingerprints.
func withoutSubscriptionSecrets(s *rivorav1.Subscription) {
	s.SecretFingerprint = auth.Fingerprint(s.GetSecret())
	s.Secret = ""
	s.PreviousSecretFingerprint = auth.Fingerprint(s.GetPreviousSecret())
	s.PreviousSecret = ""
	maskHeaderValues(s.GetHeaders())
}

// answerSubscription is a stored subscription as an API answer shows it:
// its secrets and header values replaced by their fingerprints (but for
// the secret itself with showSecret: the answers to create and rotate),
// delivery_url the destination's URL when it has no path or URL of its
// own, and destination_state state. A customer token (sc) is shown of a
// subscription to a shared destination only the origin of where its
// deliveries go (shownOrigin), and no path or URL: on a shared
// destination those are the operators' (a customer may not set them),
// and they, as the destination's path and query, may hold a credential
// (api_key=…, a Slack-style token in the path), which the customer would
// read. On its own destination a customer sees all.
func (cp *ControlPlane) answerSubscription(s *rivorav1.Subscription, state string, showSecret bool, sc scope) *rivorav1.Subscription {
	out := cloneSubscription(s)
	withoutSubscriptionSecrets(out)
	if showSecret {
		out.Secret = s.GetSecret()
	}
	d, known := cp.store.Get(out.GetDestinationId())
	if out.GetDeliveryUrl() == "" && known {
		out.DeliveryUrl = d.GetUrl()
	}
	if sc.limited() && (!known || d.GetOwnerCustomer() == "") {
		out.DeliveryUrl = shownOrigin(out.GetDeliveryUrl())
		out.Path, out.Url = "", ""
	}
	out.DestinationState = state
	return out
}
