package controlplane

import (
	"context"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// adminHandler serves rivora.v1.AdminService, one file per concept
// (destinations, priorities, limits, audit, config status). It only
// translates: requests into ControlPlane operations (the caller, from its
// token, as their author: the requests' author fields are ignored), their
// results into responses (destinations without their secret, but for
// the answer to create). It keeps no state. Its errors are domain errors; the gates in
// front of it (Handle) refuse calls on a follower and turn the errors into
// Connect codes.
type adminHandler struct {
	cp *ControlPlane
}

func (h *adminHandler) CreateDestination(ctx context.Context, req *connect.Request[rivorav1.CreateDestinationRequest]) (*connect.Response[rivorav1.CreateDestinationResponse], error) {
	d, version, err := h.cp.createDestination(req.Msg, caller(ctx), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	// The one answer that shows the secret: it cannot be read again.
	return connect.NewResponse(&rivorav1.CreateDestinationResponse{Destination: scopeOf(ctx).shown(h.cp.answerWithSecret(d)), Version: version}), nil
}

func (h *adminHandler) GetDestination(ctx context.Context, req *connect.Request[rivorav1.GetDestinationRequest]) (*connect.Response[rivorav1.GetDestinationResponse], error) {
	d, pending, err := h.cp.destination(ctx, req.Msg.GetId(), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.GetDestinationResponse{Destination: scopeOf(ctx).shown(h.cp.answer(d)), Pending: pending}), nil
}

func (h *adminHandler) ListDestinations(ctx context.Context, req *connect.Request[rivorav1.ListDestinationsRequest]) (*connect.Response[rivorav1.ListDestinationsResponse], error) {
	_, dests := h.cp.snapshot()
	sc := scopeOf(ctx)
	dests = slices.DeleteFunc(dests, func(d *rivorav1.Destination) bool { return !sc.destination(d) })
	for _, d := range dests {
		sc.shown(withoutSecret(d))
	}
	return connect.NewResponse(&rivorav1.ListDestinationsResponse{Destinations: dests}), nil
}

func (h *adminHandler) UpdateDestination(ctx context.Context, req *connect.Request[rivorav1.UpdateDestinationRequest]) (*connect.Response[rivorav1.UpdateDestinationResponse], error) {
	d, version, err := h.cp.updateDestination(req.Msg, caller(ctx), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.UpdateDestinationResponse{Destination: h.cp.answer(d), Version: version}), nil
}

func (h *adminHandler) DeleteDestination(ctx context.Context, req *connect.Request[rivorav1.DeleteDestinationRequest]) (*connect.Response[rivorav1.DeleteDestinationResponse], error) {
	archived, version, err := h.cp.deleteDestination(ctx, req.Msg.GetId(), caller(ctx), req.Msg.GetForce(), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.DeleteDestinationResponse{Archived: archived.archived, InFlight: archived.inFlight, ArchivedLater: archived.later, Version: version}), nil
}

func (h *adminHandler) GetDestinationHealth(ctx context.Context, req *connect.Request[rivorav1.GetDestinationHealthRequest]) (*connect.Response[rivorav1.GetDestinationHealthResponse], error) {
	if req.Msg.GetRateHistory() && req.Msg.GetDestinationId() == "" {
		return nil, errorf(ErrInvalid, "rate_history is for one destination: name it in destination_id (15 minutes of every destination would be a very large answer)")
	}
	health, err := h.cp.destinationHealth(ctx, req.Msg.GetDestinationId(), req.Msg.GetRateHistory(), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.GetDestinationHealthResponse{Destinations: health}), nil
}

func (h *adminHandler) PauseDestination(ctx context.Context, req *connect.Request[rivorav1.PauseDestinationRequest]) (*connect.Response[rivorav1.PauseDestinationResponse], error) {
	m := req.Msg
	d, version, err := h.cp.pauseDestination(m.GetDestinationId(), caller(ctx), m.GetReason())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.PauseDestinationResponse{Destination: h.cp.answer(d), Version: version}), nil
}

func (h *adminHandler) ResumeDestination(ctx context.Context, req *connect.Request[rivorav1.ResumeDestinationRequest]) (*connect.Response[rivorav1.ResumeDestinationResponse], error) {
	d, version, heldUntil, err := h.cp.resumeDestination(ctx, req.Msg.GetDestinationId(), caller(ctx))
	if err != nil {
		return nil, err
	}
	resp := &rivorav1.ResumeDestinationResponse{Destination: h.cp.answer(d), Version: version}
	if !heldUntil.IsZero() {
		resp.EndedHoldUntil = timestamppb.New(heldUntil)
	}
	return connect.NewResponse(resp), nil
}
