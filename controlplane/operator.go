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
//     any connected agent, the next one when one is Unavailable; while
//     the archive cannot be read, list, stats and show are answered from
//     every agent's ledgers instead (operator_ledgers.go).
//
// Each call to an agent carries the caller's token (auth.Forwarding), so
// the agent authorizes it again. An agent's own answer, error included,
// reaches the caller as the agent gave it; the router's own failures are domain errors (errors.go). It
// keeps no state: the registry knows the agents.
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
}

func newOperatorRouter(agents *agentRegistry, partitions int, transport http.RoundTripper) *operatorRouter {
	return &operatorRouter{
		agents: agents, partitions: partitions, http: &http.Client{Transport: transport}, forward: connect.WithInterceptors(auth.Forwarding()),
		callTimeout: 30 * time.Second, askTimeout: 5 * time.Second,
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
// answering in time, is Unavailable naming the agent.
func fromAgent(a *agentState, err error) error {
	switch {
	case err == nil, connect.IsWireError(err), errors.Is(err, context.Canceled):
		return err
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown:
		return tag(ErrUnavailable, fmt.Errorf("agent %s at %s did not answer: %w; retry", a.name, a.address, err))
	}
	return err
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
		return nil, tag(ErrUnavailable, fmt.Errorf("event %s: no agent answered; retry:\n%w", id, errors.Join(failed...)))
	}
	return nil, tag(ErrUnavailable, fmt.Errorf("event %s: not found on %s, and the others did not answer (it may be pending there); retry:\n%w", id, strings.Join(notFound, ", "), errors.Join(failed...)))
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
	return tag(ErrUnavailable, fmt.Errorf("no agent could read the archive (%d tried); retry:\n%w", len(agents), errors.Join(errs...)))
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

// anyUnary is anyAgent for a unary call, each attempt bounded in time;
// it names the agent that answered.
func anyUnary[Res any](ctx context.Context, r *operatorRouter, call func(context.Context, rivorav1connect.ArchiveServiceClient) (*connect.Response[Res], error)) (*connect.Response[Res], string, error) {
	var out *connect.Response[Res]
	answered := ""
	err := r.anyAgent(ctx, func(ctx context.Context, a *agentState) (bool, error) {
		ctx, cancel := r.bounded(ctx, r.callTimeout)
		defer cancel()
		resp, err := call(ctx, r.archive(a))
		if err != nil {
			return unavailable(err), err
		}
		out, answered = connect.NewResponse(resp.Msg), a.name
		return false, nil
	})
	return out, answered, err
}

// ListDeadLetters asks any agent; one that could not read the archive
// answers from its own ledgers (archive_unavailable). The others may
// reach it (otherArchives); if none does, every agent's ledgers are asked
// instead (listLedgers): each holds only its partitions' dead letters.
func (r *operatorRouter) ListDeadLetters(ctx context.Context, req *connect.Request[rivorav1.ListDeadLettersRequest]) (*connect.Response[rivorav1.ListDeadLettersResponse], error) {
	if req.Msg.GetLedgersOnly() {
		return r.listLedgers(ctx, req.Msg, "")
	}
	call := func(ctx context.Context, c rivorav1connect.ArchiveServiceClient) (*connect.Response[rivorav1.ListDeadLettersResponse], error) {
		return c.ListDeadLetters(ctx, connect.NewRequest(req.Msg))
	}
	resp, answered, err := anyUnary(ctx, r, call)
	if err != nil || resp.Msg.GetArchiveUnavailable() == "" {
		return resp, err
	}
	fromArchive := func(resp *connect.Response[rivorav1.ListDeadLettersResponse], err error) bool {
		return err == nil && resp.Msg.GetArchiveUnavailable() == ""
	}
	if other := otherArchives(ctx, r, answered, call, fromArchive); other != nil {
		return other, nil
	}
	return r.listLedgers(ctx, req.Msg, resp.Msg.GetArchiveUnavailable())
}

// GetDeadLetter asks any agent, as the others do, but for one answer: the
// archive could not be read and the dead letter does not wait in that
// agent's ledgers (archiveDownErr). Then the other agents' archives are
// asked at once (otherArchives), and if none answers from it, every
// agent's ledgers (getLedgers).
func (r *operatorRouter) GetDeadLetter(ctx context.Context, req *connect.Request[rivorav1.GetDeadLetterRequest]) (*connect.Response[rivorav1.GetDeadLetterResponse], error) {
	if req.Msg.GetLedgersOnly() {
		return r.getLedgers(ctx, req.Msg, nil)
	}
	call := func(ctx context.Context, c rivorav1connect.ArchiveServiceClient) (*connect.Response[rivorav1.GetDeadLetterResponse], error) {
		return c.GetDeadLetter(ctx, connect.NewRequest(req.Msg))
	}
	var out *connect.Response[rivorav1.GetDeadLetterResponse]
	var archiveErr error
	answered := ""
	err := r.anyAgent(ctx, func(ctx context.Context, a *agentState) (bool, error) {
		ctx, cancel := r.bounded(ctx, r.callTimeout)
		defer cancel()
		resp, err := call(ctx, r.archive(a))
		switch {
		case archiveDownErr(err):
			archiveErr, answered = err, a.name
			return false, nil
		case err != nil:
			return unavailable(err), err
		}
		out = connect.NewResponse(resp.Msg)
		return false, nil
	})
	switch {
	case err != nil:
		return nil, err
	case archiveErr == nil:
		return out, nil
	}
	fromArchive := func(resp *connect.Response[rivorav1.GetDeadLetterResponse], err error) bool {
		return err == nil && resp.Msg.GetArchiveUnavailable() == ""
	}
	if other := otherArchives(ctx, r, answered, call, fromArchive); other != nil {
		return other, nil
	}
	return r.getLedgers(ctx, req.Msg, archiveErr)
}

// DeadLetterStats: as ListDeadLetters (statsLedgers).
func (r *operatorRouter) DeadLetterStats(ctx context.Context, req *connect.Request[rivorav1.DeadLetterStatsRequest]) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
	if req.Msg.GetLedgersOnly() {
		return r.statsLedgers(ctx, req.Msg, "")
	}
	call := func(ctx context.Context, c rivorav1connect.ArchiveServiceClient) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
		return c.DeadLetterStats(ctx, connect.NewRequest(req.Msg))
	}
	resp, answered, err := anyUnary(ctx, r, call)
	if err != nil || resp.Msg.GetArchiveUnavailable() == "" {
		return resp, err
	}
	fromArchive := func(resp *connect.Response[rivorav1.DeadLetterStatsResponse], err error) bool {
		return err == nil && resp.Msg.GetArchiveUnavailable() == ""
	}
	if other := otherArchives(ctx, r, answered, call, fromArchive); other != nil {
		return other, nil
	}
	return r.statsLedgers(ctx, req.Msg, resp.Msg.GetArchiveUnavailable())
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
