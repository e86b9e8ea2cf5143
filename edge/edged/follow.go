package edged

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/backoff"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// silentWatch is how long a WatchEdge stream may stay silent before the
// edge takes it for dead: twice the control plane's keepalive, as an
// agent's Watch.
const silentWatch = 25 * time.Second

// follow keeps a WatchEdge open on the control plane and applies every
// snapshot and delta in order, as an agent follows Watch: it reconnects
// with backoff, moving on to the next control plane when one fails (only
// the leader serves).
func (e *Edge) follow(ctx context.Context) {
	httpClient := e.upstream.HTTPClient(0) // no overall timeout: the stream is long-lived
	retry := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	quiet := false // a cut lasts: one warning, then debug lines until a watch works again
	for ctx.Err() == nil {
		url := e.upstream.URL()
		received, err := e.watch(ctx, e.client(httpClient, url))
		if ctx.Err() != nil {
			return
		}
		if nameRefusal(err) {
			e.answered(err)
		}
		if received {
			quiet = false
		}
		e.upstream.Next(url)
		wait := retry.Next()
		level := slog.LevelWarn
		var refused *applyError
		switch {
		case errors.As(err, &refused):
			// Not a cut: this edge cannot take its control plane's config,
			// and stays on the one it applied until it can (also after a
			// cut, whose lines are quiet).
			level = slog.LevelError
		case quiet:
			level = slog.LevelDebug
		}
		e.log.Log(ctx, level, "config watch ended; reconnecting (the edge keeps accepting by the config it applied; logged again once a watch works)",
			"controlplane", url, "next", e.upstream.URL(), "retry_in", wait, "applied_version", e.applied.Load(), "error", err)
		quiet = true
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// client is an EdgeService client of the control plane at url, with the
// cell token.
func (e *Edge) client(httpClient *http.Client, url string) rivorav1connect.EdgeServiceClient {
	return rivorav1connect.NewEdgeServiceClient(httpClient, url, connect.WithInterceptors(auth.Bearer(e.cfg.Keys.Cell().String())))
}

// watch follows one WatchEdge stream until it ends; received tells
// whether it brought a config. The first is the one New opened to claim
// the name, when it did (claimName), with its first message received.
func (e *Edge) watch(ctx context.Context, client rivorav1connect.EdgeServiceClient) (received bool, err error) {
	if w := e.opened.Swap(nil); w != nil {
		defer context.AfterFunc(ctx, w.cancel)()
		return e.receive(w.ctx, w.cancel, w.stream, true)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.WatchEdge(ctx, connect.NewRequest(e.watchRequest()))
	if err != nil {
		return false, err
	}
	return e.receive(ctx, cancel, stream, false)
}

// receive applies what a WatchEdge stream brings until it ends, which
// cancel (its context's) forces; primed: its first message was received
// already.
func (e *Edge) receive(ctx context.Context, cancel context.CancelFunc, stream *connect.ServerStreamForClient[rivorav1.WatchEdgeResponse], primed bool) (received bool, err error) {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	defer stream.Close()
	defer e.following.Store(false)
	alive := make(chan struct{}, 1)
	wg.Go(func() { watchSilence(ctx, cancel, alive) })
	for primed || stream.Receive() {
		primed = false
		// Every message, keepalives included: a token created since is
		// one the edge may not know.
		e.heard.Store(time.Now().UnixNano())
		select {
		case alive <- struct{}{}:
		default:
		}
		msg := stream.Msg().GetConfig()
		if msg == nil {
			continue
		}
		// Following before the config is applied: once it is (the edge
		// healthy), a publish must find the config current.
		e.following.Store(true)
		if err := e.apply(msg); err != nil {
			return received, &applyError{version: msg.GetVersion(), err: err}
		}
		if !received {
			e.log.Info("following the control plane", "version", msg.GetVersion())
			e.answered(nil) // it lets this process hold the name
		}
		received = true
	}
	if err := stream.Err(); err != nil {
		return received, err
	}
	return received, errors.New("control plane closed the stream")
}

// applyError is a config from the control plane this edge could not
// apply.
type applyError struct {
	version uint64
	err     error
}

func (e *applyError) Error() string {
	return fmt.Sprintf("apply config version %d: %v", e.version, e.err)
}

func (e *applyError) Unwrap() error { return e.err }

// heardFresh is how recently the edge must have heard from its control
// plane, over a watch that is open, for its config to be taken for
// current: a token it does not know for mistyped or revoked, a
// destination it does not know for absent, a fan-out that matches none
// of its subscriptions for one that goes nowhere. A cut is silent: the
// watch ends only silentWatch after the last message, so an open watch
// alone says little; the control plane's keepalives to an edge come every
// 2 s (controlplane edgeKeepalive), so past this the edge missed two and
// the refusal says when it last heard.
const heardFresh = 5 * time.Second

// tokensNote says, for a publisher's token the edge does not know, why it
// may be one created since the edge last heard from its control plane
// ("" while its config is fresh: staleConfig).
func (e *Edge) tokensNote() string {
	note, reached := e.staleConfig()
	switch {
	case note == "":
		return ""
	case !reached:
		return note + ", and knows only the tokens of the config it kept"
	}
	return note + ", and knows no token created after"
}

// configNote is the gateway's EdgeTarget.Stale: why the edge's config may
// lack a destination or subscription created lately ("" while fresh).
func (e *Edge) configNote() string {
	note, _ := e.staleConfig()
	return note
}

// staleConfig says since when the edge has not heard from its control
// plane, when that makes its config stale: always when it has not reached
// it since it started (reached false), else once no watch is open or the
// last message came over heardFresh ago; "" while a watch is open and
// heard from within heardFresh.
func (e *Edge) staleConfig() (note string, reached bool) {
	heard := e.heard.Load()
	if heard == 0 {
		return fmt.Sprintf("edge %s has not reached its control plane since it started at %s", e.cfg.Name, e.started.UTC().Format(time.RFC3339)), false
	}
	ago := time.Since(time.Unix(0, heard))
	if e.following.Load() && ago <= heardFresh {
		return "", true
	}
	return fmt.Sprintf("edge %s has not heard from its control plane since %s (%s ago)", e.cfg.Name, time.Unix(0, heard).UTC().Format(time.RFC3339), ago.Round(time.Second)), true
}

// watchSilence cancels a watch that has received nothing (alive) for
// silentWatch: a stream cut silently never ends by itself.
func watchSilence(ctx context.Context, cancel func(), alive <-chan struct{}) {
	t := time.NewTimer(silentWatch)
	defer t.Stop()
	for {
		select {
		case <-alive:
			t.Reset(silentWatch)
		case <-t.C:
			cancel()
			return
		case <-ctx.Done():
			return
		}
	}
}

// loadConfig applies the config kept on disk, if any (New).
func (e *Edge) loadConfig() error {
	whole, err := e.config.load()
	if err != nil || whole == nil {
		return err
	}
	if err := e.install(whole); err != nil {
		return fmt.Errorf("apply the config kept at %s: %w", e.config.path, err)
	}
	e.config.whole = whole
	e.log.Info("applied the config kept on disk", "version", whole.GetVersion(), "destinations", len(whole.GetDestinations()), "tokens", len(whole.GetTokens()))
	return nil
}

// apply folds one config message into the whole config, installs it and
// keeps it on disk. A config that cannot be kept is still applied (the
// edge accepts by it now) and logged: a restart would start from the
// one kept before.
func (e *Edge) apply(msg *rivorav1.WatchResponse) error {
	whole := e.config.fold(msg)
	if err := e.install(whole); err != nil {
		return err
	}
	if err := e.config.keep(whole); err != nil {
		e.log.Error("config applied but not kept on disk: a restart while cut off from the control plane would use an older one", "version", whole.GetVersion(), "error", err)
	}
	return nil
}

// install makes whole (a snapshot) the config the gateway accepts by:
// API tokens first, then subscriptions and event types, destinations,
// and the partition count, which opens ingest.
func (e *Edge) install(whole *rivorav1.WatchResponse) error {
	// A revoked token is refused from here on, whatever of the rest fails
	// to apply.
	e.cfg.Keys.SetTokens(whole.GetTokens())
	// One the edge cannot load (a filter a newer control plane takes)
	// is installed unusable, not an error: a filter that did not load
	// fails every event (the subscription gets none of the edge's, each
	// counted as a filter error), and the rest of the config applies.
	// The edge gets no secrets, so none fails to load here.
	subs := map[string]error{}
	for _, s := range e.subs.Replace(time.Now(), unsignedSubscriptions(whole.GetSubscriptions())) {
		subs[s.ID] = s.Unusable
	}
	e.unusableSubs = e.logUnusable("subscription", e.unusableSubs, subs,
		"subscription config unusable on this edge; its filter fails every event until a config of it loads")
	if err := e.catalogue.Replace(whole.GetEventTypes(), whole.GetStrictEventTypes()); err != nil {
		return err
	}
	// One the edge cannot build (its feed still has a server CA, say)
	// is registered unusable, not an error: its events are accepted and
	// forwarded as any other's (the edge never delivers), and the rest
	// of the config applies.
	dests := map[string]error{}
	for _, d := range e.registry.Replace(time.Now(), unsigned(whole.GetDestinations())) {
		dests[d.ID] = d.Unusable
	}
	e.unusableDests = e.logUnusable("destination", e.unusableDests, dests,
		"destination config unusable on this edge; its events are still accepted and forwarded to the cell")
	if n := whole.GetPartitionCount(); n > 0 {
		e.partitions.n.Store(int64(n))
	}
	e.applied.Store(whole.GetVersion())
	e.warnWindows()
	return nil
}

// logUnusable logs what changed of the unusable destinations or
// subscriptions (kind) between the last config, was (the unusable ones'
// errors by id), and this one, installed (every one's error, nil: usable):
// a warning for one that became unusable or whose error changed, info
// for one usable again. Every config message is a whole snapshot, so the
// same error config after config says nothing more; one deleted is
// forgotten. It returns this config's unusable ones, for the next.
func (e *Edge) logUnusable(kind string, was map[string]string, installed map[string]error, warn string) map[string]string {
	now := map[string]string{}
	for id, err := range installed {
		_, wasUnusable := was[id]
		switch {
		case err != nil:
			now[id] = err.Error()
			if !wasUnusable || was[id] != now[id] {
				e.log.Warn(warn, kind, id, "error", err)
			}
		case wasUnusable:
			e.log.Info(kind+" config usable again on this edge", kind, id)
		}
	}
	return now
}

// warnWindows warns, once per destination and window, when
// --buffer-max-age is shorter than a destination's window: in a cut
// longer than the max age the edge refuses that destination's new
// events, though the cell would have kept them for the whole window.
func (e *Edge) warnWindows() {
	maxAge := e.cfg.BufferMaxAge
	if maxAge <= 0 {
		return
	}
	for _, d := range e.registry.All() {
		window := d.Retry.Window
		if window <= maxAge || e.warnings[d.ID] == window {
			continue
		}
		e.warnings[d.ID] = window
		e.log.Warn("--buffer-max-age is shorter than a destination's window: in a cut longer than the max age this edge refuses its new events (resource_exhausted) while the cell would have retried them for the whole window; raise --buffer-max-age (and --max-buffer) to cover the window",
			"destination", d.ID, "window", window, "buffer_max_age", maxAge)
	}
}
