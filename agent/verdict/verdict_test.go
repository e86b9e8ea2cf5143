package verdict_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/verdict"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

var (
	accepted = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	started  = accepted.Add(10 * time.Minute)
	now      = started.Add(200 * time.Millisecond)
	policy   = retry.Policy{Base: time.Second, Cap: time.Hour, MaxAttempts: 5, Window: time.Hour}
	// windowEnd of an event accepted at accepted, never paused.
	windowEnd = accepted.Add(time.Hour)
)

// attempt is the nth attempt of a lane head that failed n-1 times before
// (charged), the last at previous.
func attempt(n int) *scheduler.Attempt {
	head := scheduler.Head{Attempts: n - 1}
	if n > 1 {
		head.FirstAttemptAt = accepted.Add(time.Minute)
		head.LastAttemptAt = started.Add(-time.Minute)
		head.LastStatus = 500
		head.LastError = "HTTP 500"
		head.NotBefore = started
	}
	return &scheduler.Attempt{Number: n, Head: head, StartedAt: started}
}

// sent are the facts of an attempt sent to its partner, which answered
// res, decided at now.
func sent(a *scheduler.Attempt, res delivery.Result, otherwiseHealthy bool) verdict.Facts {
	f := ready(a)
	f.Result = &res
	f.OtherwiseHealthy = otherwiseHealthy
	return f
}

// withNotBefore is head, due again at t.
func withNotBefore(head scheduler.Head, t time.Time) scheduler.Head {
	head.NotBefore = t
	return head
}

// ready are the facts of an attempt nothing stops from being sent.
func ready(a *scheduler.Attempt) verdict.Facts {
	return verdict.Facts{
		Attempt: a, Now: now, PartitionOpen: true, DestinationKnown: true, Owned: true,
		Policy: policy, WindowStart: accepted,
	}
}

func failed(status int, err string) delivery.Result {
	return delivery.Result{Status: status, Err: errors.New(err), Duration: 200 * time.Millisecond}
}

// failedHead is the head after the nth attempt failed with status, charged
// or held.
func failedHead(n, status int, err string, held bool) scheduler.Head {
	h := attempt(n).Head
	h.Attempts = n
	h.LastStatus, h.LastError, h.LastAttemptAt = status, err, now
	h.HeldByDestination = held
	if h.FirstAttemptAt.IsZero() {
		h.FirstAttemptAt = started
	}
	return h
}

func TestDecide(t *testing.T) {
	const (
		dead    = verdict.Dead
		retryK  = verdict.Retry
		deleted = rivorav1.DeadReason_DEAD_REASON_DELETED
		window  = rivorav1.DeadReason_DEAD_REASON_WINDOW
		maxAtt  = rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS
	)
	with := func(f verdict.Facts, change func(*verdict.Facts)) verdict.Facts { change(&f); return f }
	retryAfter := failed(429, "HTTP 429")
	retryAfter.RetryAfter = 90 * time.Second
	ssrfRefused := failed(0, "refused by the SSRF guard: 10.0.0.1 is private")
	ssrfRefused.NotSent = true

	held := func(n, status int, err string, notBefore time.Time) scheduler.Head {
		h := failedHead(n, status, err, true)
		h.Attempts = n - 1
		h.WindowEnd = windowEnd
		h.NotBefore = notBefore
		return h
	}
	charged := func(n, status int, err string, notBefore time.Time) scheduler.Head {
		h := failedHead(n, status, err, false)
		h.NotBefore = notBefore
		return h
	}
	expired := attempt(3)
	expired.Expired = true
	unconfigured := attempt(1)
	unconfigured.Unconfigured = true
	alreadyHeld := attempt(3)
	alreadyHeld.Head.HeldByDestination = true
	alreadyHeldAfter := held(3, 503, "HTTP 503", now.Add(4*time.Second))
	alreadyHeldAfter.Attempts = 2

	cases := []struct {
		name string
		f    verdict.Facts
		want verdict.Verdict
	}{
		// Before sending.
		{"partition not open", with(ready(attempt(1)), func(f *verdict.Facts) { *f = verdict.Facts{Attempt: f.Attempt, Now: now} }),
			verdict.Verdict{Kind: verdict.Wait, Head: scheduler.Head{NotBefore: now.Add(verdict.OpeningDelay)}}},
		{"event cannot be loaded", with(ready(attempt(1)), func(f *verdict.Facts) { f.LoadErr, f.LoadGone = errors.New("no message found"), true }),
			verdict.Verdict{Kind: verdict.Skip}},
		{"the store did not answer a load: not sent, not charged, tried again", with(ready(attempt(3)), func(f *verdict.Facts) {
			f.LoadErr = errors.New("load event e (seq 9): context deadline exceeded")
		}), verdict.Verdict{Kind: verdict.Wait, Head: func() scheduler.Head {
			h := attempt(3).Head // unchanged: nothing charged, nothing recorded
			h.NotBefore = now.Add(verdict.LoadDelay)
			return h
		}()}},
		{"an edge's copy whose key the cell used for another event: dead, never sent, why in its last error", with(ready(attempt(1)), func(f *verdict.Facts) {
			f.Conflict = "idempotency key \"k\" was used at the cell for another event"
		}), verdict.Verdict{Kind: dead, Head: scheduler.Head{LastError: "idempotency key \"k\" was used at the cell for another event"}, Reason: rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT}},
		{"an edge's conflicting copy of a paused, deleted destination: dead as a conflict", with(ready(attempt(1)), func(f *verdict.Facts) {
			f.Conflict, f.Paused, f.DestinationKnown = "conflict", true, false
		}), verdict.Verdict{Kind: dead, Head: scheduler.Head{LastError: "conflict"}, Reason: rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT}},
		{"destination deleted", with(ready(attempt(2)), func(f *verdict.Facts) { f.DestinationKnown = false }),
			verdict.Verdict{Kind: dead, Head: attempt(2).Head, Reason: deleted}},
		{"destination deleted, handed out unconfigured: dead", with(ready(unconfigured), func(f *verdict.Facts) { f.DestinationKnown = false }),
			verdict.Verdict{Kind: dead, Head: unconfigured.Head, Reason: deleted}},
		{"destination deleted, held until its window closed: dead as deleted", with(ready(expired), func(f *verdict.Facts) { f.Now, f.DestinationKnown = windowEnd, false }),
			verdict.Verdict{Kind: dead, Head: expired.Head, Reason: deleted}},
		{"destination deleted and made again after the event's config: dead, never sent to the new one, saying why", with(ready(attempt(1)), func(f *verdict.Facts) { f.DestinationRecreated = true }),
			verdict.Verdict{Kind: dead, Head: withError(attempt(1).Head, "its destination was deleted and made again under the same id after this event was accepted: it was for the one deleted"), Reason: deleted}},
		{"destination unknown to an agent behind the event's config, handed out unconfigured: waits", with(ready(unconfigured), func(f *verdict.Facts) {
			f.DestinationKnown, f.ConfigBehind = false, true
		}), verdict.Verdict{Kind: verdict.Wait, Head: scheduler.Head{NotBefore: now.Add(verdict.EndpointDelay)}}},
		{"handed out unconfigured, but the config has it now: waits, never sent without a token", ready(unconfigured),
			verdict.Verdict{Kind: verdict.Wait, Head: scheduler.Head{NotBefore: now.Add(verdict.EndpointDelay)}}},
		{"paused", with(ready(attempt(2)), func(f *verdict.Facts) { f.Paused = true }),
			verdict.Verdict{Kind: verdict.Release}},
		{"subscription deleted", with(ready(attempt(2)), func(f *verdict.Facts) { f.SubscriptionMissing = true }),
			verdict.Verdict{Kind: dead, Head: attempt(2).Head, Reason: deleted, ArchiveSubscriptionRest: true}},
		{"destination and subscription deleted: dead, the rest judged each at its turn", with(ready(attempt(2)), func(f *verdict.Facts) {
			f.DestinationKnown, f.SubscriptionMissing = false, true
		}), verdict.Verdict{Kind: dead, Head: attempt(2).Head, Reason: deleted}},
		{"subscription paused", with(ready(attempt(2)), func(f *verdict.Facts) { f.SubscriptionPaused = true }),
			verdict.Verdict{Kind: verdict.Release}},
		{"subscription archived by a forced delete whose config is on its way: waits for it, not sent", with(ready(attempt(2)), func(f *verdict.Facts) { f.SubscriptionDeleting = true }),
			verdict.Verdict{Kind: verdict.Wait, Head: withNotBefore(attempt(2).Head, now.Add(verdict.EndpointDelay))}},
		{"an attempt sent before the forced delete ends as it does", with(sent(attempt(1), delivery.Result{Status: 200}, true), func(f *verdict.Facts) { f.SubscriptionDeleting = true }),
			verdict.Verdict{Kind: verdict.Delivered, Sent: true}},
		{"subscription paused, even once its window closed: the pause moves it on", with(ready(expired), func(f *verdict.Facts) {
			f.Now, f.SubscriptionPaused = windowEnd, true
		}), verdict.Verdict{Kind: verdict.Release}},
		{"subscription deleted while paused", with(ready(attempt(1)), func(f *verdict.Facts) {
			f.SubscriptionMissing, f.SubscriptionPaused = true, true
		}), verdict.Verdict{Kind: dead, Head: attempt(1).Head, Reason: deleted, ArchiveSubscriptionRest: true}},
		{"subscription unknown to an agent behind the event's config: not deleted, not yet here", with(ready(attempt(1)), func(f *verdict.Facts) {
			f.SubscriptionMissing, f.ConfigBehind = true, true
		}), verdict.Verdict{Kind: verdict.Wait, Head: scheduler.Head{NotBefore: now.Add(verdict.EndpointDelay)}}},
		{"destination unknown to an agent behind the event's config", with(ready(attempt(1)), func(f *verdict.Facts) {
			f.DestinationKnown, f.ConfigBehind = false, true
		}), verdict.Verdict{Kind: verdict.Wait, Head: scheduler.Head{NotBefore: now.Add(verdict.EndpointDelay)}}},
		{"behind the event's config, but destination and subscription known: sent", with(ready(attempt(1)), func(f *verdict.Facts) {
			f.ConfigBehind = true
		}), verdict.Verdict{Kind: verdict.Send}},
		{"held until its window closed", with(ready(expired), func(f *verdict.Facts) { f.Now = windowEnd }),
			verdict.Verdict{Kind: dead, Head: expired.Head, Reason: window}},
		{"held, and a pause moved its window on", with(ready(expired), func(f *verdict.Facts) {
			f.Now = windowEnd
			f.WindowStart = accepted.Add(time.Minute)
		}), verdict.Verdict{Kind: verdict.Wait, Head: func() scheduler.Head { h := expired.Head; h.WindowEnd = windowEnd.Add(time.Minute); return h }()}},
		{"endpoint not ready", with(ready(attempt(1)), func(f *verdict.Facts) { f.EndpointErr = errors.New("no secret yet") }),
			verdict.Verdict{Kind: verdict.Wait, Head: scheduler.Head{NotBefore: now.Add(verdict.EndpointDelay)}}},
		{"partition fenced", with(ready(attempt(1)), func(f *verdict.Facts) { f.Owned = false }),
			verdict.Verdict{Kind: verdict.Wait, Head: scheduler.Head{NotBefore: now.Add(verdict.EndpointDelay)}}},
		{"nothing stops it", ready(attempt(1)), verdict.Verdict{Kind: verdict.Send}},

		// After sending.
		{"2xx", sent(attempt(1), delivery.Result{Status: 200}, true), verdict.Verdict{Kind: verdict.Delivered, Sent: true}},
		// Its attempts and schedule kept; its last answer the 410.
		{"410 gone", sent(attempt(2), failed(410, "HTTP 410"), true),
			verdict.Verdict{Kind: verdict.Wait, Head: func() scheduler.Head {
				h := attempt(2).Head
				h.LastStatus, h.LastError, h.LastAttemptAt = 410, "HTTP 410", now
				return h
			}(), Sent: true, Disable: true}},
		{"410 on a shared destination, not its customer's alone: disabled", with(sent(attempt(2), failed(410, "HTTP 410"), true), func(f *verdict.Facts) {
			f.Shared = true
		}), verdict.Verdict{Kind: verdict.Wait, Head: gone410(2), Sent: true, Disable: true}},
		{"410 on a customer's own destination, even judged its customer's: disabled", with(sent(attempt(2), failed(410, "HTTP 410"), true), func(f *verdict.Facts) {
			f.GoneOnlyItsCustomers = true
		}), verdict.Verdict{Kind: verdict.Wait, Head: gone410(2), Sent: true, Disable: true}},
		// The partner takes the other customers' events: the 410 is this
		// customer's failure, charged as another 4xx, never a disable.
		{"410 on a shared destination, its customer's alone: charged, retried", with(sent(attempt(2), failed(410, "HTTP 410"), false), func(f *verdict.Facts) {
			f.Shared, f.GoneOnlyItsCustomers = true, true
		}), verdict.Verdict{Kind: retryK, Head: charged(2, 410, "HTTP 410", now.Add(2*time.Second)), Sent: true, Ledger: true}},
		{"410 on a shared destination, its customer's alone, at max attempts: dead", with(sent(attempt(5), failed(410, "HTTP 410"), false), func(f *verdict.Facts) {
			f.Shared, f.GoneOnlyItsCustomers = true, true
		}), verdict.Verdict{Kind: dead, Head: charged(5, 410, "HTTP 410", attempt(5).Head.NotBefore), Reason: maxAtt, Sent: true}},
		{"400: the event's own failure", sent(attempt(2), failed(400, "HTTP 400"), true),
			verdict.Verdict{Kind: retryK, Head: charged(2, 400, "HTTP 400", now.Add(2*time.Second)), Sent: true, Ledger: true}},
		{"429 while otherwise healthy", sent(attempt(1), failed(429, "HTTP 429"), true),
			verdict.Verdict{Kind: retryK, Head: charged(1, 429, "HTTP 429", now.Add(time.Second)), Sent: true, Ledger: true}},
		{"429 with Retry-After while otherwise healthy", sent(attempt(1), retryAfter, true),
			verdict.Verdict{Kind: retryK, Head: charged(1, 429, "HTTP 429", now.Add(90*time.Second)), Sent: true, Ledger: true}},
		{"429 while the destination throttles", sent(attempt(1), failed(429, "HTTP 429"), false),
			verdict.Verdict{Kind: verdict.Hold, Head: held(1, 429, "HTTP 429", now.Add(time.Second)), Sent: true, Ledger: true}},
		{"429 with Retry-After while the destination throttles", sent(attempt(1), retryAfter, false),
			verdict.Verdict{Kind: verdict.Hold, Head: held(1, 429, "HTTP 429", now.Add(90*time.Second)), Sent: true, Ledger: true}},
		{"5xx while otherwise healthy", sent(attempt(3), failed(503, "HTTP 503"), true),
			verdict.Verdict{Kind: retryK, Head: charged(3, 503, "HTTP 503", now.Add(4*time.Second)), Sent: true, Ledger: true}},
		{"5xx while the destination is down", sent(attempt(3), failed(503, "HTTP 503"), false),
			verdict.Verdict{Kind: verdict.Hold, Head: held(3, 503, "HTTP 503", now.Add(2*time.Second)), Sent: true, Ledger: true}},
		{"5xx again while held: no ledger record per probe", sent(alreadyHeld, failed(503, "HTTP 503"), false),
			verdict.Verdict{Kind: verdict.Hold, Head: func() scheduler.Head { h := alreadyHeldAfter; h.NotBefore = now.Add(2 * time.Second); return h }(), Sent: true}},
		{"timeout while the destination is down", sent(attempt(1), failed(0, "timeout after 30s"), false),
			verdict.Verdict{Kind: verdict.Hold, Head: held(1, 0, "timeout after 30s", now.Add(time.Second)), Sent: true, Ledger: true}},
		{"connection refused while otherwise healthy", sent(attempt(1), failed(0, "connection refused"), true),
			verdict.Verdict{Kind: retryK, Head: charged(1, 0, "connection refused", now.Add(time.Second)), Sent: true, Ledger: true}},
		{"SSRF refusal is the event's even while the destination is down", sent(attempt(1), ssrfRefused, false),
			verdict.Verdict{Kind: retryK, Head: charged(1, 0, ssrfRefused.Err.Error(), now.Add(time.Second)), Sent: true, Ledger: true}},
		{"max attempts", sent(attempt(5), failed(400, "HTTP 400"), true),
			verdict.Verdict{Kind: dead, Head: charged(5, 400, "HTTP 400", attempt(5).Head.NotBefore), Reason: maxAtt, Sent: true}},
		{"the next retry would fall past the window", with(sent(attempt(2), failed(400, "HTTP 400"), true), func(f *verdict.Facts) {
			f.Now = windowEnd.Add(-time.Second)
		}), verdict.Verdict{Kind: dead, Head: func() scheduler.Head {
			h := charged(2, 400, "HTTP 400", attempt(2).Head.NotBefore)
			h.LastAttemptAt = windowEnd.Add(-time.Second)
			return h
		}(), Reason: window, Sent: true}},
		{"held while its window closed", with(sent(attempt(2), failed(503, "HTTP 503"), false), func(f *verdict.Facts) {
			f.Now = windowEnd
		}), verdict.Verdict{Kind: dead, Head: func() scheduler.Head {
			h := held(2, 503, "HTTP 503", attempt(2).Head.NotBefore)
			h.LastAttemptAt = windowEnd
			return h
		}(), Reason: window, Sent: true}},
		{"held: its retry never passes the window end", with(sent(attempt(2), retryAfter, false), func(f *verdict.Facts) {
			f.Now = windowEnd.Add(-time.Minute)
		}), verdict.Verdict{Kind: verdict.Hold, Head: func() scheduler.Head {
			h := held(2, 429, "HTTP 429", windowEnd)
			h.LastAttemptAt = windowEnd.Add(-time.Minute)
			return h
		}(), Sent: true, Ledger: true}},
	}
	for _, tc := range cases {
		got := verdict.Decide(tc.f)
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// Jitter is applied to the nominal back-off, never to a Retry-After.
func TestDecideJitter(t *testing.T) {
	f := sent(attempt(3), failed(503, "HTTP 503"), true)
	f.Jitter = func(d time.Duration) time.Duration { return d / 2 }
	if got := verdict.Decide(f).Head.NotBefore; !got.Equal(now.Add(2 * time.Second)) {
		t.Errorf("jittered retry at %v, want now+2s", got.Sub(now))
	}
	res := failed(429, "HTTP 429")
	res.RetryAfter = time.Minute
	f = sent(attempt(3), res, true)
	f.Jitter = func(d time.Duration) time.Duration { return d / 2 }
	if got := verdict.Decide(f).Head.NotBefore; !got.Equal(now.Add(time.Minute)) {
		t.Errorf("retry with Retry-After at %v, want now+1m", got.Sub(now))
	}
}

// Whether a sent attempt used one of the event's attempts, and why not,
// as the history records it.
func TestNotCharged(t *testing.T) {
	late := ready(attempt(2))
	late.Now = windowEnd.Add(time.Second)
	late.Result = ptr(failed(503, "HTTP 503"))
	gone := failed(410, "HTTP 410")
	with := func(f verdict.Facts, change func(*verdict.Facts)) verdict.Facts { change(&f); return f }
	cases := []struct {
		name string
		f    verdict.Facts
		want string
	}{
		{"delivered", sent(attempt(1), delivery.Result{Status: 200}, false), ""},
		{"5xx on a destination failing every lane", sent(attempt(1), failed(503, "HTTP 503"), false), "destination down"},
		{"timeout on a destination failing every lane", sent(attempt(1), failed(0, "timeout after 30s"), false), "destination down"},
		{"429 on a destination failing every lane", sent(attempt(1), failed(429, "HTTP 429"), false), "destination throttling (429)"},
		{"5xx while other lanes get 2xx", sent(attempt(1), failed(503, "HTTP 503"), true), ""},
		{"400: the event's own failure", sent(attempt(1), failed(400, "HTTP 400"), false), ""},
		{"410 Gone", sent(attempt(1), gone, false), "destination gone (410)"},
		{"410 Gone, its customer's alone on a shared destination", with(sent(attempt(1), gone, false), func(f *verdict.Facts) {
			f.Shared, f.GoneOnlyItsCustomers = true, true
		}), ""},
		{"held until its window closed", late, "destination down"},
		{"not sent: partition not open", verdict.Facts{Attempt: attempt(1), Now: now}, ""},
	}
	for _, c := range cases {
		v := verdict.Decide(c.f)
		res := delivery.Result{}
		if c.f.Result != nil {
			res = *c.f.Result
		}
		if got := v.NotCharged(res); got != c.want {
			t.Errorf("%s: verdict %s NotCharged = %q, want %q", c.name, v.Kind, got, c.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// gone410 is the head after the nth attempt was answered 410 by a
// destination it disables: its attempts and schedule kept, its last
// answer the 410.
func gone410(n int) scheduler.Head {
	h := attempt(n).Head
	h.LastStatus, h.LastError, h.LastAttemptAt = 410, "HTTP 410", now
	return h
}

// withError is h with its last error.
func withError(h scheduler.Head, err string) scheduler.Head {
	h.LastError = err
	return h
}

// max_attempts lowered (limits set --max-attempts 2) below what a pending
// head had used: it dies at its turn (reason max_attempts) without another
// request. An operator saw one more request sent at the old retry time
// before the event died. A head still under the limit is sent.
func TestDecideMaxAttemptsLoweredBelowWhatTheHeadUsed(t *testing.T) {
	lowered := policy
	lowered.MaxAttempts = 2
	for _, c := range []struct {
		name string
		a    *scheduler.Attempt
		want verdict.Verdict
	}{
		{"used 5, now at most 2: dead, not sent", attempt(6),
			verdict.Verdict{Kind: verdict.Dead, Head: attempt(6).Head, Reason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS}},
		{"used 2, now at most 2: dead, not sent", attempt(3),
			verdict.Verdict{Kind: verdict.Dead, Head: attempt(3).Head, Reason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS}},
		{"used 1, now at most 2: sent", attempt(2), verdict.Verdict{Kind: verdict.Send}},
	} {
		f := ready(c.a)
		f.Policy = lowered
		got := verdict.Decide(f)
		if got.Kind != c.want.Kind || got.Reason != c.want.Reason || got.Sent || got.Head != c.want.Head {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
