package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/agent/upstream"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// eventService implements rivora.v1.EventService: it answers "where is
// my event?" from the scheduler (pending) and the event's history
// (attempts, delivered, dead), lists a destination's events, and resends
// a delivered or dead one.
type eventService struct {
	*server
}

// GetEvent finds the event as its id is typed, else, for a UUID typed in
// upper case, as Rivora writes its ids: in lower case (lanes.LowerEventID).
func (s *eventService) GetEvent(ctx context.Context, req *connect.Request[rivorav1.GetEventRequest]) (*connect.Response[rivorav1.GetEventResponse], error) {
	id := req.Msg.GetEventId()
	if err := lanes.ValidateEventID("event_id", id); err != nil {
		return nil, errkind.Tag(errkind.Invalid, err)
	}
	resp, err := s.event(ctx, id)
	if lower, ok := lanes.LowerEventID(id); ok && errkind.CodeOf(err) == connect.CodeNotFound {
		// Not found either: the answer names the id as typed.
		if lowered, lowerErr := s.event(ctx, lower); errkind.CodeOf(lowerErr) != connect.CodeNotFound {
			return lowered, lowerErr
		}
	}
	return resp, err
}

// event answers GetEvent for id exactly as given.
func (s *eventService) event(ctx context.Context, id string) (*connect.Response[rivorav1.GetEventResponse], error) {
	// The lane first, then the history: an event that ends between the
	// two was recorded before its lane let it go.
	loc, pending := s.sched.Find(id)
	outcomes, err := s.history.Lookup(ctx, id)
	if err != nil {
		return nil, errkind.Tag(errkind.Unavailable, err)
	}
	if !pending && len(outcomes) == 0 {
		// The same answer as for another customer's event (auth.Policies).
		return nil, auth.EventNotFound(id)
	}
	resp := &rivorav1.GetEventResponse{EventId: id}
	outcomes, resp.ConflictingCopyDead = withoutConflictingCopy(outcomes, pending)
	for _, o := range outcomes {
		if o.GetAttempt() != nil {
			resp.Attempts = append(resp.Attempts, o.GetAttempt())
		}
		resp.DestinationId, resp.CustomerId, resp.LaneKey = o.GetDestinationId(), o.GetCustomerId(), o.GetLaneKey()
		resp.Type, resp.AcceptedAt, resp.SubscriptionId = o.GetType(), o.GetAcceptedAt(), o.GetSubscriptionId()
		switch o.GetKind() {
		case rivorav1.EventOutcome_KIND_DELIVERED:
			// Delivered after it died (replayed, resent): dead no more.
			resp.State, resp.DeadReason = rivorav1.EventState_EVENT_STATE_DELIVERED, rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED
		case rivorav1.EventOutcome_KIND_DEAD:
			resp.State = rivorav1.EventState_EVENT_STATE_DEAD
			resp.DeadReason = o.GetDeadReason()
		}
	}
	numberTries(resp.Attempts)
	if pending {
		resp.DestinationId, resp.CustomerId, resp.LaneKey = loc.Lane.Destination, loc.Lane.Customer, loc.Lane.Key
		resp.SubscriptionId = loc.Lane.Subscription
		resp.AcceptedAt = timestamppb.New(loc.Entry.AcceptedAt)
		if ev := owner.Cached(loc.Entry); ev != nil {
			resp.Type = ev.GetType()
		} else if resp.Type == "" {
			resp.Type = s.storedType(ctx, loc)
		}
		resp.AheadInLane = int32(loc.Ahead)
		resp.State, resp.DeadReason = rivorav1.EventState_EVENT_STATE_PENDING, rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED // replayed: dead no more
		if loc.InFlight {
			resp.State = rivorav1.EventState_EVENT_STATE_IN_FLIGHT
		}
		if at := nextAttemptAt(loc, time.Now()); !at.IsZero() {
			resp.NextAttemptAt = timestamppb.New(at)
		}
		s.explainWaiting(resp, loc)
	}
	withEpisodes(resp, outcomes)
	return connect.NewResponse(resp), nil
}

// withEpisodes sets resp's episodes. When the latest acceptance has not
// ended and is not pending here (an agent that does not own it answers),
// how an earlier one ended is not the event's state: unknown here.
func withEpisodes(resp *rivorav1.GetEventResponse, outcomes []*rivorav1.EventOutcome) {
	resp.Episodes = episodes(outcomes, resp)
	if n := len(resp.Episodes); n > 0 && resp.Episodes[n-1].GetState() == rivorav1.EventState_EVENT_STATE_UNSPECIFIED {
		resp.State, resp.DeadReason = rivorav1.EventState_EVENT_STATE_UNSPECIFIED, rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED
	}
}

// episodes splits an event's history into its acceptances (its publish,
// then each replay or resend: each has its own accepted_at), oldest
// first, with the tries each made (numbered: numberTries) and how each
// ended; the current one, when pending, is resp's. Nil for an event
// accepted once.
func episodes(outcomes []*rivorav1.EventOutcome, resp *rivorav1.GetEventResponse) []*rivorav1.Episode {
	byAccepted := map[int64]*rivorav1.Episode{}
	var out []*rivorav1.Episode
	of := func(at *timestamppb.Timestamp) *rivorav1.Episode {
		k := at.AsTime().UnixNano()
		if e, ok := byAccepted[k]; ok {
			return e
		}
		e := &rivorav1.Episode{AcceptedAt: at}
		byAccepted[k] = e
		out = append(out, e)
		return e
	}
	for _, o := range outcomes {
		if o.GetAcceptedAt() == nil {
			continue // not known which acceptance it belongs to
		}
		e := of(o.GetAcceptedAt())
		if try := o.GetAttempt().GetTry(); try > 0 {
			if e.FirstTry == 0 || try < e.FirstTry {
				e.FirstTry = try
			}
			e.LastTry = max(e.LastTry, try)
		}
		switch o.GetKind() {
		case rivorav1.EventOutcome_KIND_DELIVERED:
			e.State, e.DeadReason = rivorav1.EventState_EVENT_STATE_DELIVERED, rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED
		case rivorav1.EventOutcome_KIND_DEAD:
			e.State, e.DeadReason = rivorav1.EventState_EVENT_STATE_DEAD, o.GetDeadReason()
		}
	}
	if state := resp.GetState(); state == rivorav1.EventState_EVENT_STATE_PENDING || state == rivorav1.EventState_EVENT_STATE_IN_FLIGHT {
		of(resp.GetAcceptedAt()).State = state
	}
	if len(out) < 2 {
		return nil
	}
	slices.SortStableFunc(out, func(a, b *rivorav1.Episode) int {
		return a.GetAcceptedAt().AsTime().Compare(b.GetAcceptedAt().AsTime())
	})
	return out
}

// withoutConflictingCopy takes out of an event's outcomes the death of a
// copy of another payload under its id (reason idempotency_conflict): not
// this event's end, nor its lane or type. Kept when nothing else of the
// event is known here (its own records gone, and not pending). dead says
// whether there was one.
func withoutConflictingCopy(outcomes []*rivorav1.EventOutcome, pending bool) (kept []*rivorav1.EventOutcome, dead bool) {
	for _, o := range outcomes {
		if o.GetKind() == rivorav1.EventOutcome_KIND_DEAD && o.GetDeadReason() == rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT {
			dead = true
			continue
		}
		kept = append(kept, o)
	}
	if len(kept) == 0 && !pending {
		return outcomes, dead
	}
	return kept, dead
}

// storedType reads a pending event's type from its lane store, for one
// neither the cache nor its history can tell (after a restart, before its
// first attempt); "" when the store cannot be read here.
func (s *eventService) storedType(ctx context.Context, loc scheduler.Location) string {
	if s.parts == nil {
		return ""
	}
	part := s.parts.OfDestination(loc.Lane.Destination)
	if part == nil {
		return ""
	}
	ev, err := part.Load(ctx, &scheduler.Attempt{Entry: loc.Entry})
	if err != nil {
		return ""
	}
	return ev.GetType()
}

// numberTries gives each of an event's recorded attempts its place among
// all of them (Attempt.try), oldest first. Attempt.number is the attempt
// of max_attempts a try was sent as, which stays put while its
// destination is down (those tries are not charged); the try number is
// what tells ten of them apart. It is counted here, from the history,
// rather than kept by the scheduler: a held lane's probes write no ledger
// record, so a count kept there would restart after a failover, and
// records written before the field existed are numbered the same way.
func numberTries(attempts []*rivorav1.Attempt) {
	slices.SortStableFunc(attempts, func(a, b *rivorav1.Attempt) int { return a.GetAt().AsTime().Compare(b.GetAt().AsTime()) })
	for i, a := range attempts {
		a.Try = int32(i + 1)
	}
}

// explainWaiting fills in why a pending event waits, its attempts used
// and its window.
func (s *eventService) explainWaiting(resp *rivorav1.GetEventResponse, loc scheduler.Location) {
	now := time.Now()
	maxAttempts := 0
	if d, ok := s.registry.Get(loc.Lane.Destination); ok {
		maxAttempts = d.Retry.MaxAttempts
		start := loc.Entry.AcceptedAt
		var subPaused retry.Pauses
		if id := loc.Lane.Subscription; id != "" {
			if sub, ok := s.subs.Get(id); ok {
				subPaused = sub.HeldPauses()
			}
		}
		if end := d.Retry.WindowEnd(start.Add(d.PausedBetweenWith(subPaused, start, now))); !end.IsZero() {
			resp.WindowEndsAt = timestamppb.New(end)
		}
	}
	resp.MaxAttempts = int32(maxAttempts)
	if loc.Ahead == 0 {
		resp.AttemptsUsed = int32(loc.Head.Attempts)
	}
	dest := loc.Lane.Destination
	if _, known := s.registry.Get(dest); !known && !loc.InFlight && loc.Ahead == 0 {
		// Deleted (it is on its way to the archive), or made by a config
		// this agent has not applied yet: not its budget it waits for.
		resp.Waiting = "destination " + dest + " is not in the config this agent applied: deleted (the event becomes a dead letter, reason deleted), or made by a newer config it waits for"
		return
	}
	hold, unusable := s.destinationHold(dest)
	var subHold string
	if sub, ok := s.subs.Get(loc.Lane.Subscription); ok && loc.SubscriptionPaused {
		subHold = subscriptionHoldText(sub)
	}
	resp.Waiting = waitingReason(loc, maxAttempts, holdText(dest, hold, unusable), subHold)
}

// subscriptionHoldText says why sub's config holds its events when this
// agent cannot load its secret, its customer's pause first when it is
// paused too ("" when only the customer's pause holds it, which
// waitingReason words with the lane's subscription, or when nothing does).
func subscriptionHoldText(sub *subscriptions.Subscription) string {
	if !sub.UnusableHeld {
		return ""
	}
	if sub.Paused {
		return "subscription " + sub.ID + " paused; " + subscriptionUnusableText(sub.Unusable)
	}
	return subscriptionUnusableText(sub.Unusable)
}

// subscriptionUnusableText says why the events of a subscription whose
// secret this agent cannot load are held (the load error names what is
// wrong, never the secret).
func subscriptionUnusableText(unusable error) string {
	return "subscription config unusable on this agent: " + unusable.Error() + " (its events are kept, not attempted, until a config of it loads)"
}

// configHold is how the control plane's config of a destination holds
// its lanes (its Paused); this agent's own hold, a config it cannot
// build, is apart from it (destinationHold's error), so that both show
// when both apply.
type configHold int

const (
	notHeld      configHold = iota
	holdPaused              // an operator's pause
	holdDisabled            // Rivora's, after its partner answered 410 Gone
)

// destinationHold is how the control plane's config of destination id
// holds its lanes (notHeld for an unknown id), and, whether or not it
// does, why this agent cannot build it (nil: it can).
func (s *server) destinationHold(id string) (configHold, error) {
	d, ok := s.registry.Get(id)
	switch {
	case !ok:
		return notHeld, nil
	case !d.Paused:
		return notHeld, d.Unusable
	case d.Disabled:
		return holdDisabled, d.Unusable
	}
	return holdPaused, d.Unusable
}

// holdText says, in words, why destination id's config holds an event
// ("" when it does not): the control plane's pause (hold) and this
// agent's (unusable: why it cannot build it), both when both apply.
func holdText(id string, hold configHold, unusable error) string {
	var why []string
	switch hold {
	case holdPaused:
		why = append(why, "destination paused")
	case holdDisabled:
		why = append(why, "destination disabled: its partner answered 410 Gone (rivoractl destinations resume "+id+" sends again)")
	}
	if unusable != nil {
		why = append(why, unusableText(unusable))
	}
	return strings.Join(why, "; ")
}

// unusableText says why the events of a destination this agent cannot
// build are held (the build error names what is wrong, never a secret).
func unusableText(unusable error) string {
	return "destination config unusable on this agent: " + unusable.Error() + " (its events are kept, not attempted, until a config of it builds)"
}

// nextAttemptAt is when a pending head is tried next, when a time says
// it: its retry time while it waits for one, or the end of its partner's
// Retry-After hold when that is later (which holds every head). Zero
// when it is not the head, in flight, due (its retry time passed: it
// waits for its turn, which waitingReason words), held by its parked
// destination (it goes when a probe gets through) or by a pause (no
// attempt until the resume).
func nextAttemptAt(loc scheduler.Location, now time.Time) time.Time {
	if loc.Ahead > 0 || loc.InFlight || loc.Destination.Paused || loc.SubscriptionPaused {
		return time.Time{}
	}
	var at time.Time
	if !loc.Held && !loc.Due && loc.Head.NotBefore.After(now) {
		at = loc.Head.NotBefore
	}
	if hold := loc.Destination.HoldUntil; hold.After(now) && hold.After(at) {
		at = hold
	}
	return at
}

// waitingReason says, in one line, why a pending event is not being
// delivered now ("" while in flight). hold says why its destination's
// config holds it (holdText), subHold why its subscription's does when
// that is not its customer's pause (subscriptionUnusableText).
func waitingReason(loc scheduler.Location, maxAttempts int, hold, subHold string) string {
	switch {
	case loc.InFlight:
		return ""
	case loc.Ahead > 0:
		return fmt.Sprintf("behind %d earlier %s in its lane", loc.Ahead, plural(loc.Ahead, "event"))
	}
	used := fmt.Sprintf("%d of %d attempts used", loc.Head.Attempts, maxAttempts)
	if maxAttempts <= 0 {
		used = fmt.Sprintf("%d attempts used", loc.Head.Attempts)
	}
	dest, now := loc.Destination, time.Now()
	switch {
	case dest.Paused && hold != "":
		return "held: " + hold + "; " + used
	case dest.Paused:
		// Held here before the config says so: a 410 Gone stops the
		// destination at once, and the control plane is told.
		return "held: its partner answered 410 Gone; the destination is being disabled; " + used
	case loc.SubscriptionPaused && subHold != "":
		return "held: " + subHold + "; " + used
	case loc.SubscriptionPaused:
		return "held: subscription " + loc.Lane.Subscription + " paused; " + used
	case dest.HoldUntil.After(now):
		return fmt.Sprintf("held: its partner asked for no requests until %s (Retry-After; a resume ends it); %s", dest.HoldUntil.UTC().Format(time.RFC3339), used)
	case maxAttempts > 0 && loc.Head.Attempts >= maxAttempts:
		// max_attempts was lowered to what it had used or less: its turn
		// ends it (verdict.Decide).
		turn := "at its turn"
		if !loc.Held && !loc.Due && loc.Head.NotBefore.After(now) {
			turn = "at " + loc.Head.NotBefore.UTC().Format(time.RFC3339) + ", its turn,"
		}
		return fmt.Sprintf("becomes a dead letter (reason max_attempts) %s without another request: it used %d attempts, and max attempts was lowered to %d since", turn, loc.Head.Attempts, maxAttempts)
	case loc.Held:
		// The scheduler's hold: it goes when a probe gets through.
		return fmt.Sprintf("held: destination %s%s; %s", dest.Health, since(dest.Since), used)
	case loc.Head.LastAttemptAt.IsZero():
		return "due: waiting for its destination's budget" + healthNote(dest)
	case !loc.Due && loc.Head.NotBefore.After(now):
		return fmt.Sprintf("retry at %s after %s%s; %s", loc.Head.NotBefore.UTC().Format(time.RFC3339), lastFailure(loc.Head), healthNote(dest), used)
	}
	// Its retry time passed: it waits for a token of the budget, or for
	// its customer's turn among the others' due lanes (and, retried, for
	// its turn among its customer's first attempts).
	due := "due"
	if !loc.Head.NotBefore.IsZero() {
		due += " since " + loc.Head.NotBefore.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%s (retry after %s): waiting for its destination's budget and its customer's turn%s; %s", due, lastFailure(loc.Head), healthNote(dest), used)
}

// healthNote names a destination's health when it is not healthy (a
// degraded destination's rate is cut, a parked one takes one attempt at
// a time), for a head that is not held by it.
func healthNote(dest scheduler.DestinationState) string {
	if dest.Health == budget.Healthy {
		return ""
	}
	return fmt.Sprintf(" (destination %s%s)", dest.Health, since(dest.Since))
}

func since(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return " since " + t.UTC().Format(time.RFC3339)
}

// lastFailure names the head's last failure in a few words: its HTTP
// status, else its error's first clause ("timeout after 10s",
// "connection error", the SSRF guard's refusal), else "no response".
func lastFailure(h scheduler.Head) string {
	if h.LastStatus != 0 {
		return fmt.Sprintf("HTTP %d", h.LastStatus)
	}
	if first, _, _ := strings.Cut(h.LastError, ": "); first != "" {
		return first
	}
	return "no response"
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// Listing bounds.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

// ListEvents lists a destination's events, newest first: pending ones
// from the scheduler (by acceptance), delivered and dead ones from the
// history (by when they finished).
func (s *eventService) ListEvents(ctx context.Context, req *connect.Request[rivorav1.ListEventsRequest]) (*connect.Response[rivorav1.ListEventsResponse], error) {
	q, err := parseListRequest(req.Msg)
	if err != nil {
		return nil, errkind.Tag(errkind.Invalid, err)
	}
	// Only the owner knows the destination's pending events. A deleted
	// destination has none, and its history stays (as for events get and
	// dlq list): any agent lists that.
	_, unknown := s.ownedDestination(ctx, q.destination)
	if unknown != nil && (!errors.Is(unknown, errkind.NotFound) || errors.Is(unknown, errNotOwnedHere) || !(q.history.Delivered || q.history.Dead)) {
		return nil, unknown
	}
	var all []listed
	resp := &rivorav1.ListEventsResponse{}
	if q.pending || q.inFlightOnly {
		w := s.sched.WalkPending(q.pendingFilter())
		if err := walkPaced(ctx, w); err != nil {
			return nil, err // the caller gave up (Canceled), or its deadline passed
		}
		pend, truncated := w.Result()
		resp.Truncated = truncated
		for _, p := range pend {
			all = append(all, listed{at: p.Entry.AcceptedAt, summary: s.pendingSummary(ctx, p)})
		}
	}
	if q.history.Delivered || q.history.Dead {
		l, err := s.history.List(ctx, q.history)
		if err != nil {
			return nil, errkind.Tag(errkind.Unavailable, err)
		}
		resp.Truncated = resp.Truncated || l.Truncated
		if !l.SearchedBackTo.IsZero() {
			resp.SearchedBackTo = timestamppb.New(l.SearchedBackTo)
		}
		for _, f := range l.Events {
			if !q.pending {
				// Resent or replayed, it is pending again: not how it
				// ended before.
				if _, pending := s.sched.Find(f.Outcome.GetEventId()); pending {
					continue
				}
			}
			all = append(all, listed{at: f.At, summary: finishedSummary(f)})
		}
	}
	if unknown != nil && len(all) == 0 && resp.SearchedBackTo == nil {
		return nil, unknown // never registered, or its history expired
	}
	if len(all) == 0 {
		if err := s.unknownSubscription(ctx, q.subscription); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(all, func(x, y listed) int { return y.at.Compare(x.at) })
	all = newestPerEvent(all)
	if len(all) > q.limit {
		all, resp.Truncated = all[:q.limit], true
	}
	for _, l := range all {
		resp.Events = append(resp.Events, l.summary)
	}
	return connect.NewResponse(resp), nil
}

// newestPerEvent keeps, of a listing sorted newest first, each event's
// first (newest) entry: a resent or replayed event is pending again while
// the history still holds how it ended before, and an event resent twice
// ended twice.
func newestPerEvent(all []listed) []listed {
	seen := make(map[string]bool, len(all))
	out := all[:0]
	for _, l := range all {
		if id := l.summary.GetEventId(); !seen[id] {
			seen[id] = true
			out = append(out, l)
		}
	}
	return out
}

// listed is one event of a listing and the time it is ordered by.
type listed struct {
	at      time.Time
	summary *rivorav1.EventSummary
}

// listQuery is a validated ListEventsRequest.
type listQuery struct {
	destination, customer, lane, subscription string
	since, until                              time.Time
	limit                                     int
	pending, inFlightOnly                     bool
	history                                   history.Filter
}

func parseListRequest(m *rivorav1.ListEventsRequest) (listQuery, error) {
	q := listQuery{
		destination: m.GetDestinationId(), customer: m.GetCustomerId(), lane: m.GetLaneKey(), subscription: m.GetSubscriptionId(),
		limit: int(m.GetLimit()),
	}
	if err := lanes.ValidateID("destination_id", q.destination); err != nil {
		return q, fmt.Errorf("%w (events are listed per destination)", err)
	}
	if q.lane != "" && q.customer == "" {
		return q, errors.New("lane_key needs customer_id: a lane is one customer's")
	}
	if q.subscription != "" {
		if err := lanes.ValidateID("subscription_id", q.subscription); err != nil {
			return q, err
		}
	}
	switch {
	case q.limit == 0:
		q.limit = defaultListLimit
	case q.limit < 0 || q.limit > maxListLimit:
		return q, fmt.Errorf("limit must be 1–%d, got %d", maxListLimit, q.limit)
	}
	if m.GetSince() != nil {
		q.since = m.GetSince().AsTime()
	}
	if m.GetUntil() != nil {
		q.until = m.GetUntil().AsTime()
	}
	if !q.since.IsZero() && !q.until.IsZero() && q.since.After(q.until) {
		return q, fmt.Errorf("since (%s) is after until (%s)", q.since.Format(time.RFC3339), q.until.Format(time.RFC3339))
	}
	h := history.Filter{
		Destination: q.destination, Customer: q.customer, Lane: q.lane, Subscription: q.subscription,
		Since: q.since, Until: q.until, Limit: q.limit,
	}
	switch st := m.GetState(); st {
	case rivorav1.EventState_EVENT_STATE_UNSPECIFIED:
		q.pending, h.Delivered, h.Dead = true, true, true
	case rivorav1.EventState_EVENT_STATE_PENDING:
		q.pending = true
	case rivorav1.EventState_EVENT_STATE_IN_FLIGHT:
		q.inFlightOnly = true
	case rivorav1.EventState_EVENT_STATE_DELIVERED:
		h.Delivered = true
	case rivorav1.EventState_EVENT_STATE_DEAD:
		h.Dead = true
	default:
		return q, fmt.Errorf("unknown state %v", st)
	}
	q.history = h
	return q, nil
}

func (q listQuery) pendingFilter() scheduler.PendingFilter {
	return scheduler.PendingFilter{
		Destination: q.destination, Customer: q.customer, Lane: q.lane, Subscription: q.subscription,
		Since: q.since, Until: q.until, Limit: q.limit, InFlightOnly: q.inFlightOnly,
	}
}

// pendingSummary describes a pending event. Its type is decoded from
// the encoding the scheduler holds in memory or else loaded from the lane
// store (one direct read by sequence; left empty if that fails).
func (s *eventService) pendingSummary(ctx context.Context, p scheduler.PendingEvent) *rivorav1.EventSummary {
	sum := &rivorav1.EventSummary{
		EventId: p.Entry.EventID, DestinationId: p.Lane.Destination, CustomerId: p.Lane.Customer, LaneKey: p.Lane.Key,
		State: rivorav1.EventState_EVENT_STATE_PENDING, AcceptedAt: timestamppb.New(p.Entry.AcceptedAt), SubscriptionId: p.Lane.Subscription,
	}
	if p.InFlight {
		sum.State = rivorav1.EventState_EVENT_STATE_IN_FLIGHT
	}
	if p.IsHead {
		sum.Attempts, sum.LastStatus, sum.LastError = int32(p.Head.Attempts), int32(p.Head.LastStatus), p.Head.LastError
	}
	if part := s.parts.Partition(p.Partition); part != nil {
		if ev, err := part.Load(ctx, &scheduler.Attempt{Entry: p.Entry}); err == nil {
			sum.Type = ev.GetType()
		}
	} else if ev := owner.Cached(p.Entry); ev != nil {
		sum.Type = ev.GetType()
	}
	return sum
}

// finishedSummary describes a delivered or dead event from its terminal
// record.
func finishedSummary(f history.Finished) *rivorav1.EventSummary {
	o := f.Outcome
	sum := &rivorav1.EventSummary{
		EventId: o.GetEventId(), DestinationId: o.GetDestinationId(), CustomerId: o.GetCustomerId(), LaneKey: o.GetLaneKey(),
		Type: o.GetType(), AcceptedAt: o.GetAcceptedAt(), FinishedAt: timestamppb.New(f.At), SubscriptionId: o.GetSubscriptionId(),
	}
	switch o.GetKind() {
	case rivorav1.EventOutcome_KIND_DELIVERED:
		sum.State = rivorav1.EventState_EVENT_STATE_DELIVERED
		sum.Attempts, sum.LastStatus = o.GetAttempt().GetNumber(), o.GetAttempt().GetStatusCode()
	case rivorav1.EventOutcome_KIND_DEAD:
		sum.State = rivorav1.EventState_EVENT_STATE_DEAD
		sum.Attempts, sum.LastStatus, sum.LastError = o.GetAttempts(), o.GetLastStatus(), o.GetLastError()
		sum.DeadReason = o.GetDeadReason()
	}
	return sum
}

// ResendEvent delivers a delivered or dead-lettered event again: the
// delivered event from the history, a dead one from the dead-letter
// archive, re-ingested at the tail of its lane with its own event id and
// marked resent; audited (event.resend).
//
// A resend is stored once per way the event ended: its dedup id names the
// event and the time it was delivered or died (for a dead letter, the
// same id a replay of it uses), so two operators resending it at once, or
// a retry after a lost answer, send it once (AlreadyExists for the
// other) within the ingest dedup window.
//
// As GetEvent, a UUID typed in upper case not found as typed is looked for
// in lower case (a not_found resends nothing).
func (s *eventService) ResendEvent(ctx context.Context, req *connect.Request[rivorav1.ResendEventRequest]) (*connect.Response[rivorav1.ResendEventResponse], error) {
	id, reason := req.Msg.GetEventId(), strings.TrimSpace(req.Msg.GetReason())
	if err := lanes.ValidateEventID("event_id", id); err != nil {
		return nil, errkind.Tag(errkind.Invalid, err)
	}
	if reason == "" {
		return nil, errkind.Errorf(errkind.Invalid, "reason is required: say why the event is sent again (it goes to the audit log)")
	}
	resp, err := s.resend(ctx, id, reason)
	if lower, ok := lanes.LowerEventID(id); ok && errkind.CodeOf(err) == connect.CodeNotFound {
		if lowered, lowerErr := s.resend(ctx, lower, reason); errkind.CodeOf(lowerErr) != connect.CodeNotFound {
			return lowered, lowerErr
		}
	}
	return resp, err
}

// resend is ResendEvent of id exactly as given.
func (s *eventService) resend(ctx context.Context, id, reason string) (*connect.Response[rivorav1.ResendEventResponse], error) {
	mayResend := resendScope(ctx)
	if loc, pending := s.sched.Find(id); pending {
		if !mayResend(loc.Lane.Customer) {
			return nil, auth.EventNotFound(id)
		}
		return nil, errkind.Errorf(errkind.Precondition, "event %s is still pending in lane %s (%d ahead of it); it will be delivered, there is nothing to resend", id, loc.Lane, loc.Ahead)
	}
	found, err := s.resendable(ctx, id, mayResend)
	if err != nil {
		return nil, err
	}
	// Asked before the destination's owner is looked for, so that a
	// destination that is gone is answered as Resendable says on any
	// agent, and another customer's own destination reads word for word
	// as a gone one to a customer token.
	if err := s.gateway.Resendable(ctx, found.event); err != nil {
		return nil, err
	}
	// Only the owner of its partition knows whether it is pending again.
	if _, err := s.ownedDestination(ctx, found.event.GetDestinationId()); err != nil {
		return nil, err
	}
	before := time.Now()
	resent, duplicate, err := s.gateway.Resend(ctx, found.event, found.dedupID)
	if err != nil {
		return nil, err
	}
	if found.markResent != nil {
		// Stored now, or by another resend or a replay of the same death
		// (duplicate): handled either way.
		if err := found.markResent(context.WithoutCancel(ctx), before); err != nil {
			s.log.Warn("resent dead letter not marked handled; a replay may send it again", "event_id", id, "error", err)
		}
	}
	if duplicate {
		return nil, errkind.Errorf(errkind.Exists, "event %s (%s at %s) was already resent; see `rivoractl events get %s`", id, stateWord(found.was), found.endedAt.UTC().Format(time.RFC3339Nano), id)
	}
	// Stored: the audit entry is written even if the caller hangs up.
	ctx = context.WithoutCancel(ctx)
	resp := &rivorav1.ResendEventResponse{
		EventId: id, DestinationId: resent.GetDestinationId(), CustomerId: resent.GetCustomerId(), LaneKey: resent.GetLaneKey(), Was: found.was,
	}
	err = s.upstream.Audit(ctx, &rivorav1.AuditEntry{
		Action: "event.resend", DestinationId: resent.GetDestinationId(), Reason: reason,
		Detail: fmt.Sprintf("resent event %s (%s, type %s) to customer %s lane %s", id, stateWord(found.was), resent.GetType(), resent.GetCustomerId(), resent.GetLaneKey()),
	})
	if err != nil && !errors.Is(err, upstream.ErrAuditQueued) {
		// Resent: saying so matters more than the audit's failure. Not
		// Unavailable, which invites a retry. One queued for a control
		// plane's return is no failure.
		return nil, errkind.Errorf(internal, "event %s was resent (do not resend it again), but: %w", id, err)
	}
	return connect.NewResponse(resp), nil
}

// resendFound is what a resend sends: the event as it was delivered or
// died, how it ended, when, and the dedup id that makes the resend of that
// ending happen once.
type resendFound struct {
	event   *rivorav1.Event
	was     rivorav1.EventState
	endedAt time.Time
	dedupID string
	// markResent, for a dead letter, records that a resend re-accepted
	// it (deadletters.Service.ForResend).
	markResent func(ctx context.Context, at time.Time) error
}

// resendScope is whose events the caller may resend: a customer token
// only its customers' (another customer's event answers as an absent one
// does, auth.EventNotFound); every other role allowed to call ResendEvent
// (auth.Policies), any.
func resendScope(ctx context.Context) func(customer string) bool {
	p := auth.FromContext(ctx)
	if p == nil || p.Role != rivorav1.Role_ROLE_CUSTOMER {
		return func(string) bool { return true }
	}
	return func(customer string) bool { return slices.Contains(p.Customers, customer) }
}

// resendable finds what to send again: the event as last delivered (the
// history keeps it) or as it died (the dead-letter archive); an event
// that is not one of the caller's customers' (mayResend) is absent, and
// to a caller limited to some customers an absent event is answered as
// another customer's is (auth.EventNotFound).
func (s *eventService) resendable(ctx context.Context, id string, mayResend func(customer string) bool) (resendFound, error) {
	outcomes, err := s.history.Lookup(ctx, id)
	if err != nil {
		return resendFound{}, errkind.Tag(errkind.Unavailable, err)
	}
	for _, o := range outcomes {
		if !mayResend(o.GetCustomerId()) {
			return resendFound{}, auth.EventNotFound(id)
		}
	}
	var f resendFound
	for _, o := range outcomes {
		switch o.GetKind() {
		case rivorav1.EventOutcome_KIND_DELIVERED:
			f.was, f.endedAt = rivorav1.EventState_EVENT_STATE_DELIVERED, o.GetAttempt().GetAt().AsTime()
		case rivorav1.EventOutcome_KIND_DEAD:
			f.was = rivorav1.EventState_EVENT_STATE_DEAD
		}
	}
	switch f.was {
	case rivorav1.EventState_EVENT_STATE_DELIVERED:
		ev, err := s.history.Body(ctx, id)
		if err != nil {
			return f, errkind.Tag(errkind.Unavailable, err)
		}
		if ev == nil {
			return f, errkind.Errorf(errkind.NotFound, "event %s was delivered, but its body is no longer in the history (expired, or delivered by a version that did not keep it)", id)
		}
		f.event, f.dedupID = ev, fmt.Sprintf("resend:%s:%d", id, f.endedAt.UnixNano())
		return f, nil
	case rivorav1.EventState_EVENT_STATE_DEAD:
		d, mark, err := s.deadLetters.ForResend(ctx, id, outcomes[0].GetDestinationId())
		if connect.CodeOf(err) == connect.CodeNotFound || errors.Is(err, errkind.NotFound) {
			return f, errkind.Errorf(errkind.Unavailable, "event %s is dead but its dead letter is not in the archive yet; retry in a few seconds", id)
		}
		if err != nil {
			return f, err
		}
		f.event, f.endedAt, f.markResent = d.GetEvent(), d.GetDeadAt().AsTime(), mark
		f.dedupID = ingest.ReplayDedupID(d)
		return f, nil
	}
	if p := auth.FromContext(ctx); p != nil && p.Scoped() {
		// Word for word the answer for another customer's event, which
		// it must not tell apart from an absent one.
		return f, auth.EventNotFound(id)
	}
	return f, fmt.Errorf("event %s: %w as delivered or dead here (never accepted, still moving into its lane, or its history expired); see `rivoractl events get %s`", id, errkind.NotFound, id)
}

func stateWord(st rivorav1.EventState) string {
	switch st {
	case rivorav1.EventState_EVENT_STATE_DELIVERED:
		return "was delivered"
	case rivorav1.EventState_EVENT_STATE_DEAD:
		return "was dead"
	}
	return st.String()
}
