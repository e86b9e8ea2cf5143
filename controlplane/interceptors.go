package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
)

// The gates every admin, token, agent and operator RPC passes, installed
// once where the services are registered (gated) so that no handler can
// forget one: errorInterceptor, leaderInterceptor, then auth.Interceptor
// (authentication and authorization, against auth.Policies), then
// hideAgentsInterceptor (agentdetail.go); between the first two,
// noAgentsInterceptor words "no agent is connected" for the moments
// after a leader change.

// leaderInterceptor refuses every call while gate returns an error: only
// the leading control plane answers (gate is leaderOnly). The refusal is a
// domain error, turned into a Connect code by errorInterceptor outside it.
type leaderInterceptor struct {
	gate func() error
}

func (i leaderInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := i.gate(); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i leaderInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := i.gate(); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// WrapStreamingClient leaves clients alone: the control plane installs
// this interceptor on handlers only.
func (leaderInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// agentsReconnectWithin is how long after it began leading a control
// plane expects its agents to be reconnecting (their Watch follows the
// new leader within seconds; the election itself takes a session TTL).
const agentsReconnectWithin = 30 * time.Second

// noAgentsInterceptor rewords errNoAgents, which tells to start an
// agent, when agents are more likely reconnecting: this control plane
// became the leader moments ago, or it knows agents that are not
// connected now. why returns the new wording, or nil to keep the error.
type noAgentsInterceptor struct {
	why func() error
}

func (i noAgentsInterceptor) reword(err error) error {
	if !errors.Is(err, errNoAgents) {
		return err
	}
	if why := i.why(); why != nil {
		return why
	}
	return err
}

func (i noAgentsInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		return resp, i.reword(err)
	}
}

func (i noAgentsInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return i.reword(next(ctx, conn))
	}
}

func (noAgentsInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// noAgentsWhy says why no agent is connected when agents are likely
// reconnecting (noAgentsInterceptor), nil otherwise.
func (cp *ControlPlane) noAgentsWhy() error {
	if cp.election != nil {
		if led, ok := cp.election.leadingFor(); ok && led < agentsReconnectWithin {
			return errorf(ErrUnavailable, "no agent is connected to this control plane yet: it became the leader %s ago and the agents are reconnecting after the leader change; retry shortly", led.Round(time.Second))
		}
	}
	known := len(cp.agents.status())
	if known == 0 {
		return nil
	}
	// How many, not which: any caller may get this (a customer's token
	// too), and the agents' names are the cell's business.
	agents := fmt.Sprintf("the %d agents it knew are", known)
	if known == 1 {
		agents = "the agent it knew is"
	}
	return errorf(ErrUnavailable, "no agent is connected to this control plane right now: %s not connected or not healthy, reconnecting after a restart or a leader change, or down; retry shortly (operators: `rivoractl agents list`)", agents)
}
