package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

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

// keepalive bounds how long a Watch stream stays silent, so dead
// connections are noticed by both sides.
const keepalive = 10 * time.Second

func (s *agentHandler) Watch(ctx context.Context, req *connect.Request[rivorav1.WatchRequest], stream *connect.ServerStream[rivorav1.WatchResponse]) error {
	cp := s.cp
	name, address := req.Msg.GetAgentName(), req.Msg.GetAddress()
	if err := ids.Validate("id", name); err != nil {
		return errorf(ErrInvalid, "agent_name: %w", err)
	}
	if err := validateURL(address); err != nil {
		return fmt.Errorf("address: %w", err)
	}
	cp.agents.connect(name, address, req.Msg.GetSession(), cp.now())
	defer func() {
		cp.agents.disconnect(cp.runContext(), name, cp.now())
		cp.broadcast() // partitions may move to another agent
	}()
	cp.broadcast()
	cp.log.Info("agent watching", "agent", name, "address", address, "applied_version", req.Msg.GetAppliedVersion())

	sent := map[string]*rivorav1.Destination{}
	var sentPartitions []uint32
	first := true
	ticker := time.NewTicker(keepalive)
	defer ticker.Stop()
	for {
		changed := cp.changes()
		version, dests := cp.snapshot()
		partitions := cp.agents.partitionsFor(name, cp.cfg.Partitions)
		resp := &rivorav1.WatchResponse{Version: version, Snapshot: first, PartitionCount: uint32(cp.cfg.Partitions), Partitions: partitions}
		current := make(map[string]*rivorav1.Destination, len(dests))
		for _, d := range dests {
			current[d.GetId()] = d
			if first || !proto.Equal(sent[d.GetId()], d) {
				resp.Destinations = append(resp.Destinations, d)
			}
		}
		for id := range sent {
			if _, ok := current[id]; !ok {
				resp.RemovedDestinationIds = append(resp.RemovedDestinationIds, id)
			}
		}
		if first || len(resp.Destinations) > 0 || len(resp.RemovedDestinationIds) > 0 || !equalPartitions(partitions, sentPartitions) {
			if err := stream.Send(resp); err != nil {
				return err
			}
			sent, sentPartitions, first = current, partitions, false
		}
		select {
		case <-changed:
		case <-ticker.C:
			// An empty delta at the current version: a keepalive.
			if err := stream.Send(&rivorav1.WatchResponse{Version: version, PartitionCount: uint32(cp.cfg.Partitions), Partitions: sentPartitions}); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func equalPartitions(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (s *agentHandler) ReportApplied(ctx context.Context, req *connect.Request[rivorav1.ReportAppliedRequest]) (*connect.Response[rivorav1.ReportAppliedResponse], error) {
	if err := s.cp.agents.applied(req.Msg.GetAgentName(), req.Msg.GetVersion(), s.cp.now()); err != nil {
		return nil, tag(ErrPrecondition, errors.Join(err, errors.New("open a Watch first")))
	}
	return connect.NewResponse(&rivorav1.ReportAppliedResponse{}), nil
}

func (s *agentHandler) ReportOwned(ctx context.Context, req *connect.Request[rivorav1.ReportOwnedRequest]) (*connect.Response[rivorav1.ReportOwnedResponse], error) {
	if err := s.cp.agents.owned(req.Msg.GetAgentName(), req.Msg.GetSession(), req.Msg.GetPartitions(), s.cp.now()); err != nil {
		return nil, tag(ErrPrecondition, errors.Join(err, errors.New("open a Watch first")))
	}
	return connect.NewResponse(&rivorav1.ReportOwnedResponse{}), nil
}
