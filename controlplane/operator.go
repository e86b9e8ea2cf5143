package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// operatorRouter serves, on the control plane of a cell, the operator
// services that agents serve for what they own — rivora.v1.EventService,
// LaneService and ArchiveService — by calling the agent that can answer:
//
//   - a call naming a destination (ListLanes, SkipLaneHead, ListEvents)
//     goes to the agent that owns the destination's partition now, as the
//     agents report it (ReportOwned);
//   - GetEvent names only an event id: every connected agent is asked at
//     once, each for at most askTimeout, and the answers merge (only the
//     owner knows a pending event; the history is the cell's);
//   - ResendEvent finds the event as GetEvent does, then goes to the owner
//     of its destination's partition;
//   - the archive is the cell's (S3/MinIO), so ArchiveService calls go to
//     any connected agent: a replay to the next one when one is
//     Unavailable; list, stats and show to the others too, at once, when
//     the first fails, does not answer within hedgeAfter or cannot read
//     the archive (askArchive); while no agent can read it, they are
//     answered from every agent's ledgers instead (operator_ledgers.go).
//
// Each call to an agent carries the caller's token (auth.Forwarding), so
// the agent authorizes it again. An agent's own answer, error included,
// reaches the caller as the agent gave it; the router's own failures are
// domain errors (errors.go), those naming agents marked so that a
// customer token is not told them (agentdetail.go). It keeps no state:
// the registry knows the agents.
type operatorRouter struct {
	agents     *agentRegistry
	partitions int
	// http has no overall timeout: a replay streams as long as it runs.
	// Unary calls are bounded by callTimeout unless the caller set a
	// deadline.
	http *http.Client
	// forward sends the caller's token on.
	forward     connect.ClientOption
	callTimeout time.Duration
	askTimeout  time.Duration
	// hedgeAfter is how long the first agent asked about the archive has
	// before the others are asked too (askArchive).
	hedgeAfter time.Duration
}

func newOperatorRouter(agents *agentRegistry, partitions int, transport http.RoundTripper) *operatorRouter {
	return &operatorRouter{
		agents: agents, partitions: partitions, http: &http.Client{Transport: transport}, forward: connect.WithInterceptors(auth.Forwarding()),
		callTimeout: 30 * time.Second, askTimeout: 5 * time.Second, hedgeAfter: 2 * time.Second,
	}
}

var (
	_ rivorav1connect.EventServiceHandler   = (*operatorRouter)(nil)
	_ rivorav1connect.LaneServiceHandler    = (*operatorRouter)(nil)
	_ rivorav1connect.ArchiveServiceHandler = (*operatorRouter)(nil)
)

// ---- by destination -------------------------------------------------------

// owner is the agent owning destination's partition now.
func (r *operatorRouter) owner(destination string) (*agentState, error) {
	if destination == "" {
		return nil, errorf(ErrInvalid, "destination_id is required")
	}
	p := uint32(lanes.Partition(destination, r.partitions))
	a, ok := r.agents.ownerOf(p)
	if !ok {
		return nil, errorf(ErrUnavailable, "partition %d has no owner right now; retry (destination %q is in it; see `rivoractl agents list`)", p, destination)
	}
	return a, nil
}

// unary calls the agent that owns destination with call, bounded in time.
func unary[Res any](ctx context.Context, r *operatorRouter, destination string, call func(context.Context, *agentState) (*connect.Response[Res], error)) (*connect.Response[Res], error) {
	a, err := r.owner(destination)
	if err != nil {
		return nil, err
	}
	ctx, cancel := r.bounded(ctx, r.callTimeout)
	defer cancel()
	resp, err := call(ctx, a)
	if err != nil {
		return nil, fromAgent(a, err)
	}
	// A fresh response: the agent's HTTP headers are not ours to send.
	return connect.NewResponse(resp.Msg), nil
}

// bounded gives ctx a deadline of d unless the caller set one.
func (r *operatorRouter) bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// fromAgent keeps an agent's own answer (a wire error) as it is, so its
// code and message reach the caller. Not reaching the agent, or it not
// answering in time, is Unavailable naming the agent (agentsFailed: a
// customer token is not told which). Any other failure of the call on
// this side keeps its code, marked too: its message may name the agent's
// address.
func fromAgent(a *agentState, err error) error {
	switch {
	case err == nil, connect.IsWireError(err), errors.Is(err, context.Canceled):
		return err
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown:
		return agentsFailed(fmt.Errorf("agent %s at %s did not answer: %w; retry", a.name, a.address, err))
	}
	return &agentDetailError{err: err}
}

func (r *operatorRouter) ListLanes(ctx context.Context, req *connect.Request[rivorav1.ListLanesRequest]) (*connect.Response[rivorav1.ListLanesResponse], error) {
	return unary(ctx, r, req.Msg.GetDestinationId(), func(ctx context.Context, a *agentState) (*connect.Response[rivorav1.ListLanesResponse], error) {
		return r.lanes(a).ListLanes(ctx, connect.NewRequest(req.Msg))
	})
}

func (r *operatorRouter) SkipLaneHead(ctx context.Context, req *connect.Request[rivorav1.SkipLaneHeadRequest]) (*connect.Response[rivorav1.SkipLaneHeadResponse], error) {
	resp, err := unary(ctx, r, req.Msg.GetDestinationId(), func(ctx context.Context, a *agentState) (*connect.Response[rivorav1.SkipLaneHeadResponse], error) {
		return r.lanes(a).SkipLaneHead(ctx, connect.NewRequest(req.Msg))
	})
	if err != nil && !connect.IsWireError(err) && req.Msg.GetHeadEventId() == "" {
		// The agent may have skipped the head before its answer was lost:
		// a blind retry would skip the next event.
		return nil, fmt.Errorf("%w (the skip may have happened: check `rivoractl lanes list` or `rivoractl audit` first; with --head EVENT_ID a retry is safe)", err)
	}
	return resp, err
}

func (r *operatorRouter) ListEvents(ctx context.Context, req *connect.Request[rivorav1.ListEventsRequest]) (*connect.Response[rivorav1.ListEventsResponse], error) {
	return unary(ctx, r, req.Msg.GetDestinationId(), func(ctx context.Context, a *agentState) (*connect.Response[rivorav1.ListEventsResponse], error) {
		return r.events(a).ListEvents(ctx, connect.NewRequest(req.Msg))
	})
}

// ---- by event id ----------------------------------------------------------

func (r *operatorRouter) GetEvent(ctx context.Context, req *connect.Request[rivorav1.GetEventRequest]) (*connect.Response[rivorav1.GetEventResponse], error) {
	ev, err := r.findEvent(ctx, req.Msg.GetEventId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(ev), nil
}

// ResendEvent forwards to the owner of the event's destination, which
// refuses a pending event and re-ingests the others. A customer token's
// call for another customer's event is answered as for an absent one
// (the agent checks again).
func (r *operatorRouter) ResendEvent(ctx context.Context, req *connect.Request[rivorav1.ResendEventRequest]) (*connect.Response[rivorav1.ResendEventResponse], error) {
	ev, err := r.findEvent(ctx, req.Msg.GetEventId())
	if err != nil {
		return nil, err
	}
	if !auth.CallerMayActFor(ctx, ev.GetCustomerId()) {
		return nil, auth.EventNotFound(req.Msg.GetEventId())
	}
	return unary(ctx, r, ev.GetDestinationId(), func(ctx context.Context, a *agentState) (*connect.Response[rivorav1.ResendEventResponse], error) {
		return r.events(a).ResendEvent(ctx, connect.NewRequest(req.Msg))
	})
}

// eventAnswer is one agent's answer to GetEvent.
type eventAnswer struct {
	agent string
	resp  *rivorav1.GetEventResponse
	err   error
}

// findEvent asks every connected agent for the event, each for at most
// askTimeout, and merges their answers (mergeEventAnswers).
func (r *operatorRouter) findEvent(ctx context.Context, id string) (*rivorav1.GetEventResponse, error) {
	if err := lanes.ValidateEventID("event_id", id); err != nil {
		return nil, tag(ErrInvalid, err)
	}
	answers, err := askAll(r.agents, func(a *agentState) (eventAnswer, error) {
		ctx, cancel := context.WithTimeout(ctx, r.askTimeout)
		defer cancel()
		resp, err := r.events(a).GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
		if err != nil {
			return eventAnswer{agent: a.name, err: fromAgent(a, err)}, nil
		}
		return eventAnswer{agent: a.name, resp: resp.Msg}, nil
	})
	if err != nil {
		return nil, err // no agent connected
	}
	return mergeEventAnswers(id, answers)
}

// mergeEventAnswers merges the agents' answers about one event, given in
// agent-name order:
//   - pending or in flight wins: only the partition's owner knows that
//     (a resent event is pending there while its history says delivered);
//   - else a found answer, the one with the most attempts (the fullest
//     history; the first such agent on a tie), dead_letter_unarchived
//     if any agent said so (only the partition's owner knows its ledger);
//   - an agent refusing the caller (unauthenticated, permission denied:
//     every agent has the same tokens) is the answer;
//   - every agent NotFound: NotFound;
//   - else, with no answer found, Unavailable: the agents that did not
//     answer may hold it.
func mergeEventAnswers(id string, answers []eventAnswer) (*rivorav1.GetEventResponse, error) {
	var found *rivorav1.GetEventResponse
	var notFound []string
	var failed []error
	unarchived := false
	for _, a := range answers {
		switch {
		case a.err == nil && live(a.resp.GetState()):
			return a.resp, nil
		case a.err == nil:
			unarchived = unarchived || a.resp.GetDeadLetterUnarchived()
			if found == nil || len(a.resp.GetAttempts()) > len(found.GetAttempts()) {
				found = a.resp
			}
		case connect.CodeOf(a.err) == connect.CodePermissionDenied, connect.CodeOf(a.err) == connect.CodeUnauthenticated:
			return nil, a.err
		case connect.CodeOf(a.err) == connect.CodeNotFound:
			notFound = append(notFound, a.agent)
		default:
			failed = append(failed, fmt.Errorf("agent %s: %w", a.agent, a.err))
		}
	}
	switch {
	case found != nil:
		found.DeadLetterUnarchived = unarchived && found.GetState() == rivorav1.EventState_EVENT_STATE_DEAD
		return found, nil
	case len(failed) == 0:
		// Word for word the agents' answer, which is also the one for
		// another customer's event: it must not tell the two apart.
		return nil, auth.EventNotFound(id)
	case len(notFound) == 0:
		return nil, agentsFailed(fmt.Errorf("event %s: no agent answered; retry:\n%w", id, errors.Join(failed...)))
	}
	return nil, agentsFailed(fmt.Errorf("event %s: not found on %s, and the others did not answer (it may be pending there); retry:\n%w", id, strings.Join(notFound, ", "), errors.Join(failed...)))
}

func live(s rivorav1.EventState) bool {
	return s == rivorav1.EventState_EVENT_STATE_PENDING || s == rivorav1.EventState_EVENT_STATE_IN_FLIGHT
}

// ---- the archive: any agent -----------------------------------------------

// anyAgent calls call on the connected agents in name order until one
// answers. call reports whether the next agent may be tried after its
// error; any other answer is final.
func (r *operatorRouter) anyAgent(ctx context.Context, call func(context.Context, *agentState) (failover bool, err error)) error {
	agents := r.agents.connected()
	if len(agents) == 0 {
		return errNoAgents
	}
	var errs []error
	for _, a := range agents {
		failover, err := call(ctx, a)
		if err == nil {
			return nil
		}
		if !failover || ctx.Err() != nil {
			return fromAgent(a, err)
		}
		errs = append(errs, fmt.Errorf("agent %s: %w", a.name, err))
	}
	return agentsFailed(fmt.Errorf("no agent could read the archive (%d tried); retry:\n%w", len(agents), errors.Join(errs...)))
}

// unavailable: the agent is down, restarting, or cannot reach the
// archive; another agent may do better.
func unavailable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		return true
	}
	return false
}

// archiveKind is what one agent's answer to a call on the archive says.
type archiveKind int

const (
	// archiveRead: the answer (read from the archive, or a dead letter
	// found in that agent's ledger): it wins.
	archiveRead archiveKind = iota
	// archiveDown: the archive could not be read there; the agent
	// answered from its own ledgers.
	archiveDown
	// archiveFailed: the agent did not answer, or is Unavailable: another
	// may do better.
	archiveFailed
	// archiveFinal: an error that is the answer (invalid, denied, not
	// found in the archive).
	archiveFinal
)

// archiveTry is one agent's answer to a call on the archive.
type archiveTry[Res any] struct {
	agent *agentState
	resp  *connect.Response[Res]
	err   error
	kind  archiveKind
}

// askArchive calls call on the connected agents, the first by name at
// once and the others (at once) when it has not answered within
// hedgeAfter, or when it answered that the archive could not be read
// there or it failed: an agent whose calls hang, or whose link to the
// archive alone is cut, must not take the caller's whole time. All the
// calls together get the caller's time (callTimeout without a deadline)
// less ledgerReserve, which is left for the ledgers' answer.
//
// The first answer read (kind archiveRead) or refusal (archiveFinal)
// wins and ends the others' calls. Else, when some agent could not read
// the archive, down is the first such answer (the caller then asks every
// agent's ledgers); else the answer is Unavailable naming the agents
// that failed.
func askArchive[Res any](ctx context.Context, r *operatorRouter, call func(context.Context, rivorav1connect.ArchiveServiceClient) (*connect.Response[Res], error),
	kind func(*connect.Response[Res], error) archiveKind) (resp *connect.Response[Res], down *archiveTry[Res], err error) {
	agents := r.agents.connected()
	if len(agents) == 0 {
		return nil, nil, errNoAgents
	}
	ctx, cancel := context.WithTimeout(ctx, r.archiveBudget(ctx))
	defer cancel()
	tries := make(chan archiveTry[Res], len(agents))
	ask := func(a *agentState) {
		go func() {
			resp, err := call(ctx, r.archive(a))
			tries <- archiveTry[Res]{agent: a, resp: resp, err: err, kind: kind(resp, err)}
		}()
	}
	ask(agents[0])
	asked := 1
	askRest := func() {
		for _, a := range agents[asked:] {
			ask(a)
		}
		asked = len(agents)
	}
	hedge := time.NewTimer(r.hedgeAfter)
	defer hedge.Stop()
	var errs []error
	for answered := 0; answered < asked; answered++ {
		var t archiveTry[Res]
		select {
		case <-hedge.C:
			askRest()
			t = <-tries
		case t = <-tries:
		}
		switch {
		case t.kind == archiveRead:
			return connect.NewResponse(t.resp.Msg), nil, nil // cancel ends the others' calls; tries holds their answers
		case t.kind == archiveFinal:
			// Every agent has the same tokens and reads the same archive:
			// a refusal (or an id absent from the archive) is the answer,
			// whichever agent gave it, and no later read may override it
			// (one agent has seen a token revoked, another not yet).
			return nil, nil, fromAgent(t.agent, t.err)
		case t.kind == archiveDown && down == nil:
			down = &t
		case t.kind == archiveFailed:
			errs = append(errs, fmt.Errorf("agent %s: %w", t.agent.name, t.err))
		}
		askRest()
	}
	if down != nil {
		return nil, down, nil
	}
	return nil, nil, agentsFailed(fmt.Errorf("no agent could read the archive (%d tried); retry:\n%w", len(agents), errors.Join(errs...)))
}

// archiveBudget is the time askArchive's calls get: what the caller of
// ctx has left (callTimeout without a deadline) less ledgerReserve, or
// half of it when that leaves little.
func (r *operatorRouter) archiveBudget(ctx context.Context) time.Duration {
	left := r.callTimeout
	if deadline, ok := ctx.Deadline(); ok {
		left = time.Until(deadline)
	}
	if budget := left - r.ledgerReserve(); budget > left/2 {
		return budget
	}
	return left / 2
}

// ledgerReserve is the time kept for asking every agent's ledgers after
// the archive could not be read: askTimeout, and as much again for the
// answer to reach the caller before its deadline.
func (r *operatorRouter) ledgerReserve() time.Duration { return 2 * r.askTimeout }

// listKind is askArchive's kind for list and stats answers: one from the
// ledgers says why the archive could not be read (whyDown).
func listKind[Res any](whyDown func(*Res) string) func(*connect.Response[Res], error) archiveKind {
	return func(resp *connect.Response[Res], err error) archiveKind {
		switch {
		case err == nil && whyDown(resp.Msg) == "":
			return archiveRead
		case err == nil:
			return archiveDown
		case unavailable(err):
			return archiveFailed
		}
		return archiveFinal
	}
}

// ListDeadLetters asks the agents' archives (askArchive); one that could
// not read the archive answers from its own ledgers (archive_unavailable).
// If none could read it, every agent's ledgers are asked instead
// (listLedgers): each holds only its partitions' dead letters.
func (r *operatorRouter) ListDeadLetters(ctx context.Context, req *connect.Request[rivorav1.ListDeadLettersRequest]) (*connect.Response[rivorav1.ListDeadLettersResponse], error) {
	if req.Msg.GetLedgersOnly() {
		return r.listLedgers(ctx, req.Msg, "")
	}
	call := func(ctx context.Context, c rivorav1connect.ArchiveServiceClient) (*connect.Response[rivorav1.ListDeadLettersResponse], error) {
		return c.ListDeadLetters(ctx, connect.NewRequest(req.Msg))
	}
	resp, down, err := askArchive(ctx, r, call, listKind((*rivorav1.ListDeadLettersResponse).GetArchiveUnavailable))
	if down == nil {
		return resp, err
	}
	return r.listLedgers(ctx, req.Msg, down.resp.Msg.GetArchiveUnavailable())
}

// GetDeadLetter asks the agents' archives (askArchive), as list does, but
// for one answer: an agent that could not read the archive answers from
// its own ledgers only when the dead letter waits there; else it says
// both (archiveDownErr). If none could read the archive, every agent's
// ledgers are asked (getLedgers).
func (r *operatorRouter) GetDeadLetter(ctx context.Context, req *connect.Request[rivorav1.GetDeadLetterRequest]) (*connect.Response[rivorav1.GetDeadLetterResponse], error) {
	if req.Msg.GetLedgersOnly() {
		return r.getLedgers(ctx, req.Msg, nil)
	}
	call := func(ctx context.Context, c rivorav1connect.ArchiveServiceClient) (*connect.Response[rivorav1.GetDeadLetterResponse], error) {
		return c.GetDeadLetter(ctx, connect.NewRequest(req.Msg))
	}
	kind := func(_ *connect.Response[rivorav1.GetDeadLetterResponse], err error) archiveKind {
		switch {
		case err == nil:
			return archiveRead
		case archiveDownErr(err):
			return archiveDown
		case unavailable(err):
			return archiveFailed
		}
		return archiveFinal
	}
	resp, down, err := askArchive(ctx, r, call, kind)
	if down == nil {
		return resp, err
	}
	return r.getLedgers(ctx, req.Msg, down.err)
}

// DeadLetterStats: as ListDeadLetters (statsLedgers).
func (r *operatorRouter) DeadLetterStats(ctx context.Context, req *connect.Request[rivorav1.DeadLetterStatsRequest]) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
	if req.Msg.GetLedgersOnly() {
		return r.statsLedgers(ctx, req.Msg, "")
	}
	call := func(ctx context.Context, c rivorav1connect.ArchiveServiceClient) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
		return c.DeadLetterStats(ctx, connect.NewRequest(req.Msg))
	}
	resp, down, err := askArchive(ctx, r, call, listKind((*rivorav1.DeadLetterStatsResponse).GetArchiveUnavailable))
	if down == nil {
		return resp, err
	}
	return r.statsLedgers(ctx, req.Msg, down.resp.Msg.GetArchiveUnavailable())
}

// Replay forwards one agent's replay stream, message by message; the
// caller's cancellation (ctx) ends the agent's stream. Only an agent that
// failed before its first report is passed over: after one, the replay
// has begun there (a re-run resumes after what it marked re-accepted).
func (r *operatorRouter) Replay(ctx context.Context, req *connect.Request[rivorav1.ReplayRequest], out *connect.ServerStream[rivorav1.ReplayResponse]) error {
	return r.anyAgent(ctx, func(ctx context.Context, a *agentState) (bool, error) {
		stream, err := r.archive(a).Replay(ctx, connect.NewRequest(req.Msg))
		if err != nil {
			return unavailable(err), err
		}
		defer stream.Close()
		sent := false
		for stream.Receive() {
			if err := out.Send(stream.Msg()); err != nil {
				return false, err
			}
			sent = true
		}
		err = stream.Err()
		return !sent && unavailable(err), err
	})
}

// ---- clients --------------------------------------------------------------

func (r *operatorRouter) events(a *agentState) rivorav1connect.EventServiceClient {
	return rivorav1connect.NewEventServiceClient(r.http, a.address, r.forward)
}

func (r *operatorRouter) lanes(a *agentState) rivorav1connect.LaneServiceClient {
	return rivorav1connect.NewLaneServiceClient(r.http, a.address, r.forward)
}

func (r *operatorRouter) archive(a *agentState) rivorav1connect.ArchiveServiceClient {
	return rivorav1connect.NewArchiveServiceClient(r.http, a.address, r.forward)
}
