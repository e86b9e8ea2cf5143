package auth

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	"github.com/rivora/rivora/internal/reserved"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// Rule is who may call one RPC.
type Rule struct {
	// Cell: only the cell token (agents and control planes); API tokens,
	// admin included, are refused.
	Cell bool
	// CellToo: the cell token is let in too, besides Roles: the control
	// plane's own calls to agents (operator notices are published through
	// an agent; dead letters are read for them).
	CellToo bool
	// Roles may call it (API tokens).
	Roles []rivorav1.Role
	// Request checks every caller's request: a scoped caller's
	// (Principal.Scoped) against its customers, and what a role may ask
	// beyond the call itself (a viewer's replay only as a dry run). It
	// may fill in what the principal decides: a list's customer, for a
	// caller scoped to exactly one (filterFor); the handler sees the
	// request so filled.
	// Answer checks what the RPC answered to a scoped caller. On a server
	// stream only Request is allowed: it checks the one request.
	Request func(p *Principal, req any) error
	Answer  func(p *Principal, resp any) error
	// Owned: a customer token is let in, and the handler shows and
	// changes only what its customers own (their subscriptions, the
	// destinations they own; a list keeps only those), answering for
	// anything else exactly as for an absent id. The control plane's
	// handlers scope by the caller's principal (FromContext).
	Owned bool
}

var (
	admin     = rivorav1.Role_ROLE_ADMIN
	operator  = rivorav1.Role_ROLE_OPERATOR
	viewer    = rivorav1.Role_ROLE_VIEWER
	publisher = rivorav1.Role_ROLE_PUBLISHER
	customer  = rivorav1.Role_ROLE_CUSTOMER

	cell     = Rule{Cell: true}
	adminsOf = Rule{Roles: []rivorav1.Role{admin}}
	steer    = Rule{Roles: []rivorav1.Role{admin, operator}}
	read     = Rule{Roles: []rivorav1.Role{admin, operator, viewer}}
	everyone = Rule{Roles: []rivorav1.Role{admin, operator, viewer, publisher, customer}}
	anyToken = Rule{Roles: []rivorav1.Role{admin, operator, viewer, publisher, customer}, CellToo: true}

	// A customer token on its own: what it owns (Rule.Owned) as admins
	// (ownAdmin), as admins and operators (ownSteer) or as every reader
	// (ownRead) do on everything.
	ownAdmin = Rule{Roles: []rivorav1.Role{admin, customer}, Owned: true}
	ownSteer = Rule{Roles: []rivorav1.Role{admin, operator, customer}, Owned: true}
	ownRead  = Rule{Roles: []rivorav1.Role{admin, operator, viewer, customer}, Owned: true}
)

// The reflection services' one method each.
const (
	reflectV1      = "/" + grpcreflect.ReflectV1ServiceName + "/ServerReflectionInfo"
	reflectV1Alpha = "/" + grpcreflect.ReflectV1AlphaServiceName + "/ServerReflectionInfo"
)

// Policies is every RPC's rule, by Connect procedure. An RPC not named
// here is refused (PermissionDenied), and TestEveryRPCHasAPolicy fails.
var Policies = map[string]Rule{
	// Destinations: create, update (URL, secret) and delete are admin's;
	// steering is the operator's too; reads are everyone's but publishers'.
	// A customer token creates, reads and deletes the destinations its
	// customers own (and rotates their secret); never their limits,
	// priorities or pauses.
	rivorav1connect.AdminServiceCreateDestinationProcedure: {
		Roles: []rivorav1.Role{admin, customer}, Owned: true,
		Request: func(p *Principal, req any) error { return ownDestination(p, req.(*rivorav1.CreateDestinationRequest)) },
	},
	rivorav1connect.AdminServiceUpdateDestinationProcedure:    adminsOf,
	rivorav1connect.AdminServiceDeleteDestinationProcedure:    ownAdmin,
	rivorav1connect.AdminServiceGetDestinationProcedure:       ownRead,
	rivorav1connect.AdminServiceListDestinationsProcedure:     ownRead,
	rivorav1connect.AdminServiceGetDestinationHealthProcedure: ownRead,
	rivorav1connect.AdminServiceGetLimitsProcedure:            read,
	rivorav1connect.AdminServiceDiffLimitsProcedure:           read,
	rivorav1connect.AdminServiceListAuditProcedure:            read,
	// A customer token sees only whether the agents applied a change
	// (its --wait), not who they are or what they own.
	rivorav1connect.AdminServiceGetConfigStatusProcedure:   ownRead,
	rivorav1connect.AdminServiceListEdgesProcedure:         read,
	rivorav1connect.AdminServiceGetEdgeProcedure:           read,
	rivorav1connect.AdminServiceRemoveEdgeProcedure:        adminsOf,
	rivorav1connect.AdminServiceSetPriorityProcedure:       steer,
	rivorav1connect.AdminServicePauseDestinationProcedure:  steer,
	rivorav1connect.AdminServiceResumeDestinationProcedure: steer,
	// A dry run changes nothing (no version, no audit): a viewer may
	// preview what an override would give, not set one.
	rivorav1connect.AdminServiceSetLimitsOverrideProcedure: {
		Roles: read.Roles,
		Request: func(p *Principal, req any) error {
			if p.Role == viewer && !req.(*rivorav1.SetLimitsOverrideRequest).GetDryRun() {
				return connect.NewError(connect.CodePermissionDenied, errors.New("a viewer token may preview a limits override (--dry-run), not set one: setting limits needs an admin or operator token"))
			}
			return nil
		},
	},
	rivorav1connect.AdminServiceClearLimitsOverrideProcedure: steer,

	// Secret rotation is an admin's, like update (and a customer's, of
	// its own destinations).
	rivorav1connect.AdminServiceRotateDestinationSecretProcedure: ownAdmin,

	// Verifying a delivery against a destination's secrets reveals no
	// secret (yes or no, and a fingerprint): whoever may read the
	// destination may ask (`rivoractl listen --destination`).
	rivorav1connect.AdminServiceVerifyDeliveryProcedure: ownRead,

	rivorav1connect.TokenServiceCreateTokenProcedure: adminsOf,
	rivorav1connect.TokenServiceListTokensProcedure:  adminsOf,
	rivorav1connect.TokenServiceRevokeTokenProcedure: adminsOf,
	rivorav1connect.TokenServiceWhoAmIProcedure:      everyone,

	// Subscriptions: admins and operators manage every one, viewers read
	// them, a customer token manages its customers' (Owned: another
	// customer's answers not_found, as an absent id does).
	rivorav1connect.SubscriptionServiceCreateSubscriptionProcedure: {
		Roles: ownSteer.Roles, Owned: true,
		Request: func(p *Principal, req any) error {
			return mayActFor(p, req.(*rivorav1.CreateSubscriptionRequest).GetCustomerId())
		},
	},
	rivorav1connect.SubscriptionServiceGetSubscriptionProcedure: ownRead,
	rivorav1connect.SubscriptionServiceListSubscriptionsProcedure: {
		Roles: ownRead.Roles, Owned: true,
		Request: func(p *Principal, req any) error {
			if c := req.(*rivorav1.ListSubscriptionsRequest).GetCustomerId(); c != "" {
				return mayActFor(p, c)
			}
			return nil
		},
	},
	rivorav1connect.SubscriptionServiceUpdateSubscriptionProcedure:       ownSteer,
	rivorav1connect.SubscriptionServicePauseSubscriptionProcedure:        ownSteer,
	rivorav1connect.SubscriptionServiceResumeSubscriptionProcedure:       ownSteer,
	rivorav1connect.SubscriptionServiceRotateSubscriptionSecretProcedure: ownSteer,
	rivorav1connect.SubscriptionServiceDeleteSubscriptionProcedure:       ownSteer,

	// The event-type catalogue: everyone reads it (publishers publish
	// its types, customers subscribe to them), admins write it.
	rivorav1connect.EventTypeServiceCreateEventTypeProcedure:    adminsOf,
	rivorav1connect.EventTypeServiceUpdateEventTypeProcedure:    adminsOf,
	rivorav1connect.EventTypeServiceDeprecateEventTypeProcedure: adminsOf,
	rivorav1connect.EventTypeServiceGetEventTypeProcedure:       everyone,
	rivorav1connect.EventTypeServiceListEventTypesProcedure:     everyone,

	rivorav1connect.IngestServicePublishProcedure: {
		Roles:   []rivorav1.Role{admin, publisher, customer},
		CellToo: true,
		Request: func(p *Principal, req any) error {
			m := req.(*rivorav1.PublishRequest)
			if err := publishesTo(p, m.GetDestinationId()); err != nil {
				return err
			}
			return mayActFor(p, m.GetCustomerId())
		},
	},
	rivorav1connect.IngestServicePublishBatchProcedure: {
		Roles: []rivorav1.Role{admin, publisher, customer},
		Request: func(p *Principal, req any) error {
			for _, ev := range req.(*rivorav1.PublishBatchRequest).GetEvents() {
				if err := publishesTo(p, ev.GetDestinationId()); err != nil {
					return err
				}
				if err := mayActFor(p, ev.GetCustomerId()); err != nil {
					return err
				}
			}
			return nil
		},
	},

	rivorav1connect.EventServiceGetEventProcedure: {
		Roles: []rivorav1.Role{admin, operator, viewer, publisher, customer},
		Answer: func(p *Principal, resp any) error {
			ev := resp.(*rivorav1.GetEventResponse)
			if !p.MayActFor(ev.GetCustomerId()) {
				return EventNotFound(ev.GetEventId())
			}
			return nil
		},
	},
	rivorav1connect.EventServiceListEventsProcedure: {
		Roles: []rivorav1.Role{admin, operator, viewer, publisher, customer},
		Request: func(p *Principal, req any) error {
			return filterFor(p, &req.(*rivorav1.ListEventsRequest).CustomerId)
		},
	},
	// ResendEvent: a customer token resends its own events only. The
	// request names only the event id, so the handler, once it has the
	// event, checks CallerMayActFor and answers EventNotFound otherwise
	// (the control plane's router does; so must the agent's handler).
	rivorav1connect.EventServiceResendEventProcedure: {Roles: []rivorav1.Role{admin, operator, customer}, Owned: true},

	rivorav1connect.LaneServiceListLanesProcedure: {
		Roles: []rivorav1.Role{admin, operator, viewer, customer},
		Request: func(p *Principal, req any) error {
			return filterFor(p, &req.(*rivorav1.ListLanesRequest).CustomerId)
		},
	},
	rivorav1connect.LaneServiceSkipLaneHeadProcedure: steer,

	rivorav1connect.ArchiveServiceListDeadLettersProcedure: {
		Roles:   []rivorav1.Role{admin, operator, viewer, publisher, customer},
		CellToo: true,
		Request: func(p *Principal, req any) error {
			return deadLetterFilterFor(p, &req.(*rivorav1.ListDeadLettersRequest).Filter)
		},
	},
	rivorav1connect.ArchiveServiceGetDeadLetterProcedure: {
		Roles: []rivorav1.Role{admin, operator, viewer, publisher, customer},
		Answer: func(p *Principal, resp any) error {
			ev := resp.(*rivorav1.GetDeadLetterResponse).GetDeadLetter().GetEvent()
			if !p.MayActFor(ev.GetCustomerId()) {
				return DeadLetterNotFound(ev.GetEventId())
			}
			return nil
		},
	},
	rivorav1connect.ArchiveServiceDeadLetterStatsProcedure: {
		Roles: []rivorav1.Role{admin, operator, viewer, customer},
		Request: func(p *Principal, req any) error {
			return deadLetterFilterFor(p, &req.(*rivorav1.DeadLetterStatsRequest).Filter)
		},
	},
	// Replay streams; its one request is checked (a customer replays only
	// with a filter naming one of its customers).
	// A dry run only counts what a replay would send: a viewer may.
	rivorav1connect.ArchiveServiceReplayProcedure: {
		Roles: []rivorav1.Role{admin, operator, viewer, customer},
		Request: func(p *Principal, req any) error {
			m := req.(*rivorav1.ReplayRequest)
			if p.Role == viewer && !m.GetDryRun() {
				return connect.NewError(connect.CodePermissionDenied, errors.New("a viewer token may count what a replay would send (--dry-run), not replay: replaying needs an admin or operator token"))
			}
			return deadLetterFilterFor(p, &m.Filter)
		},
	},

	// gRPC server reflection (internal/introspect) describes the API to
	// any valid token, cell token included; the gRPC health check is
	// open to all, like /healthz, and not behind this interceptor.
	reflectV1:      anyToken,
	reflectV1Alpha: anyToken,

	// The cell's own services: agents follow and report to the control
	// plane; the control plane asks agents about their partitions.
	rivorav1connect.AgentServiceWatchProcedure:         cell,
	rivorav1connect.AgentServiceReportAppliedProcedure: cell,
	rivorav1connect.AgentServiceReportOwnedProcedure:   cell,
	rivorav1connect.AgentServiceReportGoneProcedure:    cell,
	rivorav1connect.AgentServiceReportLeavingProcedure: cell,
	rivorav1connect.AgentServiceRecordAuditProcedure:   cell,
	// Edges follow the control plane with the cell token, as agents.
	rivorav1connect.EdgeServiceWatchEdgeProcedure:           cell,
	rivorav1connect.EdgeServiceReportEdgeProcedure:          cell,
	rivorav1connect.PartitionServiceCountPendingProcedure:   cell,
	rivorav1connect.PartitionServiceArchivePendingProcedure: cell,
	rivorav1connect.PartitionServiceGetHealthProcedure:      cell,
}

func mayActFor(p *Principal, customer string) error {
	if p.MayActFor(customer) {
		return nil
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("token %s (%s) may not act for customer %q: it is scoped to %v", p.TokenID, p.Name, customer, p.Customers))
}

// publishesTo checks a publish's destination: the reserved operator
// destination takes the cell's notices only.
func publishesTo(p *Principal, destination string) error {
	if destination == reserved.OperatorDestination && !p.Cell {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("destination %q is reserved for operator notices: only Rivora's control plane publishes to it", destination))
	}
	return nil
}

// filterFor checks a list's customer filter, *customer: a scoped caller
// must name one of its customers. One scoped to exactly one customer
// names it without saying so: *customer is set to it, so the handler
// lists that customer's (the same as naming it; a caller of several
// customers still has to choose).
func filterFor(p *Principal, customer *string) error {
	if *customer == "" && p.Scoped() {
		if len(p.Customers) != 1 || !p.MayActFor(p.Customers[0]) {
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("a %s token reaches only its own customers' events: name one with --customer (customer_id)", RoleName(p.Role)))
		}
		*customer = p.Customers[0]
	}
	return mayActFor(p, *customer)
}

// deadLetterFilterFor is filterFor of a dead-letter filter, *f, which may
// be absent (nil: every customer's).
func deadLetterFilterFor(p *Principal, f **rivorav1.DeadLetterFilter) error {
	if *f == nil {
		if !p.Scoped() {
			return nil
		}
		*f = &rivorav1.DeadLetterFilter{}
	}
	return filterFor(p, &(*f).CustomerId)
}

// ownDestination checks a customer token's CreateDestination: the
// destination is owned by one of its customers and keeps the default
// limits (operators set limits).
func ownDestination(p *Principal, m *rivorav1.CreateDestinationRequest) error {
	if !p.SelfService() {
		return nil
	}
	if m.GetOwnerCustomer() == "" {
		return connect.NewError(connect.CodePermissionDenied, errors.New("a customer token creates only destinations its customer owns: set owner_customer (--owner-customer) to one of the token's customers"))
	}
	if err := mayActFor(p, m.GetOwnerCustomer()); err != nil {
		return err
	}
	if m.GetLimits() != nil {
		return connect.NewError(connect.CodePermissionDenied, errors.New("a customer token's destinations get the default limits: leave limits unset (an operator may change them)"))
	}
	return nil
}
