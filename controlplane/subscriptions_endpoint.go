package controlplane

import (
	"context"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// subscriptionHandler serves rivora.v1.SubscriptionService. Like
// adminHandler it only translates: requests into ControlPlane operations
// with the caller (its token, for the audit) and its scope (a customer
// token reaches only its customers' subscriptions), results into answers
// whose secrets and header values are fingerprints — but for the secret
// in the answers to create (when one was set or generated) and rotate.
type subscriptionHandler struct {
	cp *ControlPlane
}

var (
	_ rivorav1connect.SubscriptionServiceHandler = (*subscriptionHandler)(nil)
	_ rivorav1connect.EventTypeServiceHandler    = (*eventTypeHandler)(nil)
)

func (h *subscriptionHandler) CreateSubscription(ctx context.Context, req *connect.Request[rivorav1.CreateSubscriptionRequest]) (*connect.Response[rivorav1.CreateSubscriptionResponse], error) {
	s, version, err := h.cp.createSubscription(req.Msg, caller(ctx), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	state := h.cp.destinationStates(ctx, []string{s.GetDestinationId()})[s.GetDestinationId()]
	return connect.NewResponse(&rivorav1.CreateSubscriptionResponse{Subscription: h.cp.answerSubscription(s, state, true, scopeOf(ctx)), Version: version}), nil
}

func (h *subscriptionHandler) GetSubscription(ctx context.Context, req *connect.Request[rivorav1.GetSubscriptionRequest]) (*connect.Response[rivorav1.GetSubscriptionResponse], error) {
	s, pending, err := h.cp.subscription(ctx, req.Msg.GetId(), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.GetSubscriptionResponse{Subscription: h.cp.answerSubscriptions(ctx, []*rivorav1.Subscription{s})[0], Pending: pending}), nil
}

func (h *subscriptionHandler) ListSubscriptions(ctx context.Context, req *connect.Request[rivorav1.ListSubscriptionsRequest]) (*connect.Response[rivorav1.ListSubscriptionsResponse], error) {
	subs := h.cp.subscriptions(req.Msg.GetCustomerId(), req.Msg.GetDestinationId(), scopeOf(ctx))
	return connect.NewResponse(&rivorav1.ListSubscriptionsResponse{Subscriptions: h.cp.answerSubscriptions(ctx, subs)}), nil
}

func (h *subscriptionHandler) UpdateSubscription(ctx context.Context, req *connect.Request[rivorav1.UpdateSubscriptionRequest]) (*connect.Response[rivorav1.UpdateSubscriptionResponse], error) {
	s, version, err := h.cp.updateSubscription(req.Msg, caller(ctx), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.UpdateSubscriptionResponse{Subscription: h.cp.answerSubscriptions(ctx, []*rivorav1.Subscription{s})[0], Version: version}), nil
}

func (h *subscriptionHandler) PauseSubscription(ctx context.Context, req *connect.Request[rivorav1.PauseSubscriptionRequest]) (*connect.Response[rivorav1.PauseSubscriptionResponse], error) {
	s, version, err := h.cp.pauseSubscription(req.Msg.GetId(), caller(ctx), req.Msg.GetReason(), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.PauseSubscriptionResponse{Subscription: h.cp.answerSubscriptions(ctx, []*rivorav1.Subscription{s})[0], Version: version}), nil
}

func (h *subscriptionHandler) ResumeSubscription(ctx context.Context, req *connect.Request[rivorav1.ResumeSubscriptionRequest]) (*connect.Response[rivorav1.ResumeSubscriptionResponse], error) {
	s, version, err := h.cp.resumeSubscription(req.Msg.GetId(), caller(ctx), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ResumeSubscriptionResponse{Subscription: h.cp.answerSubscriptions(ctx, []*rivorav1.Subscription{s})[0], Version: version}), nil
}

func (h *subscriptionHandler) RotateSubscriptionSecret(ctx context.Context, req *connect.Request[rivorav1.RotateSubscriptionSecretRequest]) (*connect.Response[rivorav1.RotateSubscriptionSecretResponse], error) {
	s, version, err := h.cp.rotateSubscriptionSecret(req.Msg, caller(ctx), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	state := h.cp.destinationStates(ctx, []string{s.GetDestinationId()})[s.GetDestinationId()]
	// Like create's, the one answer that shows the (new) secret.
	return connect.NewResponse(&rivorav1.RotateSubscriptionSecretResponse{Subscription: h.cp.answerSubscription(s, state, true, scopeOf(ctx)), Version: version}), nil
}

func (h *subscriptionHandler) DeleteSubscription(ctx context.Context, req *connect.Request[rivorav1.DeleteSubscriptionRequest]) (*connect.Response[rivorav1.DeleteSubscriptionResponse], error) {
	archived, version, err := h.cp.deleteSubscription(ctx, req.Msg.GetId(), caller(ctx), req.Msg.GetForce(), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.DeleteSubscriptionResponse{Archived: archived.archived, InFlight: archived.inFlight, ArchivedLater: archived.later, Version: version}), nil
}

// eventTypeHandler serves rivora.v1.EventTypeService, the catalogue
// (everyone reads it, admins write it: auth.Policies).
type eventTypeHandler struct {
	cp *ControlPlane
}

func (h *eventTypeHandler) CreateEventType(ctx context.Context, req *connect.Request[rivorav1.CreateEventTypeRequest]) (*connect.Response[rivorav1.CreateEventTypeResponse], error) {
	t, version, err := h.cp.createEventType(req.Msg, caller(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.CreateEventTypeResponse{EventType: t, Version: version}), nil
}

func (h *eventTypeHandler) GetEventType(ctx context.Context, req *connect.Request[rivorav1.GetEventTypeRequest]) (*connect.Response[rivorav1.GetEventTypeResponse], error) {
	t, err := h.cp.eventType(req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.GetEventTypeResponse{EventType: t}), nil
}

func (h *eventTypeHandler) ListEventTypes(ctx context.Context, req *connect.Request[rivorav1.ListEventTypesRequest]) (*connect.Response[rivorav1.ListEventTypesResponse], error) {
	return connect.NewResponse(&rivorav1.ListEventTypesResponse{EventTypes: h.cp.eventTypes(req.Msg.GetIncludeDeprecated()), Strict: h.cp.cfg.StrictEventTypes}), nil
}

func (h *eventTypeHandler) UpdateEventType(ctx context.Context, req *connect.Request[rivorav1.UpdateEventTypeRequest]) (*connect.Response[rivorav1.UpdateEventTypeResponse], error) {
	t, version, err := h.cp.updateEventType(req.Msg, caller(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.UpdateEventTypeResponse{EventType: t, Version: version}), nil
}

func (h *eventTypeHandler) DeprecateEventType(ctx context.Context, req *connect.Request[rivorav1.DeprecateEventTypeRequest]) (*connect.Response[rivorav1.DeprecateEventTypeResponse], error) {
	t, version, err := h.cp.deprecateEventType(req.Msg.GetName(), req.Msg.GetUndo(), caller(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.DeprecateEventTypeResponse{EventType: t, Version: version}), nil
}
