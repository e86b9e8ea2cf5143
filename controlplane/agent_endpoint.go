package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/ids"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// agentHandler serves rivora.v1.AgentService: the config stream agents
// follow, and their reports of what they applied and own. Like
// adminHandler it keeps no state and returns domain errors; the gates in
// front of it (Handle) refuse calls on a follower and map the errors.
type agentHandler struct {
	cp *ControlPlane
}

// Watch streams the config to one agent: a snapshot, then a delta on
// every change (feed), while the agent counts as connected.
func (s *agentHandler) Watch(ctx context.Context, req *connect.Request[rivorav1.WatchRequest], stream *connect.ServerStream[rivorav1.WatchResponse]) error {
	cp := s.cp
	name, address := req.Msg.GetAgentName(), req.Msg.GetAddress()
	if err := ids.Validate("id", name); err != nil {
		return errorf(ErrInvalid, "agent_name: %w", err)
	}
	if err := validateURL(address); err != nil {
		return fmt.Errorf("address: %w", err)
	}
	var replacedAt time.Time
	if t := req.Msg.GetSessionReplacedAt(); t != nil {
		replacedAt = t.AsTime()
	}
	cp.agents.connect(name, address, req.Msg.GetSession(), replacedAt, cp.now())
	defer func() {
		cp.agents.disconnect(cp.runContext(), name, cp.now())
		cp.broadcast() // partitions may move to another agent
	}()
	cp.broadcast()
	cp.log.Info("agent watching", "agent", name, "address", address, "applied_version", req.Msg.GetAppliedVersion())
	return cp.feed(ctx, name, stream.Send)
}

func (s *agentHandler) ReportApplied(ctx context.Context, req *connect.Request[rivorav1.ReportAppliedRequest]) (*connect.Response[rivorav1.ReportAppliedResponse], error) {
	if err := s.cp.agents.applied(req.Msg.GetAgentName(), req.Msg.GetVersion(), s.cp.now()); err != nil {
		return nil, tag(ErrPrecondition, errors.Join(err, errors.New("open a Watch first")))
	}
	return connect.NewResponse(&rivorav1.ReportAppliedResponse{}), nil
}

func (s *agentHandler) ReportOwned(ctx context.Context, req *connect.Request[rivorav1.ReportOwnedRequest]) (*connect.Response[rivorav1.ReportOwnedResponse], error) {
	cutChanged, err := s.cp.agents.owned(req.Msg.GetAgentName(), req.Msg.GetSession(), req.Msg.GetPartitions(), req.Msg.GetCut(), s.cp.now())
	if err != nil {
		return nil, tag(ErrPrecondition, errors.Join(err, errors.New("open a Watch first")))
	}
	if cutChanged {
		s.cp.broadcast() // its cut partitions move to other agents, or back
	}
	return connect.NewResponse(&rivorav1.ReportOwnedResponse{}), nil
}

// ReportLeaving marks a stopping agent leaving: its partitions move to the
// others now, and its session is left for it to end (agentRegistry).
func (s *agentHandler) ReportLeaving(ctx context.Context, req *connect.Request[rivorav1.ReportLeavingRequest]) (*connect.Response[rivorav1.ReportLeavingResponse], error) {
	if err := s.cp.agents.leave(req.Msg.GetAgentName(), req.Msg.GetSession(), req.Msg.GetStoreFailed(), s.cp.now()); err != nil {
		return nil, tag(ErrPrecondition, err)
	}
	s.cp.broadcast() // its partitions go to the other agents
	return connect.NewResponse(&rivorav1.ReportLeavingResponse{}), nil
}

// ReportGone disables a destination whose partner answered 410 Gone
// (disableDestination); a repeated report changes nothing.
func (s *agentHandler) ReportGone(ctx context.Context, req *connect.Request[rivorav1.ReportGoneRequest]) (*connect.Response[rivorav1.ReportGoneResponse], error) {
	m := req.Msg
	if m.GetAt() == nil {
		return nil, errorf(ErrInvalid, "at: when the partner answered is required")
	}
	disabled, version, err := s.cp.disableDestination(m.GetDestinationId(), m.GetAgentName(), m.GetEventId(), m.GetStatus(), m.GetAt().AsTime())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ReportGoneResponse{Disabled: disabled, Version: version}), nil
}

// agentAuditActions are the audit actions agents may record: operator
// actions carried out by the agent that owns the lane or the event.
var agentAuditActions = map[string]bool{"lane.skip": true, "event.resend": true, "deadletters.replay.began": true, "deadletters.replay": true}

// RecordAudit appends an operator action an agent carried out to the audit
// log, stamped with the time and the config version in force.
func (s *agentHandler) RecordAudit(ctx context.Context, req *connect.Request[rivorav1.RecordAuditRequest]) (*connect.Response[rivorav1.RecordAuditResponse], error) {
	e := req.Msg.GetEntry()
	if e == nil {
		return nil, errorf(ErrInvalid, "entry is required")
	}
	if !agentAuditActions[e.GetAction()] {
		return nil, errorf(ErrInvalid, "action %q: agents record only lane.skip, event.resend and deadletters.replay", e.GetAction())
	}
	if e.GetAuthor() == "" {
		return nil, errorf(ErrInvalid, "author is required")
	}
	version, _ := s.cp.store.Snapshot()
	entry := proto.Clone(e).(*rivorav1.AuditEntry)
	entry.At, entry.Version = timestamppb.New(s.cp.now()), version
	if err := s.cp.audit.Append(entry); err != nil {
		return nil, tag(ErrUnavailable, fmt.Errorf("append to the audit log: %w", err))
	}
	return connect.NewResponse(&rivorav1.RecordAuditResponse{}), nil
}
