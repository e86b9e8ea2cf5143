package controlplane

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/httpurl"
	"github.com/rivora/rivora/internal/ids"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// The destination operations behind AdminService (destinations_endpoint.go
// serves them). Each validates its request, changes the state through
// change and returns domain errors (errors.go).

// maxPauses bounds the pause history kept per destination.
const maxPauses = 64

// applyGrace is how long a change waits for the connected agents to apply
// it before answering, so that a client can use a destination right after
// creating it. A slow agent does not block the answer longer; `--wait`
// waits for real.
const applyGrace = 2 * time.Second

// change applies fn to the stored destinations as one new config version,
// records it in the audit log and pushes it to the agents.
func (cp *ControlPlane) change(action, destinationID string, who actor, reason string, fn func(tx *DestinationTx) (detail string, err error)) (uint64, error) {
	var detail string
	version, err := cp.store.Update(func(tx *DestinationTx) error {
		var err error
		detail, err = fn(tx)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrConflict) {
			cp.reloaded()
		}
		return 0, err
	}
	cp.record(action, destinationID, who, detail, version, reason)
	cp.own.add(who.tokenID, version)
	cp.log.Info("config changed", "action", action, "destination", destinationID, "author", who.name, "token_id", who.tokenID, "version", version, "detail", detail)
	cp.broadcast()
	cp.agents.awaitApplied(version, applyGrace)
	return version, nil
}

// changeDestination is change for one existing destination: fn edits d
// and says what it changed; it returns the edited destination.
func (cp *ControlPlane) changeDestination(action, id string, who actor, reason string, fn func(d *rivorav1.Destination) (string, error)) (*rivorav1.Destination, uint64, error) {
	var updated *rivorav1.Destination
	version, err := cp.change(action, id, who, reason, func(tx *DestinationTx) (string, error) {
		d, ok := tx.Get(id)
		if !ok {
			return "", notFound(id)
		}
		updated = d
		return fn(d)
	})
	return updated, version, err
}

// createDestination registers a destination. A customer token (sc) may
// not make one on a shared destination's origin (customerOrigin), nor
// send its OAuth2 token requests there (customerTokenOrigin); an
// operator making a shared destination on the origin of customers' own
// is warned (ownedAtOrigin), not refused.
func (cp *ControlPlane) createDestination(m *rivorav1.CreateDestinationRequest, who actor, sc scope) (*rivorav1.Destination, uint64, error) {
	if err := ids.Validate("id", m.GetId()); err != nil {
		return nil, 0, tag(ErrInvalid, err)
	}
	if err := reserved(m.GetId()); err != nil {
		return nil, 0, err
	}
	if c := m.GetOwnerCustomer(); c != "" {
		if err := ids.Validate("owner_customer", c); err != nil {
			return nil, 0, tag(ErrInvalid, err)
		}
	}
	if err := validateURL(m.GetUrl()); err != nil {
		return nil, 0, err
	}
	rawURL, err := cp.guardURL(m.GetUrl())
	if err != nil {
		return nil, 0, err
	}
	secret, err := secretOrNew(m.GetSecret())
	if err != nil {
		return nil, 0, err
	}
	configured := proto.Clone(orEmpty(m.GetLimits())).(*rivorav1.Limits)
	if err := checkLimits(configured); err != nil {
		return nil, 0, err
	}
	now := timestamppb.New(cp.now())
	d := &rivorav1.Destination{
		Id: m.GetId(), Url: rawURL, Secret: secret, Configured: configured, OwnerCustomer: m.GetOwnerCustomer(),
		CreatedAt: now, UpdatedAt: now, PriorityClass: rivorav1.PriorityClass_PRIORITY_CLASS_NORMAL,
	}
	if _, err := applyHeaders(d, m.GetHeaders(), nil); err != nil {
		return nil, 0, err
	}
	authDetail, err := cp.applyEndpointAuthCreate(d, m)
	if err != nil {
		return nil, 0, err
	}
	signing, err := createSignatures(d, m)
	if err != nil {
		return nil, 0, err
	}
	var owned []string
	version, err := cp.change("destination.create", d.Id, who, "", func(tx *DestinationTx) (string, error) {
		if old, ok := tx.Read(d.Id); ok {
			if d.OwnerCustomer != "" && old.GetOwnerCustomer() != d.OwnerCustomer {
				// Ids are one namespace: the id is refused, but a
				// customer learns nothing of whose it is.
				return "", errorf(ErrExists, "destination id %q is taken; choose another id", d.Id)
			}
			return "", errorf(ErrExists, "destination %q already exists; change it with `rivoractl destinations update %s`", d.Id, d.Id)
		}
		if err := customerOrigin(tx, d.Url, sc); err != nil {
			return "", err
		}
		if err := customerTokenOrigin(tx, d.GetOauth2().GetTokenUrl(), sc); err != nil {
			return "", err
		}
		if err := cp.checkCapacity(tx, d.OwnerCustomer); err != nil {
			return "", err
		}
		if d.OwnerCustomer == "" {
			owned = ownedAtOrigin(tx, d.Url, d.Id)
		}
		// An event accepted under an older version was for a destination
		// of this id deleted before (an edge's, accepted while cut off):
		// the agents dead-letter it rather than deliver it here.
		d.CreatedVersion = tx.Version()
		tx.Put(d)
		detail := "url " + d.Url + describeHeaders(d.Headers) + authDetail + signing
		if d.OwnerCustomer != "" {
			detail += ", owned by customer " + d.OwnerCustomer
		}
		return detail + sharesOrigin(owned), nil
	})
	if err == nil {
		cp.warnSharedOrigin(d, owned)
	}
	return d, version, err
}

// secretOrNew checks a given signing secret, or makes one when none is
// given. The secret kept is the one given without the whitespace around
// it (webhook.Key ignores it): its fingerprint is the secret's, and a
// receiver that does not trim verifies with what it is shown.
func secretOrNew(secret string) (string, error) {
	if secret == "" {
		return webhook.NewSecret()
	}
	secret = strings.TrimSpace(secret)
	if _, err := webhook.Key(secret); err != nil {
		return "", errorf(ErrInvalid, "secret: %w", err)
	}
	return secret, nil
}

// destination returns a destination the caller may see (sc) and its
// pending events on the agents.
func (cp *ControlPlane) destination(ctx context.Context, id string, sc scope) (*rivorav1.Destination, int64, error) {
	d, ok := cp.store.Get(id)
	if !ok || !sc.destination(d) {
		return nil, 0, notFound(id)
	}
	pending, err := cp.agents.pending(ctx, id, "")
	if err != nil {
		return nil, 0, err
	}
	return d, pending, nil
}

// updateDestination changes a destination. A new URL follows the origin
// rules of createDestination: a customer token (sc; the policy lets none
// update today) may not move its own destination, or its OAuth2 token
// URL, onto a shared destination's origin, and an operator moving a
// shared destination onto the origin of customers' own is warned.
func (cp *ControlPlane) updateDestination(m *rivorav1.UpdateDestinationRequest, who actor, sc scope) (*rivorav1.Destination, uint64, error) {
	if err := reserved(m.GetId()); err != nil {
		return nil, 0, err
	}
	var updated *rivorav1.Destination
	var owned []string
	version, err := cp.change("destination.update", m.GetId(), who, "", func(tx *DestinationTx) (string, error) {
		d, ok := tx.Get(m.GetId())
		if !ok {
			return "", notFound(m.GetId())
		}
		updated = d
		changes, err := cp.updateDestinationFields(d, m)
		if err != nil {
			return "", err
		}
		if m.GetOauth2() != nil {
			if err := customerTokenOrigin(tx, d.GetOauth2().GetTokenUrl(), sc); err != nil {
				return "", err
			}
		}
		if m.Url != nil {
			if err := customerOrigin(tx, d.GetUrl(), sc); err != nil {
				return "", err
			}
			if d.GetOwnerCustomer() == "" {
				owned = ownedAtOrigin(tx, d.GetUrl(), d.GetId())
			}
			rebased, err := cp.rebaseSubscriptions(tx, d)
			if err != nil {
				return "", err
			}
			changes = append(changes, rebased...)
		}
		return strings.Join(changes, ", ") + sharesOrigin(owned), nil
	})
	if err == nil {
		cp.warnSharedOrigin(updated, owned)
	}
	return updated, version, err
}

// updateDestinationFields applies an UpdateDestinationRequest to d and
// says what it changed.
func (cp *ControlPlane) updateDestinationFields(d *rivorav1.Destination, m *rivorav1.UpdateDestinationRequest) ([]string, error) {
	var changes []string
	if m.Url != nil {
		if err := validateURL(m.GetUrl()); err != nil {
			return nil, err
		}
		rawURL, err := cp.guardURL(m.GetUrl())
		if err != nil {
			return nil, err
		}
		d.Url = rawURL
		changes = append(changes, "url "+d.Url)
	}
	if m.Secret != nil {
		secret := strings.TrimSpace(m.GetSecret()) // as secretOrNew
		if _, err := webhook.Key(secret); err != nil {
			return nil, errorf(ErrInvalid, "secret: %w", err)
		}
		d.Secret = secret
		clearPreviousSecret(d)
		changes = append(changes, "secret replaced (no grace)")
	}
	headerChanges, err := applyHeaders(d, m.GetSetHeaders(), m.GetRemoveHeaders())
	if err != nil {
		return nil, err
	}
	changes = append(changes, headerChanges...)
	authChanges, err := cp.updateEndpointAuth(d, m)
	if err != nil {
		return nil, err
	}
	changes = append(changes, authChanges...)
	signing, err := updateSignatures(d, m)
	if err != nil {
		return nil, err
	}
	changes = append(changes, signing...)
	set := &rivorav1.Limits{RatePerSecond: m.GetRatePerSecond(), Burst: m.GetBurst(), MaxAttempts: m.GetMaxAttempts(), Window: m.GetWindow(), Timeout: m.GetTimeout(), MaxInFlight: m.GetMaxInFlight()}
	if err := checkLimits(set); err != nil {
		return nil, err
	}
	if d.Configured == nil {
		d.Configured = &rivorav1.Limits{}
	}
	changes = append(changes, copySetFields(d.Configured, set)...)
	if len(changes) == 0 {
		return nil, tag(ErrInvalid, errors.New("nothing to update: set --url, --secret, --header, --remove-header, a limit, --signature-scheme, --signing-key, a legacy signature, --client-cert/--client-key, --server-ca, --oauth2-* or a --remove-* flag"))
	}
	d.UpdatedAt = timestamppb.New(cp.now())
	return changes, nil
}

// copySetFields copies the fields set in set to dst and describes them.
func copySetFields(dst, set *rivorav1.Limits) []string {
	var changes []string
	for _, f := range limitFields {
		if fieldSet(set, f) {
			copyField(dst, set, f)
			changes = append(changes, f+" "+fieldText(set, f))
		}
	}
	return changes
}

// deleteDestination removes a destination the caller may see (sc). One
// with subscriptions or pending events is refused unless force, which
// first archives its pending events as dead letters (its subscriptions'
// included), then deletes it and its subscriptions in one change. An
// event in flight is left to its attempt, and the events queued behind
// it in its lane are archived once it ends: the answer and the audit
// count those apart from the events archived (archivedCounts).
func (cp *ControlPlane) deleteDestination(ctx context.Context, id string, who actor, force bool, sc scope) (archived archivedCounts, version uint64, err error) {
	if err := reserved(id); err != nil {
		return archived, 0, err
	}
	if d, ok := cp.store.Get(id); !ok || !sc.destination(d) {
		return archived, 0, notFound(id)
	}
	subs := cp.store.Subscriptions(func(s *rivorav1.Subscription) bool { return s.GetDestinationId() == id })
	if len(subs) > 0 && !force {
		return archived, 0, errorf(ErrPrecondition, "destination %q has %s (%s): delete them first (`rivoractl subscriptions delete ID`), or delete the destination with --force to delete them too", id, subscriptionCount(len(subs)), subscriptionIDs(subs))
	}
	pending, err := cp.agents.pending(ctx, id, "")
	if err != nil {
		return archived, 0, err
	}
	// A forced delete archives even when nothing was counted pending:
	// events accepted but not yet in their partition's lanes are not
	// counted, and the archive waits for them (owner.awaitMoved).
	if pending > 0 || force {
		if !force {
			return archived, 0, errorf(ErrPrecondition, "destination %q has %s; wait for them, or delete with --force to archive them as dead letters", id, pendingEvents(pending))
		}
		if archived, err = cp.agents.archivePending(ctx, id, ""); err != nil {
			return archivedCounts{}, 0, fmt.Errorf("archive pending events of %q (%d archived so far): %w", id, archived.archived, err)
		}
	}
	version, err = cp.change("destination.delete", id, who, "", func(tx *DestinationTx) (string, error) {
		var gone []*rivorav1.Subscription
		tx.Subscriptions().Each(func(s *rivorav1.Subscription) {
			if s.GetDestinationId() == id {
				gone = append(gone, s)
			}
		})
		if len(gone) > 0 && !force {
			return "", errorf(ErrPrecondition, "destination %q has %s (%s), made while it was being deleted: delete them first, or delete with --force", id, subscriptionCount(len(gone)), subscriptionIDs(gone))
		}
		for _, s := range gone {
			tx.Subscriptions().Delete(s.GetId())
		}
		tx.Delete(id)
		detail := archived.detail()
		if len(gone) > 0 {
			detail += fmt.Sprintf("; its %d subscriptions deleted too (%s)", len(gone), subscriptionIDs(gone))
		}
		return detail, nil
	})
	return archived, version, err
}

// destinationHealth asks the agents how a destination (every one the
// caller may see, sc, if id is "") is doing, with the rate history when
// withRates, and adds what the control plane knows: the pause state, and
// so the drain time. A customer token sees only its own customers'
// backlogs.
func (cp *ControlPlane) destinationHealth(ctx context.Context, id string, withRates bool, sc scope) ([]*rivorav1.DestinationHealth, error) {
	if id != "" {
		if d, ok := cp.store.Get(id); !ok || !sc.destination(d) {
			return nil, notFound(id)
		}
	}
	health, err := cp.agents.ownersHealth(ctx, id, withRates, cp.cfg.Partitions)
	kept := health[:0]
	for _, h := range health {
		d, ok := cp.store.Get(h.GetDestinationId())
		if sc.limited() && (!ok || !sc.destination(d)) {
			continue
		}
		if ok {
			h.Paused, h.Disabled, h.PauseReason = d.GetPaused(), d.GetDisabled(), openPauseReason(d)
			cp.certificateHealth(h, d)
		}
		// Paused, unusable on its owner (held as paused), or parked
		// (only probes go out until the partner answers), it does not
		// drain at its current rate.
		if !h.GetPaused() && !h.GetDisabled() && h.GetUnusable() == "" && h.GetState() != "parked" {
			h.DrainTime = heldDrainTime(drainTime(h, h.GetCurrentRate()), h.GetHoldUntil(), cp.now())
		}
		// The owner's state is its budget's, which budget_state keeps.
		h.BudgetState = h.GetState()
		h.State = healthState(h)
		if sc.limited() {
			h.Customers = slices.DeleteFunc(h.Customers, func(c *rivorav1.CustomerBacklog) bool { return !sc.customer(c.GetCustomerId()) })
		}
		kept = append(kept, h)
	}
	return kept, err
}

// healthState is what h's destination does, as its state says: a pause
// (disabled, Rivora's after a 410 Gone, before an operator's) outranks
// the owner's unusable config, which outranks the budget's state
// (budget_state). No attempt goes out while either holds it; the pause
// comes first as it outlasts the other: a config mended on the owner
// leaves the destination paused (unusable still says why, while it is).
func healthState(h *rivorav1.DestinationHealth) string {
	switch {
	case h.GetDisabled():
		return "disabled"
	case h.GetPaused():
		return "paused"
	case h.GetUnusable() != "":
		return "unusable"
	}
	return h.GetBudgetState()
}

// heldDrainTime adds to a drain time what is left of a partner's
// Retry-After hold (holdUntil; nil: none), which holds every attempt
// until it ends. nil (never drains) and 0 (nothing pending) stay.
func heldDrainTime(drain *durationpb.Duration, holdUntil *timestamppb.Timestamp, now time.Time) *durationpb.Duration {
	if drain == nil || drain.AsDuration() == 0 || holdUntil == nil || !holdUntil.AsTime().After(now) {
		return drain
	}
	return durationpb.New(drain.AsDuration() + holdUntil.AsTime().Sub(now))
}

// drainWindow is the window health counts arrivals and attempts over.
const drainWindow = time.Minute

// drainTime is how long h's pending events take to go out at rate
// attempts per second: 0 with none pending, nil when they never drain (no
// rate, nothing delivered, a backlog that grows, or so slow it takes more
// than a century). A bound from below: the partner's latency and
// max_in_flight can slow it.
//
// The model. What drains the backlog is what the partner accepts, not
// what is sent: the rate is scaled by the share of the last minute's
// attempts that were delivered (2xx; all of it with no attempt to judge
// by), so a partner answering 503 to every request never drains it.
//
// The window's arrival rate is taken off that rate, as a stream that
// keeps coming while the backlog drains: never when events arrive at
// least as fast (it grows). That overstates the time of a backlog built
// by a burst that has stopped (its events are both pending and counted as
// arriving): a backlog's age does not tell a stopped burst from a stream
// that goes on, so the figure errs on the long side rather than promise a
// drain that a continuing stream would not allow.
func drainTime(h *rivorav1.DestinationHealth, rate float64) *durationpb.Duration {
	const never = 100 * 365 * 24 * time.Hour
	pending := h.GetPendingEvents()
	if pending <= 0 {
		return durationpb.New(0)
	}
	rate = rate*deliveredShare(h) - streamArrivals(h)
	seconds := float64(pending) / rate
	if rate <= 0 || seconds > never.Seconds() {
		return nil
	}
	return durationpb.New(time.Duration(seconds * float64(time.Second)).Round(time.Millisecond))
}

// deliveredShare is the share of h's last minute's attempts the partner
// accepted (2xx): 1 with no attempt in it.
func deliveredShare(h *rivorav1.DestinationHealth) float64 {
	n := h.GetAttemptsLastMinute()
	if n <= 0 {
		return 1
	}
	failed := h.GetThrottledShare() + h.GetServerErrorShare() + h.GetClientErrorShare() + h.GetNoAnswerShare()
	delivered := n - int64(math.Round(failed*float64(n)))
	return float64(max(delivered, 0)) / float64(n)
}

// streamArrivals is the rate of arrivals taken to keep coming on top of
// h's backlog (events per second): the window's.
func streamArrivals(h *rivorav1.DestinationHealth) float64 {
	return float64(max(h.GetArrivalsLastMinute(), 0)) / drainWindow.Seconds()
}

func (cp *ControlPlane) pauseDestination(id string, who actor, reason string) (*rivorav1.Destination, uint64, error) {
	reason, err := pauseReason(reason, "destinations get", "its deliveries stopped")
	if err != nil {
		return nil, 0, err
	}
	return cp.changeDestination("destination.pause", id, who, reason, func(d *rivorav1.Destination) (string, error) {
		if d.GetPaused() {
			return "", errorf(ErrPrecondition, "destination %q is already %s; resume it with `rivoractl destinations resume %s`", d.GetId(), pauseState(d), d.GetId())
		}
		openPause(d, cp.now(), reason, who.name)
		return "paused", nil
	})
}

// pauseReason is a pause's reason, trimmed, or the refusal of a blank
// one: a pause of a destination and of a subscription each needs one,
// as an override, a skip or a resend does, for the audit log and for
// whoever finds it paused (get names it, the command given by get). One
// of them needed it in the console only, the other nowhere.
func pauseReason(reason, get, what string) (string, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return "", errorf(ErrInvalid, "a pause needs a reason (--reason \"…\"): the audit log and `rivoractl %s` say why %s", get, what)
	}
	return reason, nil
}

// openPause pauses d from now on.
func openPause(d *rivorav1.Destination, now time.Time, reason, who string) {
	d.Paused = true
	d.Pauses = startPause(d.Pauses, now, reason, who)
}

// startPause is pauses with a pause open from now on, keeping the last
// maxPauses.
func startPause(pauses []*rivorav1.PauseInterval, now time.Time, reason, who string) []*rivorav1.PauseInterval {
	pauses = append(pauses, &rivorav1.PauseInterval{Start: timestamppb.New(now), Reason: reason, Author: who})
	if len(pauses) > maxPauses {
		pauses = pauses[len(pauses)-maxPauses:]
	}
	return pauses
}

// endPause ends the open pause of pauses, if any, at now and says how
// long it lasted.
func endPause(pauses []*rivorav1.PauseInterval, now time.Time) time.Duration {
	if n := len(pauses); n > 0 && pauses[n-1].GetEnd() == nil {
		pauses[n-1].End = timestamppb.New(now)
		return now.Sub(pauses[n-1].GetStart().AsTime())
	}
	return 0
}

// pauseState says how a paused destination is paused, for messages:
// "paused" or "disabled: partner answered 410 Gone".
func pauseState(d *rivorav1.Destination) string {
	if d.GetDisabled() {
		return "disabled: " + openPauseReason(d)
	}
	return "paused"
}

// openPauseReason is the reason of d's pause while it lasts ("" when not
// paused).
func openPauseReason(d *rivorav1.Destination) string {
	if n := len(d.GetPauses()); d.GetPaused() && n > 0 && d.GetPauses()[n-1].GetEnd() == nil {
		return d.GetPauses()[n-1].GetReason()
	}
	return ""
}

const (
	// GoneReason is the pause reason of a destination disabled because its
	// partner answered 410 Gone.
	GoneReason = "partner answered 410 Gone"
	// RivoraAuthor is the audit author of every change Rivora makes by
	// itself (a 410 disable, the operator-webhook destination).
	RivoraAuthor = "rivora"
)

// disableDestination disables a destination whose partner answered 410
// Gone (an agent's ReportGone): paused with GoneReason by RivoraAuthor,
// audited as "destination.disable" and pushed to every agent, through the
// same change as an operator's pause; resume re-enables it. It is the one
// place a destination is disabled, and it sends the operator notice
// "destination.disabled" when disabled is true.
//
// A report is idempotent (agents retry until answered): nothing changes
// when the destination is already paused or disabled, or was resumed after
// the partner answered (at), so a retried report cannot undo an
// operator's resume. version is the config version holding the pause state
// the agent must apply before trusting its config again.
func (cp *ControlPlane) disableDestination(id, agentName, eventID string, status int32, at time.Time) (disabled bool, version uint64, err error) {
	if err := ids.Validate("destination_id", id); err != nil {
		return false, 0, tag(ErrInvalid, err)
	}
	if status != http.StatusGone {
		return false, 0, errorf(ErrInvalid, "status %d: only a 410 Gone disables a destination", status)
	}
	detail := fmt.Sprintf("disabled: HTTP %d to event %s (agent %s)", status, eventID, agentName)
	_, version, err = cp.changeDestination("destination.disable", id, rivoraActor, GoneReason, func(d *rivorav1.Destination) (string, error) {
		if d.GetPaused() || resumedSince(d, at) {
			return "", errNothingToDo
		}
		openPause(d, cp.now(), GoneReason, RivoraAuthor)
		d.Disabled = true
		return detail, nil
	})
	if errors.Is(err, errNothingToDo) {
		version, _ = cp.store.Snapshot()
		return false, version, nil
	}
	if err != nil {
		return false, 0, err
	}
	cp.log.Warn("destination disabled: its partner answered 410 Gone; resume it with `rivoractl destinations resume`", "destination", id, "event_id", eventID, "agent", agentName)
	cp.notify.destinationDisabled(id, GoneReason, version, cp.now())
	return true, version, nil
}

// resumedSince reports whether d's last pause ended after at.
func resumedSince(d *rivorav1.Destination, at time.Time) bool {
	n := len(d.GetPauses())
	return n > 0 && d.GetPauses()[n-1].GetEnd() != nil && d.GetPauses()[n-1].GetEnd().AsTime().After(at)
}

// resumeDestination resumes a paused (or disabled) destination. A resume
// is also "try now": it ends a partner's Retry-After hold, and so does
// the resume of a destination that is not paused but held: a pause that
// ends as it starts (it pauses nothing, and moves the destination's last
// resume, which is what ends the hold and makes the held lanes due on
// every agent, as after a pause and a resume). heldUntil is the hold's end
// it ended (zero when the destination was paused). One neither paused nor
// held is refused.
func (cp *ControlPlane) resumeDestination(ctx context.Context, id string, who actor) (d *rivorav1.Destination, version uint64, heldUntil time.Time, err error) {
	if d, ok := cp.store.Get(id); ok && !d.GetPaused() {
		h, err := cp.ownerHealth(ctx, id)
		if err != nil {
			return nil, 0, time.Time{}, tag(ErrUnavailable, fmt.Errorf("destination %q is not paused, and whether its partner's Retry-After holds it is not known now: %w", id, err))
		}
		if h.GetHoldUntil() != nil && h.GetHoldUntil().AsTime().After(cp.now()) {
			heldUntil = h.GetHoldUntil().AsTime()
		}
	}
	d, version, err = cp.changeDestination("destination.resume", id, who, "", func(d *rivorav1.Destination) (string, error) {
		now := cp.now()
		if !d.GetPaused() {
			if heldUntil.IsZero() {
				return "", errorf(ErrPrecondition, "destination %q is not paused, nor held by its partner's Retry-After (destinations health shows HELD UNTIL while it is)", d.GetId())
			}
			d.Pauses = startPause(d.Pauses, now, "resume: end the partner's Retry-After hold", who.name)
			endPause(d.Pauses, now)
			return fmt.Sprintf("not paused: ended its partner's Retry-After hold (until %s)", heldUntil.UTC().Format(time.RFC3339)), nil
		}
		heldUntil = time.Time{}
		d.Paused, d.Disabled = false, false
		lasted := endPause(d.Pauses, now)
		return fmt.Sprintf("resumed after %s", lasted.Round(time.Millisecond)), nil
	})
	return d, version, heldUntil, err
}

func orEmpty(l *rivorav1.Limits) *rivorav1.Limits {
	if l == nil {
		return &rivorav1.Limits{}
	}
	return l
}

// validateURL checks a destination's URL (an ErrInvalid).
func validateURL(raw string) error {
	if u, err := httpurl.Parse(raw); err == nil {
		if u.User != nil {
			return errorf(ErrInvalid, "url carries credentials (user:password@): they would show in every answer, log and audit entry; give the receiver a URL without them, and the credentials as a custom header (--header 'Authorization: Basic …')")
		}
		// After the credentials' check: its message quotes the URL.
		if err := checkURLChars("url", raw); err != nil {
			return err
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return errorf(ErrInvalid, "url %q has port %s: want a port from 1 to 65535 (or none, for the scheme's own)", raw, p)
			}
		}
		return nil
	}
	shown := withoutUserinfo(raw)
	if _, err := url.Parse(raw); err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the whole URL
		}
		return errorf(ErrInvalid, "url %q: %w", shown, err)
	}
	return errorf(ErrInvalid, "url %q must be an absolute http:// or https:// URL", shown)
}

// withoutUserinfo is raw with the user:password@ of its authority, if
// any, cut to "…@": a URL that does not parse is quoted so, never with
// its password.
func withoutUserinfo(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	start := i + len("://")
	end := len(raw)
	if j := strings.IndexAny(raw[start:], "/?#"); j >= 0 {
		end = start + j
	}
	at := strings.LastIndex(raw[start:end], "@")
	if at < 0 {
		return raw
	}
	return raw[:start] + "…" + raw[start+at:]
}

// checkURLChars refuses a URL (or a path) with a space or an ASCII
// control character, which url.Parse lets through in a path or query
// (a control character only in a path given alone). The agents send a
// URL as stored, so a partner's server would refuse each attempt's
// request line (400) and the event would use up its attempts. Other
// bytes RFC 3986 does not allow raw ("<>\^`{|} and non-ASCII text) are
// kept as before: servers take them. what names the field ("url",
// "path"); the message quotes the text just before the byte, to find it
// by.
func checkURLChars(what, raw string) error {
	for i := 0; i < len(raw); i++ {
		b := raw[i]
		if b > ' ' && b != 0x7f {
			continue
		}
		name := "a space"
		if b != ' ' {
			name = fmt.Sprintf("the control character %#02x", b)
		}
		where := "at its start"
		if i > 0 {
			from := max(0, i-24)
			for from > 0 && !utf8.RuneStart(raw[from]) {
				from-- // not inside a character
			}
			before := raw[from:i]
			if from > 0 {
				before = "…" + before
			}
			where = fmt.Sprintf("after %q", before)
		}
		return errorf(ErrInvalid, "%s has %s %s, which a partner's server refuses in a request: percent-encode it (%s as %%%02X)", what, name, where, name, b)
	}
	return nil
}

// subscriptionCount is "1 subscription", "2 subscriptions".
func subscriptionCount(n int) string {
	if n == 1 {
		return "1 subscription"
	}
	return fmt.Sprintf("%d subscriptions", n)
}

// pendingEvents counts pending events in words: "1 pending event", "3
// pending events".
func pendingEvents(n int64) string {
	if n == 1 {
		return "1 pending event"
	}
	return fmt.Sprintf("%d pending events", n)
}
