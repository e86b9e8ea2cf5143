// Package api is the agent's Connect surface: it registers the ingest
// and archive services (ingest.Gateway, deadletters.Service) and serves
// the events, lanes and partitions services, one file each, mapping a
// request to the domain call and its result to the response. Handlers
// return errors tagged with errkind kinds; errkind.Interceptor, installed
// outermost beside auth and bounds, turns them into Connect codes.
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/deadletters"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/partitions"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/agent/upstream"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/bounds"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// Config is what the services answer from.
type Config struct {
	// Keys are what every call is checked against.
	Keys        *auth.Keys
	Gateway     *ingest.Gateway
	DeadLetters *deadletters.Service
	Scheduler   *scheduler.Scheduler
	Registry    *destinations.Registry
	// Subscriptions are the cell's subscriptions (an event's window
	// moves on while its subscription is paused).
	Subscriptions *subscriptions.Table
	History       *history.History
	Partitions    *partitions.Set
	// Upstream records the operator actions the services carry out in
	// the control plane's audit log.
	Upstream *upstream.Planes
	Log      *slog.Logger
}

// Services are the services Handle registers, by full name.
var Services = []string{
	rivorav1connect.IngestServiceName, rivorav1connect.EventServiceName, rivorav1connect.LaneServiceName,
	rivorav1connect.PartitionServiceName, rivorav1connect.ArchiveServiceName,
}

// internal is the kind of an error that must not invite a retry (an
// action that happened, but whose audit failed): Internal.
var internal = errkind.New("internal error", connect.CodeInternal)

// server holds what the services share.
type server struct {
	sched       *scheduler.Scheduler
	registry    *destinations.Registry
	subs        *subscriptions.Table
	history     *history.History
	gateway     *ingest.Gateway
	deadLetters *deadletters.Service
	parts       *partitions.Set
	upstream    *upstream.Planes
	log         *slog.Logger
}

// Handle registers the agent's Connect services (ingest, events, lanes,
// partitions, archive) on mux, each behind the error mapping
// (errkind.Interceptor, outermost) and the auth interceptor: every call
// is checked against auth.Policies with cfg.Keys. Every request is
// bounded (internal/bounds): its strings, and Publish to one event of
// MaxPayload, PublishBatch to the batch limits, the rest to
// bounds.DefaultMessage, after decompression and on the wire.
func Handle(mux *http.ServeMux, cfg Config, opts ...connect.HandlerOption) {
	HandleIngest(mux, cfg.Keys, cfg.Gateway, opts...)
	opts = append([]connect.HandlerOption{connect.WithInterceptors(errkind.Interceptor(), auth.NewInterceptor(cfg.Keys), bounds.Interceptor())}, opts...)
	// The door checks the caller from the headers, before a body is read.
	guarded := func(limit int, h http.Handler) http.Handler {
		return auth.Door(cfg.Keys, nil, bounds.Handler(limit, h))
	}
	opts = append(opts, bounds.ReadMax(bounds.DefaultMessage))
	handle := func(path string, h http.Handler) { mux.Handle(path, guarded(bounds.DefaultMessage, h)) }
	srv := &server{
		sched: cfg.Scheduler, registry: cfg.Registry, subs: cfg.Subscriptions, history: cfg.History, gateway: cfg.Gateway,
		deadLetters: cfg.DeadLetters, parts: cfg.Partitions, upstream: cfg.Upstream, log: cfg.Log,
	}
	handle(rivorav1connect.NewEventServiceHandler(eventAnswers{&eventService{srv}}, opts...))
	handle(rivorav1connect.NewLaneServiceHandler(&laneService{srv}, opts...))
	handle(rivorav1connect.NewPartitionServiceHandler(&partitionService{srv}, opts...))
	handle(rivorav1connect.NewArchiveServiceHandler(&archiveService{Service: cfg.DeadLetters, srv: srv}, opts...))
}

// HandleIngest registers IngestService (Publish, PublishBatch) of
// gateway on mux, as Handle does for an agent (an edge serves it alone):
// behind the door and the auth interceptor (keys), the error mapping and
// the bounds, Publish to one event of MaxPayload and PublishBatch to the
// batch limits.
func HandleIngest(mux *http.ServeMux, keys *auth.Keys, gateway *ingest.Gateway, opts ...connect.HandlerOption) {
	opts = append([]connect.HandlerOption{connect.WithInterceptors(errkind.Interceptor(), auth.NewInterceptor(keys), bounds.Interceptor())}, opts...)
	// Ingest answers are event ids: compressing them costs more than it
	// saves on the networks agents sit on.
	ingestOpts := append([]connect.HandlerOption{connect.WithCompressMinBytes(1 << 20)}, opts...)
	publish, batch := gateway.RequestLimits()
	path, batchHandler := rivorav1connect.NewIngestServiceHandler(gateway, slices.Concat(ingestOpts, []connect.HandlerOption{bounds.ReadMax(batch)})...)
	_, publishHandler := rivorav1connect.NewIngestServiceHandler(gateway, slices.Concat(ingestOpts, []connect.HandlerOption{bounds.ReadMax(publish)})...)
	// The door checks the caller from the headers, before a body is read.
	mux.Handle(path, auth.Door(keys, nil, bounds.Handler(batch, batchHandler)))
	mux.Handle(rivorav1connect.IngestServicePublishProcedure, auth.Door(keys, nil, bounds.Handler(publish, publishHandler)))
}

// ownedDestination returns the partition of a destination this agent
// serves, or the error to answer: no config yet, unknown destination, or
// one whose partition another agent owns (then only the control plane, or
// that agent, knows its pending events). To the caller of ctx's call
// another customer's own destination is unknown when the caller is
// limited to other customers (auth.OwnerHidden): the answer is word for
// word an absent id's, so that it learns neither that the destination
// exists nor whose it is.
func (s *server) ownedDestination(ctx context.Context, destinationID string) (int, error) {
	n := s.parts.Count()
	if n == 0 {
		return 0, errkind.Errorf(errkind.Unavailable, "this agent has no configuration from the control plane yet")
	}
	d, known := s.registry.Get(destinationID)
	hidden := known && auth.OwnerHidden(ctx, d.OwnerCustomer)
	if hidden || (!known && s.sched.Pending(destinationID) == 0) {
		return 0, errkind.Errorf(errkind.NotFound, "destination %s: %w (see rivoractl destinations list)", destinationID, errkind.NotFound)
	}
	p := lanes.Partition(destinationID, n)
	if s.parts.Partition(p) == nil {
		return 0, errkind.Errorf(errkind.NotFound, "destination %s: its partition %d is %w on this agent; ask the control plane, or the agent that owns it (rivoractl agents)", destinationID, p, errNotOwnedHere)
	}
	return p, nil
}

var errNotOwnedHere = errors.New("not owned")

// unknownSubscription is the answer to a listing that keeps subscription
// id's items and found none, for a caller limited to some customers
// (Principal.Scoped): when the subscription is another customer's, or
// not in the cell's table, not_found in the control plane's words for an
// absent id, so that the answer tells neither that it exists nor whose
// it is. nil (the empty list stands) for no id, one of the caller's
// customers' subscriptions, or an unscoped caller (an operator may list
// a deleted subscription's dead letters before the archive has them).
// Only an empty listing is refused: a deleted subscription's history and
// dead letters are still listed; until they are archived, its customer
// is answered not_found.
func (s *server) unknownSubscription(ctx context.Context, id string) error {
	p := auth.FromContext(ctx)
	if id == "" || p == nil || !p.Scoped() {
		return nil
	}
	if sub, ok := s.subs.Get(id); ok && p.MayActFor(sub.Customer) {
		return nil
	}
	return errkind.Errorf(errkind.NotFound, "subscription %q does not exist; see `rivoractl subscriptions list`", id)
}

// A lane walk rests listRest after each listBusy of walking, so that
// ListLanes (or ListEvents) calls back to back take at most about a third
// of a core from delivery; 1M lanes walk in some 15 ms of CPU, so a call
// over them takes some 50–100 ms (go run ./e2e/bench lanes).
const (
	listBusy = time.Millisecond
	listRest = 2 * time.Millisecond
)

// laneWalker is a scheduler walk over a destination's lanes that its
// caller paces: a *scheduler.LaneWalk (ListLanes) or a
// *scheduler.PendingWalk (pending events for ListEvents).
type laneWalker interface {
	Step() bool
	Close()
}

// walkPaced runs a lane walk to its end, resting between chunks; on an
// error (ctx ended) the walk is closed and its result is not whole.
func walkPaced(ctx context.Context, w laneWalker) error {
	defer w.Close()
	busy := time.Now()
	for w.Step() {
		if time.Since(busy) < listBusy {
			continue
		}
		select {
		case <-time.After(listRest):
		case <-ctx.Done():
			return ctx.Err()
		}
		busy = time.Now()
	}
	return nil
}
