// Package verdict decides what becomes of one delivery attempt. Decide is
// a pure function: from the facts a worker gathered (is the partition
// open here, could the event be loaded, do its destination and (for an
// event a subscription routed) its subscription exist, is either paused,
// did the partner answer and how, is the destination otherwise
// healthy, the retry policy, the time) it returns one Verdict, a value.
// The partition owner applies it (owner.Settle): the ledger, the history,
// the dead letter, then exactly one call to the scheduler.
//
// An edge's copy of an event whose idempotency key the cell had used for
// another event (Facts.Conflict) dies at its turn without being sent
// (reason idempotency_conflict).
//
// Decide is called twice per attempt that is sent: before sending (the
// verdict is Send unless something ends the attempt first: the partition
// is not open, the destination was deleted or paused, the window closed
// while its destination held the event, …) and again with the result.
// No branch settles anything itself, so every attempt gets exactly one
// verdict and one settlement.
package verdict

import (
	"time"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/agent/scheduler"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Kind is what becomes of an attempt.
type Kind int

const (
	// Send: nothing ends the attempt before it is sent; send it and
	// decide again with the result. Never settled.
	Send Kind = iota
	// Delivered: the partner answered 2xx; the lane advances.
	Delivered
	// Retry: a failure charged to the event (its own, or its
	// destination's while the destination answers the other lanes); the
	// head, with one more attempt, retries at Head.NotBefore on its own
	// back-off.
	Retry
	// Hold: the destination's failure while it is down or throttling; not
	// charged: the head keeps its attempts and waits for its destination
	// (Head.HeldByDestination), never past its window.
	Hold
	// Wait: not sent, or sent but not charged (a 410 disables the
	// destination here); nothing is recorded in the ledger and the head,
	// otherwise unchanged, is due again at Head.NotBefore.
	Wait
	// Release: not sent (the destination is paused); the lane is due again
	// with its state unchanged, behind the pause.
	Release
	// Dead: the event becomes a dead letter with Reason; the lane
	// advances.
	Dead
	// Skip: the event is not in the lane store (or does not decode); the
	// lane moves past it with nothing recorded.
	Skip
)

var kindNames = [...]string{"send", "delivered", "retry", "hold", "wait", "release", "dead", "skip"}

func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "unknown"
	}
	return kindNames[k]
}

// Verdict is what becomes of one attempt.
type Verdict struct {
	Kind Kind
	// Head is the lane head's state after the attempt: for Retry, Hold and
	// Wait what the lane keeps (NotBefore: when it is due again); for Dead
	// what the dead letter records (attempts, last status and error).
	Head scheduler.Head
	// Reason: why the event died (Dead).
	Reason rivorav1.DeadReason
	// Sent: the partner was called; the history records the attempt.
	Sent bool
	// Ledger: the head's new state is written to the ledger (Retry, and a
	// Hold that starts: a head already held changes only its retry time,
	// which a rebuild does not need).
	Ledger bool
	// ArchiveSubscriptionRest: the event's subscription was deleted; the
	// subscription's other pending events follow this one to the archive
	// (the destination's other events stay).
	ArchiveSubscriptionRest bool
	// Disable: the partner answered 410; the destination stops here until
	// an operator resumes it.
	Disable bool
}

// NotCharged says why an attempt that was sent (Sent), whose partner
// answered res, used none of the event's attempts: "destination down",
// "destination throttling (429)" (held: the failure was the destination's
// while it failed the other lanes too, Hold or a Dead that closed its
// window while held) or "destination gone (410)". Empty when it used one;
// the history records it with the attempt.
func (v Verdict) NotCharged(res delivery.Result) string {
	switch {
	case !v.Sent:
		return ""
	case v.Disable:
		return "destination gone (410)"
	case v.Kind == Hold, v.Kind == Dead && v.Head.HeldByDestination:
		if res.Status == 429 {
			return "destination throttling (429)"
		}
		return "destination down"
	}
	return ""
}

// Facts are what Decide needs to know about one attempt, gathered by the
// worker that holds it.
type Facts struct {
	Attempt *scheduler.Attempt
	Now     time.Time
	// PartitionOpen: the attempt's partition is open here (not still
	// opening after a rebuild, not being released).
	PartitionOpen bool
	// LoadErr: the event could not be loaded from the lane store;
	// LoadGone: because the store answered that it is not there, or its
	// bytes do not decode (no later load can succeed). Otherwise the store
	// did not answer (a timeout, a leader election), and a later load may.
	LoadErr  error
	LoadGone bool
	// Conflict: the event is an edge's copy whose idempotency key the
	// cell had used for another event (Event.idempotency_conflict): why
	// it is not delivered.
	Conflict string
	// DestinationKnown: the destination is in the config (it may have
	// been deleted while the attempt was handed out).
	DestinationKnown bool
	// DestinationRecreated: the destination in the config was created
	// after the config version the event was accepted under, so the
	// event was accepted for an earlier destination of that id, deleted
	// since (an edge accepted it while cut off from the cell): it is not
	// this destination's to deliver.
	DestinationRecreated bool
	// Paused: the destination is paused.
	Paused bool
	// SubscriptionMissing: the event was routed by a subscription that is
	// not in the config (deleted, with --force, while it was pending).
	SubscriptionMissing bool
	// SubscriptionDeleting: the subscription is still in the config, but
	// a forced delete archived its pending events here moments ago, and
	// the config that deletes it has not arrived yet.
	SubscriptionDeleting bool
	// ConfigBehind: the agent has not yet applied the config version the
	// event was accepted under, so a destination or subscription it does
	// not know may be one it has not heard of yet, not a deleted one.
	ConfigBehind bool
	// SubscriptionPaused: the event's subscription is paused.
	SubscriptionPaused bool
	// EndpointErr: the destination's endpoint cannot be built yet (e.g.
	// its secret has not arrived).
	EndpointErr error
	// Owned: the partition's lease is still held (not fenced).
	Owned bool
	// Policy is the destination's retry policy and WindowStart the start
	// of the event's window (acceptance, moved on by paused time).
	Policy      retry.Policy
	WindowStart time.Time
	// Result is the partner's answer; nil before the attempt is sent.
	Result *delivery.Result
	// OtherwiseHealthy: the destination is healthy apart from this
	// attempt's lane (scheduler.Observation), which decides whether a
	// failure that is the destination's is charged to the event.
	OtherwiseHealthy bool
	// Shared: the destination is shared by customers (no customer owns
	// it), and GoneOnlyItsCustomers: a 410 it answered is the attempt's
	// customer's alone (scheduler.Observation). Both: the 410 is that
	// customer's failure, not a disable.
	Shared               bool
	GoneOnlyItsCustomers bool
	// Jitter spreads a nominal back-off (retry.Jittered); nil: none, for
	// exact tests.
	Jitter func(time.Duration) time.Duration
}

// Delays of the verdicts that wait without a policy.
const (
	// OpeningDelay: the partition is still opening (or just released).
	OpeningDelay = 100 * time.Millisecond
	// EndpointDelay: the endpoint cannot be built yet, or the lease
	// lapsed (another agent delivers the partition now).
	EndpointDelay = time.Second
	// LoadDelay: the lane store did not answer a load.
	LoadDelay = time.Second
)

// Decide is what becomes of the attempt f describes. It reads nothing but
// f.
func Decide(f Facts) Verdict {
	a := f.Attempt
	switch {
	case !f.PartitionOpen:
		// Still opening (the rebuild registers lanes before the partition
		// is installed), or just released: try again shortly rather
		// than spin.
		return wait(a.Head, f.Now.Add(OpeningDelay))
	case f.LoadErr != nil && f.LoadGone:
		return Verdict{Kind: Skip}
	case f.LoadErr != nil:
		// The event is stored but the store did not answer: not sent,
		// not charged, tried again shortly. Skipping it would lose it.
		return wait(a.Head, f.Now.Add(LoadDelay))
	case f.Conflict != "":
		// Never sent, whatever its destination's state: it dies at its
		// turn (its lane's order kept), with why in its last error.
		head := a.Head
		head.LastError = f.Conflict
		return Verdict{Kind: Dead, Head: head, Reason: rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT}
	case (!f.DestinationKnown || f.SubscriptionMissing) && f.ConfigBehind:
		// Created after this agent's config: not deleted, just not here
		// yet. Not sent, not charged; try again once the config arrives.
		return wait(a.Head, f.Now.Add(EndpointDelay))
	case !f.DestinationKnown || f.DestinationRecreated:
		// Deleted, in a config at least as new as the one the event was
		// accepted under: with --force while this attempt was out, or
		// before the event reached the cell (an edge's, accepted while
		// it was cut off), maybe made again since under the same id (the
		// event was not for the new one). As for a deleted subscription:
		// never held for ever, never sent to a destination made later,
		// a dead letter (reason deleted) an operator may replay. The
		// destination's other events are judged each at its turn: one
		// accepted under a newer config may be for a destination made
		// again that this agent has not heard of yet.
		head := a.Head
		if f.DestinationKnown {
			// Its destination is live: say why this event is not for it.
			head.LastError = "its destination was deleted and made again under the same id after this event was accepted: it was for the one deleted"
		}
		return Verdict{Kind: Dead, Head: head, Reason: rivorav1.DeadReason_DEAD_REASON_DELETED}
	case f.SubscriptionMissing:
		// As for a deleted destination: never dropped silently, never
		// held forever. Its subscription was deleted with --force (which
		// archived what was pending then) while this attempt was out, or
		// an event reached it after: it becomes a dead letter (reason
		// deleted, replayable), and the subscription's other pending
		// events follow it.
		return Verdict{Kind: Dead, Head: a.Head, Reason: rivorav1.DeadReason_DEAD_REASON_DELETED, ArchiveSubscriptionRest: true}
	case f.SubscriptionDeleting && f.Result == nil:
		// Queued behind an attempt that was in flight when a forced
		// delete archived the rest (counted archived_later): not sent,
		// not charged; at its next turn the config has it deleted, and
		// it follows the others to the archive.
		return wait(a.Head, f.Now.Add(EndpointDelay))
	case a.Unconfigured:
		// Handed out as a deleted destination's (no token), but the
		// config has it: it was made (again) as the attempt went out.
		// Never sent without its budget; the scheduler has it configured
		// by the time it is due again.
		return wait(a.Head, f.Now.Add(EndpointDelay))
	case f.Paused || f.SubscriptionPaused:
		// Picked just before the pause arrived: not sent. The lane waits,
		// unchanged, with the rest of the destination (or subscription).
		return Verdict{Kind: Release}
	case a.Expired:
		return expired(f)
	case f.EndpointErr != nil:
		return wait(a.Head, f.Now.Add(EndpointDelay))
	case !f.Owned:
		// Fenced: the lease lapsed (the partition is stopping). Another
		// agent delivers it now; this one sends nothing.
		return wait(a.Head, f.Now.Add(EndpointDelay))
	case f.Result == nil && f.Policy.MaxAttempts > 0 && a.Head.Attempts >= f.Policy.MaxAttempts:
		// Its attempts ran out before this one: max_attempts was lowered
		// (limits set --max-attempts) to what it had used or less. It
		// dies at its turn without another request, as it would have
		// after its last charged failure under the new limit.
		return Verdict{Kind: Dead, Head: a.Head, Reason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS}
	case f.Result == nil:
		return Verdict{Kind: Send}
	}
	return afterSend(f, *f.Result)
}

// expired: the head was held by its parked destination until its window
// closed; it dies (reason window) without an attempt, unless a pause moved
// the window on.
func expired(f Facts) Verdict {
	a := f.Attempt
	end := f.Policy.WindowEnd(f.WindowStart)
	if end.IsZero() || f.Now.Before(end) {
		head := a.Head
		head.WindowEnd = end
		return Verdict{Kind: Wait, Head: head}
	}
	return Verdict{Kind: Dead, Head: a.Head, Reason: rivorav1.DeadReason_DEAD_REASON_WINDOW}
}

func afterSend(f Facts, res delivery.Result) Verdict {
	a := f.Attempt
	if res.OK() {
		return Verdict{Kind: Delivered, Sent: true}
	}
	cause := res.Err.Error()
	if res.Gone() && !(f.Shared && f.GoneOnlyItsCustomers) {
		// 410: the partner wants no more webhooks. The destination stops
		// here (paused until an operator resumes it); the event keeps its
		// attempts, its schedule and its place at its lane's head, and is
		// not dead-lettered. Its last answer is the 410 (lanes list and
		// events get show it). On a destination shared by customers, a
		// 410 that is its customer's alone (the partner takes the
		// others') does not stop it for them: it is charged to the event
		// below, as another 4xx is.
		head := a.Head
		head.LastStatus, head.LastError, head.LastAttemptAt = res.Status, cause, f.Now
		return Verdict{Kind: Wait, Head: head, Sent: true, Disable: true}
	}
	if res.DestinationFault() && !f.OtherwiseHealthy {
		return hold(f, res, cause)
	}
	// Charged to the event (its own failure, or the destination's while it
	// is otherwise healthy): it retries on its own back-off, not held for
	// a destination that answers the other lanes.
	head := failedHead(a, res.Status, cause, false, f.Now)
	wait := max(f.jitter(f.Policy.Backoff(head.Attempts)), res.RetryAfter)
	decision := f.Policy.Next(head.Attempts, f.WindowStart, f.Now, wait)
	switch decision.Verdict {
	case retry.ExhaustedAttempts:
		return Verdict{Kind: Dead, Head: head, Reason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS, Sent: true}
	case retry.ExhaustedWindow:
		return Verdict{Kind: Dead, Head: head, Reason: rivorav1.DeadReason_DEAD_REASON_WINDOW, Sent: true}
	}
	head.NotBefore = decision.NotBefore
	return Verdict{Kind: Retry, Head: head, Sent: true, Ledger: true}
}

// hold: a failure that is the destination's while it is not otherwise
// healthy. No attempt is charged; the event waits for the destination (a
// parked destination's lanes are held until it recovers) and dies with
// reason window once its window closes, never earlier.
func hold(f Facts, res delivery.Result, cause string) Verdict {
	a := f.Attempt
	head := failedHead(a, res.Status, cause, true, f.Now)
	head.Attempts = a.Head.Attempts // not charged
	head.WindowEnd = f.Policy.WindowEnd(f.WindowStart)
	wait := max(f.jitter(f.Policy.Backoff(max(head.Attempts, 1))), res.RetryAfter)
	decision := f.Policy.Hold(f.WindowStart, f.Now, wait)
	if decision.Verdict == retry.ExhaustedWindow {
		return Verdict{Kind: Dead, Head: head, Reason: rivorav1.DeadReason_DEAD_REASON_WINDOW, Sent: true}
	}
	head.NotBefore = decision.NotBefore
	// Already held: only its last status and retry time change, and a
	// rebuild tries a held head soon either way. No ledger record per
	// probe.
	alreadyHeld := a.Head.HeldByDestination && !a.Head.FirstAttemptAt.IsZero()
	return Verdict{Kind: Hold, Head: head, Sent: true, Ledger: !alreadyHeld}
}

// failedHead is the lane head's state after a failed attempt; held: it
// waits for its destination (hold), not for its own retry time.
func failedHead(a *scheduler.Attempt, status int, cause string, held bool, now time.Time) scheduler.Head {
	head := a.Head
	head.Attempts = a.Number
	head.LastStatus = status
	head.LastError = cause
	head.LastAttemptAt = now
	head.HeldByDestination = held
	if head.FirstAttemptAt.IsZero() {
		head.FirstAttemptAt = a.StartedAt
	}
	return head
}

func wait(head scheduler.Head, at time.Time) Verdict {
	head.NotBefore = at
	return Verdict{Kind: Wait, Head: head}
}

func (f Facts) jitter(d time.Duration) time.Duration {
	if f.Jitter == nil {
		return d
	}
	return f.Jitter(d)
}
