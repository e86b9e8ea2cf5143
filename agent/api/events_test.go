package api

import (
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// What `rivoractl events get` says about a pending event.
func TestWaitingReason(t *testing.T) {
	parkedAt := time.Date(2026, 12, 1, 9, 12, 3, 0, time.UTC)
	failed := scheduler.Head{Attempts: 2, LastStatus: 503, LastAttemptAt: parkedAt, NotBefore: parkedAt.Add(time.Second), HeldByDestination: true}
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	for _, c := range []struct {
		name string
		loc  scheduler.Location
		want string
	}{
		{"parked", scheduler.Location{Head: failed, Held: true, Destination: scheduler.DestinationState{Health: budget.Parked, Since: parkedAt}},
			"held: destination parked since 2026-12-01T09:12:03Z; 2 of 8 attempts used"},
		// Not held: a degraded destination's head is tried at its retry
		// time, then waits for its turn.
		{"degraded", scheduler.Location{Head: failed, Due: true, Destination: scheduler.DestinationState{Health: budget.Degraded, Since: parkedAt}},
			"due since 2026-12-01T09:12:04Z (retry after HTTP 503): waiting for its destination's budget and its customer's turn (destination degraded since 2026-12-01T09:12:03Z); 2 of 8 attempts used"},
		{"paused", scheduler.Location{Head: failed, Destination: scheduler.DestinationState{Paused: true}},
			"held: destination paused; 2 of 8 attempts used"},
		{"behind", scheduler.Location{Ahead: 3}, "behind 3 earlier events in its lane"},
		{"in flight", scheduler.Location{InFlight: true}, ""},
		{"never tried", scheduler.Location{}, "due: waiting for its destination's budget"},
		{"never tried, partner's Retry-After", scheduler.Location{Destination: scheduler.DestinationState{HoldUntil: later}},
			"held: its partner asked for no requests until " + later.Format(time.RFC3339) + " (Retry-After; a resume ends it); 0 of 8 attempts used"},
		{"held and degraded, partner's Retry-After", scheduler.Location{Head: failed, Destination: scheduler.DestinationState{Health: budget.Degraded, Since: parkedAt, HoldUntil: later}},
			"held: its partner asked for no requests until " + later.Format(time.RFC3339) + " (Retry-After; a resume ends it); 2 of 8 attempts used"},
		{"event's fault", scheduler.Location{Head: scheduler.Head{Attempts: 1, LastStatus: 400, LastAttemptAt: parkedAt, NotBefore: later}},
			"retry at " + later.Format(time.RFC3339) + " after HTTP 400; 1 of 8 attempts used"},
	} {
		if got := waitingReason(c.loc, 8, "destination paused", ""); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// A pause that is Rivora's after a 410 Gone says so, also before the
	// config does (the agent holds the destination at once).
	held := scheduler.Location{Head: failed, Destination: scheduler.DestinationState{Paused: true}}
	disabled := "destination disabled: its partner answered 410 Gone (rivoractl destinations resume orders sends again)"
	if got, want := waitingReason(held, 8, disabled, ""), "held: "+disabled+"; 2 of 8 attempts used"; got != want {
		t.Errorf("disabled: %q, want %q", got, want)
	}
	if got, want := waitingReason(held, 8, "", ""), "held: its partner answered 410 Gone; the destination is being disabled; 2 of 8 attempts used"; got != want {
		t.Errorf("held after a 410, not yet disabled: %q, want %q", got, want)
	}
	// A subscription's pause says whose; one held as its secret did not
	// load here says why, not "paused".
	subPaused := scheduler.Location{Head: failed, SubscriptionPaused: true, Lane: lanes.ID{Subscription: "sub_1"}}
	if got, want := waitingReason(subPaused, 8, "", ""), "held: subscription sub_1 paused; 2 of 8 attempts used"; got != want {
		t.Errorf("subscription paused: %q, want %q", got, want)
	}
	unusable := subscriptionUnusableText(errors.New(`subscription "sub_1": secret must start with "whsec_"`))
	if got, want := waitingReason(subPaused, 8, "", unusable), "held: subscription config unusable on this agent: subscription \"sub_1\": secret must start with \"whsec_\" (its events are kept, not attempted, until a config of it loads); 2 of 8 attempts used"; got != want {
		t.Errorf("subscription unusable: %q, want %q", got, want)
	}
}

// The death of a copy of another payload under an event's id (an edge's
// copy whose key the cell had used) is not the event's end: its own
// outcomes stand, and the copy is only flagged. With nothing else of the
// event known, the copy's death is what there is.
func TestWithoutConflictingCopy(t *testing.T) {
	delivered := &rivorav1.EventOutcome{Kind: rivorav1.EventOutcome_KIND_DELIVERED, LaneKey: "u1"}
	copyDead := &rivorav1.EventOutcome{Kind: rivorav1.EventOutcome_KIND_DEAD, DeadReason: rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT, LaneKey: "u2"}
	windowDead := &rivorav1.EventOutcome{Kind: rivorav1.EventOutcome_KIND_DEAD, DeadReason: rivorav1.DeadReason_DEAD_REASON_WINDOW}
	cases := []struct {
		name     string
		in       []*rivorav1.EventOutcome
		pending  bool
		want     []*rivorav1.EventOutcome
		wantDead bool
	}{
		{"delivered, then the copy died", []*rivorav1.EventOutcome{delivered, copyDead}, false, []*rivorav1.EventOutcome{delivered}, true},
		{"the copy died, then delivered", []*rivorav1.EventOutcome{copyDead, delivered}, false, []*rivorav1.EventOutcome{delivered}, true},
		{"pending, the copy died", []*rivorav1.EventOutcome{copyDead}, true, nil, true},
		{"only the copy known", []*rivorav1.EventOutcome{copyDead}, false, []*rivorav1.EventOutcome{copyDead}, true},
		{"dead of its own", []*rivorav1.EventOutcome{windowDead}, false, []*rivorav1.EventOutcome{windowDead}, false},
	}
	for _, tc := range cases {
		got, dead := withoutConflictingCopy(tc.in, tc.pending)
		if !slices.Equal(got, tc.want) || dead != tc.wantDead {
			t.Errorf("%s: kept %v, copy dead %t; want %v, %t", tc.name, got, dead, tc.want, tc.wantDead)
		}
	}
}

// An event replayed after it died, then resent and pending again, has
// three acceptances: each with its own tries and how it ended.
func TestEpisodesSplitAnEventsAcceptances(t *testing.T) {
	first, replay, resend := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC), time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC), time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)
	try := func(accepted time.Time, at time.Duration, status int32) *rivorav1.EventOutcome {
		return &rivorav1.EventOutcome{Kind: rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, AcceptedAt: timestamppb.New(accepted),
			Attempt: &rivorav1.Attempt{At: timestamppb.New(accepted.Add(at)), StatusCode: status}}
	}
	delivered := try(replay, time.Second, 200)
	delivered.Kind = rivorav1.EventOutcome_KIND_DELIVERED
	outcomes := []*rivorav1.EventOutcome{
		try(first, time.Second, 500), try(first, 2*time.Second, 500),
		{Kind: rivorav1.EventOutcome_KIND_DEAD, AcceptedAt: timestamppb.New(first), DeadReason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS},
		delivered,
		{Kind: rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, Attempt: &rivorav1.Attempt{At: timestamppb.New(first)}}, // no acceptance known
	}
	resp := &rivorav1.GetEventResponse{State: rivorav1.EventState_EVENT_STATE_PENDING, AcceptedAt: timestamppb.New(resend)}
	for _, o := range outcomes {
		if o.GetAttempt() != nil {
			resp.Attempts = append(resp.Attempts, o.GetAttempt())
		}
	}
	numberTries(resp.Attempts)
	got := episodes(outcomes, resp)
	want := []*rivorav1.Episode{
		{AcceptedAt: timestamppb.New(first), State: rivorav1.EventState_EVENT_STATE_DEAD, DeadReason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS, FirstTry: 2, LastTry: 3},
		{AcceptedAt: timestamppb.New(replay), State: rivorav1.EventState_EVENT_STATE_DELIVERED, FirstTry: 4, LastTry: 4},
		{AcceptedAt: timestamppb.New(resend), State: rivorav1.EventState_EVENT_STATE_PENDING},
	}
	if len(got) != len(want) {
		t.Fatalf("episodes: %v; want %v", got, want)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("episode %d: %v; want %v", i+1, got[i], want[i])
		}
	}
	if once := episodes(outcomes[:3], &rivorav1.GetEventResponse{State: rivorav1.EventState_EVENT_STATE_DEAD, AcceptedAt: timestamppb.New(first)}); once != nil {
		t.Errorf("an event accepted once has episodes %v; want none", once)
	}

	// Answered by an agent that does not hold it: replayed (one failed
	// try recorded), not ended, not pending here. Its state is not how the
	// first acceptance ended.
	elsewhere := []*rivorav1.EventOutcome{outcomes[0], outcomes[2], try(replay, time.Second, 503)}
	resp = &rivorav1.GetEventResponse{State: rivorav1.EventState_EVENT_STATE_DEAD, DeadReason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS}
	withEpisodes(resp, elsewhere)
	if len(resp.GetEpisodes()) != 2 || resp.GetEpisodes()[1].GetState() != rivorav1.EventState_EVENT_STATE_UNSPECIFIED ||
		resp.GetState() != rivorav1.EventState_EVENT_STATE_UNSPECIFIED || resp.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED {
		t.Errorf("replayed, not ended, not pending here: state %v (%v), episodes %v; want unspecified, the latest not ended", resp.GetState(), resp.GetDeadReason(), resp.GetEpisodes())
	}
}

// A head whose last failure was its destination's is held only while the
// scheduler holds it (parked); otherwise it says when it is tried next,
// and once that time has passed, that it is due and waits for its turn,
// with no next attempt in the past (an operator saw "held by destination"
// on a healthy destination, and a NEXT ATTEMPT 80 s ago).
func TestWaitingOfAHeadTheDestinationFailed(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	past, soon := now.Add(-80*time.Second), now.Add(30*time.Second)
	throttled := scheduler.Head{Attempts: 1, LastStatus: 429, LastAttemptAt: past.Add(-time.Second), NotBefore: past, HeldByDestination: true}
	healthy := scheduler.DestinationState{Health: budget.Healthy}
	degraded := scheduler.DestinationState{Health: budget.Degraded, Since: past}
	later := throttled
	later.NotBefore = soon
	for _, c := range []struct {
		name     string
		loc      scheduler.Location
		want     string
		wantNext time.Time
	}{
		{"healthy, due", scheduler.Location{Head: throttled, Due: true, Destination: healthy},
			"due since " + past.Format(time.RFC3339) + " (retry after HTTP 429): waiting for its destination's budget and its customer's turn; 1 of 2 attempts used", time.Time{}},
		{"degraded, due", scheduler.Location{Head: throttled, Due: true, Destination: degraded},
			"due since " + past.Format(time.RFC3339) + " (retry after HTTP 429): waiting for its destination's budget and its customer's turn (destination degraded since " + past.Format(time.RFC3339) + "); 1 of 2 attempts used", time.Time{}},
		{"degraded, waiting", scheduler.Location{Head: later, Destination: degraded},
			"retry at " + soon.Format(time.RFC3339) + " after HTTP 429 (destination degraded since " + past.Format(time.RFC3339) + "); 1 of 2 attempts used", soon},
		{"parked, held", scheduler.Location{Head: later, Held: true, Destination: scheduler.DestinationState{Health: budget.Parked, Since: past}},
			"held: destination parked since " + past.Format(time.RFC3339) + "; 1 of 2 attempts used", time.Time{}},
	} {
		if got := waitingReason(c.loc, 2, "", ""); got != c.want {
			t.Errorf("%s: waiting %q, want %q", c.name, got, c.want)
		}
		if got := nextAttemptAt(c.loc, now); !got.Equal(c.wantNext) {
			t.Errorf("%s: next attempt %v, want %v", c.name, got, c.wantNext)
		}
	}
}

// A head that used as many attempts as max_attempts allows, or more (the
// limit was lowered since), says it dies at its next turn without another
// request: an operator read "ATTEMPTS USED 5 of 2" and nothing more.
func TestWaitingPastALoweredMaxAttempts(t *testing.T) {
	soon := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
	head := scheduler.Head{Attempts: 5, LastStatus: 400, LastAttemptAt: time.Now(), NotBefore: soon}
	want := "becomes a dead letter (reason max_attempts) at " + soon.Format(time.RFC3339) + ", its turn, without another request: it used 5 attempts, and max attempts was lowered to 2 since"
	if got := waitingReason(scheduler.Location{Head: head}, 2, "", ""); got != want {
		t.Errorf("waiting %q, want %q", got, want)
	}
	want = "becomes a dead letter (reason max_attempts) at its turn without another request: it used 2 attempts, and max attempts was lowered to 2 since"
	head.Attempts = 2
	if got := waitingReason(scheduler.Location{Head: head, Due: true}, 2, "", ""); got != want {
		t.Errorf("due: waiting %q, want %q", got, want)
	}
}
