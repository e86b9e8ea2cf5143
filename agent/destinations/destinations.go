// Package destinations holds the agent's current view of the registered
// destinations, as pushed by the control plane, and answers the one question
// the delivery path asks: which URL, secret and headers to use for an
// event to a destination, directly or through one of its subscriptions.
package destinations

import (
	"fmt"
	"hash/maphash"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rivora/rivora/agent/heldtime"
	"github.com/rivora/rivora/agent/limits"
	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/internal/legacysig"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// Destination is a destination as the agent uses it.
type Destination struct {
	ID     string
	URL    string
	Signer *webhook.Signer
	// Headers are the destination's custom headers (canonical names).
	Headers http.Header
	Timeout time.Duration
	Retry   retry.Policy
	Limits  limits.Limits
	Class   limits.Class
	// Weights are customers' shares of the budget (unlisted: 1).
	Weights map[string]float64
	// secret is the current v1 (HMAC) signing secret ("" : none), which
	// also signs a subscription's deliveries for the grace of its first
	// own secret (Endpoint).
	secret string
	// edKey is the ed25519 key when the scheme signs v1a ("": it does
	// not), with a key rotation's previous one until edPreviousUntil: it
	// signs the deliveries of a subscription with its own secret too.
	edKey, edPrevious string
	edPreviousUntil   time.Time
	// OwnerCustomer is set on a customer's own destination: it takes
	// that customer's events only (TakesEventsOf).
	OwnerCustomer string
	// CreatedAt is when the control plane made it (zero: not known).
	CreatedAt time.Time
	// CreatedVersion is the config version that made it (0: not known):
	// an event accepted under an older one was for an earlier
	// destination of this id, deleted since.
	CreatedVersion uint64
	// Paused is the control plane's pause (an operator's, or Rivora's
	// after a 410 Gone: Disabled), never this agent's own hold: see Held.
	Paused bool
	// Disabled: the pause is Rivora's, after its partner answered 410 Gone.
	Disabled bool
	// Pauses are its recent pauses (PausedBetween).
	Pauses retry.Pauses
	// TLS (nil: defaults) and OAuth2 (nil: none) authenticate the agent
	// to the partner; an event a subscription routed uses them too.
	TLS    *ClientTLS
	OAuth2 *OAuth2
	// Legacy signs a partner's pre-existing signature header (nil: none);
	// with LegacyOnly, webhook-signature is left out.
	Legacy     *legacysig.Signer
	LegacyOnly bool
	// Unusable is why this agent could not build the destination from
	// its config (nil: it could), e.g. a key in a format this agent's
	// version does not parse though the control plane took it. Such a
	// destination is installed all the same, without what signs and
	// authenticates its deliveries, and held as a paused one (Held; its
	// Paused stays the control plane's): its events are accepted and
	// kept, never attempted, until a config of it builds. Dropping it instead would have ingest refuse
	// its events and the owner dead-letter its pending ones.
	Unusable error
	// UnusableStretches are when this agent held the destination as
	// unusable (the last has no end while it lasts): time that, like a
	// pause, does not count against an event's window, since no one
	// could have fixed it from the event's side. The control plane does
	// not know them: they are this agent's, kept in its data directory
	// for its next run (heldtime; Registry.Recall).
	UnusableStretches retry.Pauses

	// subSigners caches subscriptionSigner's signers, by subscription id:
	// a subSigner (the signer of the subscription value it was built
	// for, with or without the grace; a changed subscription is a new
	// value). A destination whose secret or key changes is a new value
	// too, with an empty cache.
	subSigners sync.Map
}

type subSigner struct {
	sub    *subscriptions.Subscription
	grace  bool
	signer *webhook.Signer
}

// TakesEventsOf reports whether the destination takes customer's events:
// a customer's own destination takes only its owner's, any other takes
// every customer's.
func (d *Destination) TakesEventsOf(customer string) bool {
	return d.OwnerCustomer == "" || d.OwnerCustomer == customer
}

// Held reports whether the agent holds the destination's events: the
// control plane paused it, or this agent cannot build it (Unusable).
// Paused alone is the control plane's value, which a mended config
// keeps: a destination both paused and unusable stays paused once its
// config builds.
func (d *Destination) Held() bool { return d.Paused || d.Unusable != nil }

// PausedBetween is how long the destination was paused between from and
// to: time that does not count against an event's window.
func (d *Destination) PausedBetween(from, to time.Time) time.Duration {
	if len(d.UnusableStretches) > 0 {
		return d.Pauses.Union(d.UnusableStretches, from, to)
	}
	return d.Pauses.Between(from, to)
}

// PausedBetweenWith is how long the destination or its event's
// subscription (sub: its pauses, nil for an event published to the
// destination) was paused between from and to, a time both were paused
// counted once.
func (d *Destination) PausedBetweenWith(sub retry.Pauses, from, to time.Time) time.Duration {
	if len(d.UnusableStretches) > 0 {
		return d.Pauses.Merge(d.UnusableStretches).Union(sub, from, to)
	}
	return d.Pauses.Union(sub, from, to)
}

// Endpoint is where and how one event to a destination goes.
type Endpoint struct {
	URL    string
	Signer *webhook.Signer
	// Headers are custom headers for every attempt; shared, not to be
	// modified.
	Headers http.Header
	// TLS and OAuth2 are the destination's (nil: none); shared.
	TLS    *ClientTLS
	OAuth2 *OAuth2
	// Legacy and LegacyOnly are the destination's legacy signature.
	Legacy     *legacysig.Signer
	LegacyOnly bool
}

// Registry is the current set of destinations. Reads are lock-free: the
// set is immutable once published, and a config change publishes a new
// one. The set is split into registryShards maps by id, and a change
// copies only the shards it touches: copying the whole set on every
// change made resuming each of 10k destinations (an operator ending an
// incident) cost a copy of all 10k, ten thousand times over (bench
// scale: 36–52 s to resume them, 2.8 GB of garbage; 13 s now).
type Registry struct {
	current atomic.Pointer[registrySet]
	// recalled are the stretches of being unusable that the agent's
	// previous run kept (heldtime), by destination id, each until that
	// destination's first config here carries it on; none once a whole
	// config applied. Only the config follower uses it, as it alone
	// changes the set.
	recalled map[string]heldtime.Held
}

// registryShards is how many maps the set is split into.
const registryShards = 256

// registrySet is one published set: destinations by id, in the shard
// shardOf names. Never modified once published.
type registrySet [registryShards]map[string]*Destination

// shardSeed seeds shardOf's hash (one per process).
var shardSeed = maphash.MakeSeed()

// shardOf is the shard of the destination id.
func shardOf(id string) int { return int(maphash.String(shardSeed, id) % registryShards) }

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	r := &Registry{}
	r.current.Store(&registrySet{})
	return r
}

// Recall gives the registry, before its first config, the stretches of
// being unusable that the agent's previous run kept (heldtime: one open
// at the stop is closed where the agent was last seen running): each
// destination carries them on, its events' windows crediting the time
// held before the restart; one still unusable opens a new stretch at
// its first config.
func (r *Registry) Recall(held map[string]heldtime.Held) { r.recalled = held }

// Replace installs a new set of destinations. It returns every one it
// installed, an unusable one (Destination.Unusable) among them: one
// destination's config that does not build holds only that destination,
// never the whole set, nor every later config after it. now is the
// caller's clock's time, when a destination becomes unusable or usable
// (its UnusableStretches).
func (r *Registry) Replace(now time.Time, list []*rivorav1.Destination) []*Destination {
	out := r.apply(now, &registrySet{}, list, nil)
	r.recalled = nil // what no destination took is of destinations gone
	return out
}

// Update changes and adds the listed destinations and removes the removed
// ones, keeping the rest. It returns the changed ones, and takes now,
// as Replace.
func (r *Registry) Update(now time.Time, changed []*rivorav1.Destination, removed []string) []*Destination {
	next := *r.current.Load() // the shards' maps are shared until copied
	return r.apply(now, &next, changed, removed)
}

// apply makes the changes in next, whose shards may be a published set's
// (each is copied before its first change), and publishes next.
func (r *Registry) apply(now time.Time, next *registrySet, changed []*rivorav1.Destination, removed []string) []*Destination {
	var copied [registryShards]bool
	shard := func(id string) map[string]*Destination {
		i := shardOf(id)
		if !copied[i] {
			copied[i] = true
			m := make(map[string]*Destination, len(next[i])+1)
			for k, d := range next[i] {
				m[k] = d
			}
			next[i] = m
		}
		return next[i]
	}
	out := make([]*Destination, 0, len(changed))
	for _, pb := range changed {
		d, err := FromProto(pb)
		if err != nil {
			d = unusable(pb, err)
		}
		previous, _ := r.Get(pb.GetId())
		d.UnusableStretches = unusableStretches(r.earlier(previous, d), d, now)
		shard(d.ID)[d.ID] = d
		out = append(out, d)
	}
	for _, id := range removed {
		delete(shard(id), id)
	}
	r.current.Store(next)
	return out
}

// maxUnusableStretches bounds the stretches a destination keeps: one
// that breaks and mends more often than this has the two stretches
// closest in time folded into one covering both and the gap between
// (retry.Pauses.Bounded): that over-credits a pending event's window by
// that gap, never under-credits it, as dropping the oldest would for an
// event pending since then.
const maxUnusableStretches = 16

// earlier are d's stretches of being unusable before this config: those
// of previous (the value d replaces; nil: none), or at d's first config
// since the agent started those its previous run kept (Recall). A
// destination made again under the same id (another CreatedVersion)
// starts with none.
func (r *Registry) earlier(previous, d *Destination) retry.Pauses {
	if previous != nil {
		if previous.CreatedVersion != d.CreatedVersion {
			return nil
		}
		return previous.UnusableStretches
	}
	held, ok := r.recalled[d.ID]
	if !ok || held.Generation != d.CreatedVersion {
		return nil
	}
	delete(r.recalled, d.ID)
	return held.Stretches
}

// unusableStretches are d's stretches of being unusable, from before
// (its stretches so far: earlier) as of now: one opens as d becomes
// unusable, and closes as it becomes usable.
func unusableStretches(before retry.Pauses, d *Destination, now time.Time) retry.Pauses {
	open := len(before) > 0 && before[len(before)-1].End.IsZero()
	switch {
	case d.Unusable != nil && !open:
		before = append(slices.Clip(before), retry.Pause{Start: now})
	case d.Unusable == nil && open:
		before = slices.Clone(before) // the previous value's stays as published
		before[len(before)-1].End = now
	}
	return before.Bounded(maxUnusableStretches)
}

// unusable is the destination pb names as this agent holds it when it
// cannot build it (why: err): its identity, owner, limits and pauses,
// none of what signs or authenticates a delivery, held (Held).
func unusable(pb *rivorav1.Destination, err error) *Destination {
	d := settingsFromProto(pb)
	d.Unusable = err
	return d
}

// All returns every destination.
func (r *Registry) All() []*Destination {
	cur := r.current.Load()
	n := 0
	for _, m := range cur {
		n += len(m)
	}
	out := make([]*Destination, 0, n)
	for _, m := range cur {
		for _, d := range m {
			out = append(out, d)
		}
	}
	return out
}

// Get returns a destination by id.
func (r *Registry) Get(id string) (*Destination, bool) {
	d, ok := r.current.Load()[shardOf(id)][id]
	return d, ok
}

// Endpoint returns where and how an event to a destination goes: the
// destination's URL, signer and custom headers, or, for an event a
// subscription routed (sub not nil), the subscription's URL and signer
// where it has its own, and the destination's headers with the
// subscription's over them (its value wins for the same name). The
// budget, limits, timeout and retry policy stay the destination's.
func (r *Registry) Endpoint(destinationID string, sub *subscriptions.Subscription) (Endpoint, error) {
	d, ok := r.Get(destinationID)
	if !ok {
		return Endpoint{}, fmt.Errorf("destination %q is not registered", destinationID)
	}
	return d.Endpoint(sub), nil
}

// Endpoint is where and how an event to d goes (see Registry.Endpoint).
func (d *Destination) Endpoint(sub *subscriptions.Subscription) Endpoint {
	e := Endpoint{URL: d.URL, Signer: d.Signer, Headers: d.Headers, TLS: d.TLS, OAuth2: d.OAuth2, Legacy: d.Legacy, LegacyOnly: d.LegacyOnly}
	if sub == nil {
		return e
	}
	if sub.URL != "" {
		e.URL = sub.URL
	}
	if sub.Signer != nil {
		e.Signer = d.subscriptionSigner(sub)
	}
	if len(sub.Headers) > 0 {
		e.Headers = overlay(d.Headers, sub.Headers)
	}
	return e
}

// subscriptionSigner is what signs an event sub routed, which has a
// secret of its own. That secret takes the place of d's v1 (HMAC) secret
// only, not of d's scheme: when d signs v1a (ed25519), alone or with v1,
// d's key signs too (and a key rotation's previous one during its
// grace), so a receiver that verifies with d's public key, as v1a
// promises, is not broken by a subscription's secret; and until
// sub.DestinationSecretUntil d's current v1 secret signs too (the grace
// of the subscription's first own secret: until then its receiver may
// still verify with the destination's). The grace is checked against the
// real clock only to skip building with d's secret once it is over; the
// signer itself signs with d's secret only before until (WithPrevious).
//
// The signer is built once per subscription value: not a key decode per
// delivery.
func (d *Destination) subscriptionSigner(sub *subscriptions.Subscription) *webhook.Signer {
	grace := d.secret != "" && !sub.DestinationSecretUntil.IsZero() && !time.Now().After(sub.DestinationSecretUntil)
	if !grace && d.edKey == "" {
		if !sub.DestinationSecretUntil.IsZero() {
			d.subSigners.Delete(sub.ID) // the grace is over: its signer is no more
		}
		return sub.Signer
	}
	if cached, ok := d.subSigners.Load(sub.ID); ok && cached.(subSigner).sub == sub && cached.(subSigner).grace == grace {
		return cached.(subSigner).signer
	}
	// Replaces one built for the grace once it is over.
	signer := d.withOwnSigning(sub, grace)
	d.subSigners.Store(sub.ID, subSigner{sub: sub, grace: grace, signer: signer})
	return signer
}

// withOwnSigning is sub's signer with what of d's signs beside it: d's
// v1 secret until sub.DestinationSecretUntil (with grace), and d's
// ed25519 keys. Every secret and key was checked as it came; one that
// does not take now is left out rather than leaving the event unsigned.
func (d *Destination) withOwnSigning(sub *subscriptions.Subscription, grace bool) *webhook.Signer {
	signer := sub.Signer
	if grace {
		if pair, err := signer.WithPrevious(d.secret, sub.DestinationSecretUntil); err == nil {
			signer = pair
		}
	}
	if d.edKey == "" {
		return signer
	}
	withKey, err := signer.WithEd25519(d.edKey)
	if err != nil {
		return signer
	}
	if d.edPrevious != "" {
		if withPrevious, err := withKey.WithPreviousEd25519(d.edPrevious, d.edPreviousUntil); err == nil {
			withKey = withPrevious
		}
	}
	return withKey
}

// overlay is base's headers with over's replacing them name by name (both
// in canonical form; neither is modified).
func overlay(base, over http.Header) http.Header {
	out := make(http.Header, len(base)+len(over))
	for name, values := range base {
		out[name] = values
	}
	for name, values := range over {
		out[name] = values
	}
	return out
}

// FromProto converts a control-plane destination (limits already filled
// with defaults) into the agent's form.
func FromProto(pb *rivorav1.Destination) (*Destination, error) {
	signer, err := signerFromProto(pb)
	if err != nil {
		return nil, fmt.Errorf("destination %q: %w", pb.GetId(), err)
	}
	clientTLS, err := clientTLSFromProto(pb)
	if err != nil {
		return nil, fmt.Errorf("destination %q: %w", pb.GetId(), err)
	}
	legacy, err := legacyFromProto(pb.GetLegacySignature())
	if err != nil {
		return nil, fmt.Errorf("destination %q: %w", pb.GetId(), err)
	}
	d := settingsFromProto(pb)
	d.Signer, d.TLS, d.OAuth2 = signer, clientTLS, oauth2FromProto(pb)
	d.secret = v1Secret(pb)
	d.edKey, d.edPrevious, d.edPreviousUntil = v1aKeys(pb)
	d.Legacy, d.LegacyOnly = legacy, legacy != nil && pb.GetLegacySignature().GetReplaceStandard()
	return d, nil
}

// settingsFromProto is pb's destination without what signs or
// authenticates its deliveries: what cannot fail to build.
func settingsFromProto(pb *rivorav1.Destination) *Destination {
	lim := pb.GetLimits()
	policy := retry.DefaultPolicy()
	if n := lim.GetMaxAttempts(); n > 0 {
		policy.MaxAttempts = int(n)
	}
	if w := lim.GetWindow().AsDuration(); w > 0 {
		policy.Window = w
	}
	timeout := lim.GetTimeout().AsDuration()
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	var createdAt time.Time
	if ts := pb.GetCreatedAt(); ts != nil {
		createdAt = ts.AsTime()
	}
	return &Destination{
		ID:             pb.GetId(),
		CreatedAt:      createdAt,
		CreatedVersion: pb.GetCreatedVersion(),
		URL:            pb.GetUrl(),
		Headers:        headersFromProto(pb.GetHeaders()),
		Timeout:        timeout,
		Retry:          policy,
		Limits: limits.Limits{
			RatePerSecond: lim.GetRatePerSecond(),
			Burst:         int(lim.GetBurst()),
			MaxInFlight:   int(lim.GetMaxInFlight()),
		},
		Class:         classFromProto(pb.GetPriorityClass()),
		Weights:       pb.GetCustomerWeights(),
		OwnerCustomer: pb.GetOwnerCustomer(),
		Paused:        pb.GetPaused(),
		Disabled:      pb.GetDisabled(),
		Pauses:        retry.PausesFromProto(pb.GetPauses()),
	}
}

func classFromProto(c rivorav1.PriorityClass) limits.Class {
	switch c {
	case rivorav1.PriorityClass_PRIORITY_CLASS_HIGH:
		return limits.High
	case rivorav1.PriorityClass_PRIORITY_CLASS_LOW:
		return limits.Low
	default:
		return limits.Normal
	}
}

// ClassToProto is the API form of a priority class.
func ClassToProto(c limits.Class) rivorav1.PriorityClass {
	switch c {
	case limits.High:
		return rivorav1.PriorityClass_PRIORITY_CLASS_HIGH
	case limits.Low:
		return rivorav1.PriorityClass_PRIORITY_CLASS_LOW
	default:
		return rivorav1.PriorityClass_PRIORITY_CLASS_NORMAL
	}
}
