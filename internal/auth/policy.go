package auth

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

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
	// Request checks a publisher's request against its customers; Answer
	// checks what the RPC answered. Only set where Roles has publisher.
	Request func(p *Principal, req any) error
	Answer  func(p *Principal, resp any) error
}

var (
	admin     = rivorav1.Role_ROLE_ADMIN
	operator  = rivorav1.Role_ROLE_OPERATOR
	viewer    = rivorav1.Role_ROLE_VIEWER
	publisher = rivorav1.Role_ROLE_PUBLISHER

	cell     = Rule{Cell: true}
	adminsOf = Rule{Roles: []rivorav1.Role{admin}}
	steer    = Rule{Roles: []rivorav1.Role{admin, operator}}
	read     = Rule{Roles: []rivorav1.Role{admin, operator, viewer}}
	anyToken = Rule{Roles: []rivorav1.Role{admin, operator, viewer, publisher}, CellToo: true}
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
	rivorav1connect.AdminServiceCreateDestinationProcedure:    adminsOf,
	rivorav1connect.AdminServiceUpdateDestinationProcedure:    adminsOf,
	rivorav1connect.AdminServiceDeleteDestinationProcedure:    adminsOf,
	rivorav1connect.AdminServiceGetDestinationProcedure:       read,
	rivorav1connect.AdminServiceListDestinationsProcedure:     read,
	rivorav1connect.AdminServiceGetDestinationHealthProcedure: read,
	rivorav1connect.AdminServiceGetLimitsProcedure:            read,
	rivorav1connect.AdminServiceDiffLimitsProcedure:           read,
	rivorav1connect.AdminServiceListAuditProcedure:            read,
	rivorav1connect.AdminServiceGetConfigStatusProcedure:      read,
	rivorav1connect.AdminServiceSetPriorityProcedure:          steer,
	rivorav1connect.AdminServicePauseDestinationProcedure:     steer,
	rivorav1connect.AdminServiceResumeDestinationProcedure:    steer,
	rivorav1connect.AdminServiceSetLimitsOverrideProcedure:    steer,
	rivorav1connect.AdminServiceClearLimitsOverrideProcedure:  steer,

	// Secret rotation is an admin's, like update.
	rivorav1connect.AdminServiceRotateDestinationSecretProcedure: adminsOf,

	rivorav1connect.TokenServiceCreateTokenProcedure: adminsOf,
	rivorav1connect.TokenServiceListTokensProcedure:  adminsOf,
	rivorav1connect.TokenServiceRevokeTokenProcedure: adminsOf,
	rivorav1connect.TokenServiceWhoAmIProcedure:      {Roles: []rivorav1.Role{admin, operator, viewer, publisher}},

	rivorav1connect.IngestServicePublishProcedure: {
		Roles:   []rivorav1.Role{admin, publisher},
		CellToo: true,
		Request: func(p *Principal, req any) error { return mayActFor(p, req.(*rivorav1.PublishRequest).GetCustomerId()) },
	},
	rivorav1connect.IngestServicePublishBatchProcedure: {
		Roles: []rivorav1.Role{admin, publisher},
		Request: func(p *Principal, req any) error {
			for _, ev := range req.(*rivorav1.PublishBatchRequest).GetEvents() {
				if err := mayActFor(p, ev.GetCustomerId()); err != nil {
					return err
				}
			}
			return nil
		},
	},

	rivorav1connect.EventServiceGetEventProcedure: {
		Roles: []rivorav1.Role{admin, operator, viewer, publisher},
		Answer: func(p *Principal, resp any) error {
			ev := resp.(*rivorav1.GetEventResponse)
			if !p.MayActFor(ev.GetCustomerId()) {
				return EventNotFound(ev.GetEventId())
			}
			return nil
		},
	},
	rivorav1connect.EventServiceListEventsProcedure: {
		Roles: []rivorav1.Role{admin, operator, viewer, publisher},
		Request: func(p *Principal, req any) error {
			return filterFor(p, req.(*rivorav1.ListEventsRequest).GetCustomerId())
		},
	},
	rivorav1connect.EventServiceResendEventProcedure: steer,

	rivorav1connect.LaneServiceListLanesProcedure:    read,
	rivorav1connect.LaneServiceSkipLaneHeadProcedure: steer,

	rivorav1connect.ArchiveServiceListDeadLettersProcedure: {
		Roles:   []rivorav1.Role{admin, operator, viewer, publisher},
		CellToo: true,
		Request: func(p *Principal, req any) error {
			return filterFor(p, req.(*rivorav1.ListDeadLettersRequest).GetFilter().GetCustomerId())
		},
	},
	rivorav1connect.ArchiveServiceGetDeadLetterProcedure: {
		Roles: []rivorav1.Role{admin, operator, viewer, publisher},
		Answer: func(p *Principal, resp any) error {
			ev := resp.(*rivorav1.GetDeadLetterResponse).GetDeadLetter().GetEvent()
			if !p.MayActFor(ev.GetCustomerId()) {
				return DeadLetterNotFound(ev.GetEventId())
			}
			return nil
		},
	},
	rivorav1connect.ArchiveServiceDeadLetterStatsProcedure: read,
	rivorav1connect.ArchiveServiceReplayProcedure:          steer,

	// gRPC server reflection (internal/introspect) describes the API to
	// any valid token, cell token included; the gRPC health check is
	// open to all, like /healthz, and not behind this interceptor.
	reflectV1:      anyToken,
	reflectV1Alpha: anyToken,

	// The cell's own services: agents follow and report to the control
	// plane; the control plane asks agents about their partitions.
	rivorav1connect.AgentServiceWatchProcedure:              cell,
	rivorav1connect.AgentServiceReportAppliedProcedure:      cell,
	rivorav1connect.AgentServiceReportOwnedProcedure:        cell,
	rivorav1connect.AgentServiceReportGoneProcedure:         cell,
	rivorav1connect.AgentServiceRecordAuditProcedure:        cell,
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

// filterFor checks a list's customer filter: a scoped publisher must name
// one of its customers.
func filterFor(p *Principal, customer string) error {
	if customer == "" && p.Scoped() {
		return connect.NewError(connect.CodePermissionDenied, errors.New("a publisher token lists only its own customers' events: name one with --customer (customer_id)"))
	}
	return mayActFor(p, customer)
}
