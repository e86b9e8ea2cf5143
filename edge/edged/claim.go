package edged

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/internal/backoff"
	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// An edge's name is one running edge process's at a time. Two processes
// started under one name would both join the cell as the same leaf node
// (the name is the NATS server's and the JetStream domain's): NATS keeps
// one leaf connection per server name and drops the older for the newer,
// each reconnects within a second, and the link, the cell's source of the
// buffer and the control plane's view of the edge flip between them. So
// the edge's NATS server starts with its leaf connection held
// (natsd.Config.LeafHeld), and joins the cell only once the control plane
// has confirmed the name is this process's: it answers a WatchEdge or a
// ReportEdge carrying this process's instance id, and refuses them
// (errkind.EdgeNameInUseReason) while another instance's last call is
// at most nameLapse old. The id is the data dir's (dataDirInstance), so
// a process restarted on it holds the name at once, and an edge on
// another data dir under the name is refused. The cell's side
// of the leaf connection cannot be the judge: by the time it sees the
// second connection, NATS has dropped the first.
//
// New asks once, before the edge serves: refused, it waits up to
// nameWait (the other process may be this edge's previous one on a data
// dir lost since, whose claim lapses nameLapse after its last report)
// and then fails, naming
// the name and what to do; the control plane out of reach, it starts
// with its leaf held, accepting events into its buffer, and joins the
// cell when a watch or report is answered; refused then, it takes no
// more events, and fails after nameWait as New would, saying what its
// buffer holds unforwarded (stranded). A process refused after it
// joined (another one took the name while this one's calls did not reach
// the control plane for over nameLapse) leaves the cell and stops.

const (
	// nameLapse is how long after an edge process's last call the control
	// plane keeps its name (controlplane's edgeStaleAfter: three report
	// intervals).
	nameLapse = 3 * reportEvery
	// nameWait is how long a process refused its name waits for it before
	// it gives up: a little over nameLapse, so that an edge restarted
	// right after its previous process stopped (or was killed) gets it.
	nameWait = nameLapse + 2*reportEvery
	// claimTimeout bounds New's wait for an answer from its control
	// planes (each asked once, in turn): started cut off from them, an
	// edge starts after this.
	claimTimeout = 2 * time.Second
	// claimRetry is how often New asks again while refused.
	claimRetry = time.Second
)

// nameClaim is this edge process's hold on its name, as the control
// plane last answered, and its consequence: the leaf connection to the
// cell, held until the name is confirmed, left when it is lost.
type nameClaim struct {
	name string
	nats *natsd.Server
	log  *slog.Logger
	// lost receives the error Run stops with once the name is lost for
	// good (capacity 1: the first is enough).
	lost chan error

	mu sync.Mutex
	// joined: the name was confirmed, and the leaf connection released.
	joined bool
	// refusedSince is when the refusals that have come since the last
	// confirmation began (zero: none).
	refusedSince time.Time
	// refusal is what publishes are answered while the name is refused
	// (nil: they are taken): an edge started cut off from its control
	// plane, which took events from its kept config, takes no more once
	// it hears that another edge holds its name, for they would stay in
	// its buffer (a data dir's buffer is forwarded under its name only).
	refusal error
}

func newNameClaim(name string, nats *natsd.Server, log *slog.Logger) *nameClaim {
	return &nameClaim{name: name, nats: nats, log: log, lost: make(chan error, 1)}
}

// confirmed notes that the control plane let this process hold its name:
// it joins the cell, the first time.
func (c *nameClaim) confirmed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refusedSince, c.refusal = time.Time{}, nil
	if c.joined {
		return
	}
	if err := c.nats.JoinLeaf(); err != nil {
		c.log.Error("cannot open the leaf connection to the cell; trying again at the control plane's next answer", "error", err)
		return
	}
	c.joined = true
	c.log.Info("the control plane confirmed this edge's name: joining the cell")
}

// refused notes the control plane's refusal of the name (err, which
// nameRefusal tells) at now, and returns the error to stop with, or nil
// to wait on: a process that joined the cell leaves it at once and
// stops; one that has not waits up to nameWait from the first refusal.
func (c *nameClaim) refused(err error, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refusal = errkind.WithInfo(errkind.Errorf(errkind.Unavailable, "edge %s takes no events: its control plane says another running edge has its name (%v); publish to that one", c.name, err),
		errkind.EdgeNameInUseReason, map[string]string{"edge": c.name})
	if c.joined {
		if lerr := c.nats.LeaveLeaf(); lerr != nil {
			c.log.Error("cannot close the leaf connection to the cell", "error", lerr)
		}
		c.joined = false
		return fmt.Errorf("edge %s: another edge process took this edge's name while the control plane did not hear from this one for over %s, so this one left the cell and stops (what its buffer holds is forwarded once an edge runs on this data dir under this name alone): %w", c.name, nameLapse, err)
	}
	if c.refusedSince.IsZero() {
		c.refusedSince = now
		c.log.Warn("another running edge has this edge's name: waiting for it, in case it is this edge's previous process (its name lapses "+nameLapse.String()+" after its last report); not joining the cell meanwhile",
			"wait", nameWait, "error", err)
	}
	if now.Sub(c.refusedSince) < nameWait {
		return nil
	}
	return fmt.Errorf("edge %s cannot run under this name (waited %s for it): %w", c.name, nameWait, err)
}

// admit is nil while the edge may take events, else why not: the
// gateway's EdgeTarget.Admit asks it first.
func (c *nameClaim) admit() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refusal
}

// stop hands Run the error it stops with.
func (c *nameClaim) stop(err error) {
	select {
	case c.lost <- err:
	default:
	}
}

// nameRefusal tells the control plane's refusal of a name another
// running edge process holds.
func nameRefusal(err error) bool {
	_, ok := errkind.Info(err, errkind.EdgeNameInUseReason)
	return ok
}

// answered notes what the control plane answered a call of this
// process's that carried its instance (a watch that brought a message,
// a report): nil confirms the name, a refusal of it counts (and stops
// Run once final); other errors tell nothing.
func (e *Edge) answered(err error) {
	switch {
	case err == nil:
		e.claim.confirmed()
	case nameRefusal(err):
		if final := e.claim.refused(err, time.Now()); final != nil {
			e.claim.stop(e.stranded(final))
		}
	}
}

// stranded adds to err, the name refused for good, what this edge's
// buffer holds that the cell has not taken, and what to do about it:
// the buffer is forwarded under this name only (a data dir keeps its
// name: claimDataDir), so by this edge once it holds the name.
func (e *Edge) stranded(err error) error {
	dir := e.cfg.DataDir
	st := e.monitor.fresh()
	if st.Buffer.Events == 0 {
		return fmt.Errorf("%w; its buffer (--data-dir %s) holds no unforwarded events", err, dir)
	}
	return fmt.Errorf("%w; its buffer (--data-dir %s) holds %d events (%d bytes) it acknowledged and has not forwarded to the cell: a data dir's buffer is forwarded under its edge's name only, not under another --name; to forward them, stop the edge that holds %s (once `rivoractl edges get %s` shows nothing buffered), then start this one again with --name %s --data-dir %s",
		err, dir, st.Buffer.Events, st.Buffer.Bytes, e.cfg.Name, e.cfg.Name, e.cfg.Name, dir)
}

// claimName asks the control planes, before the edge serves, whether
// this process may hold its name (a WatchEdge's first message), and
// joins the cell once it may. It fails when the name stays refused for
// nameWait; when no control plane answers (each asked once, within
// claimTimeout in all), it returns nil with the leaf held, and the edge
// joins the cell once a later watch or report is answered.
func (e *Edge) claimName(ctx context.Context) error {
	failures, until := 0, time.Now().Add(claimTimeout)
	for {
		url := e.upstream.URL()
		w, err := e.openWatch(ctx, url, max(time.Until(until), claimRetry/10))
		switch {
		case err == nil:
			if w != nil {
				e.opened.Store(w) // follow goes on with it
			}
			e.claim.confirmed()
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case nameRefusal(err):
			if final := e.claim.refused(err, time.Now()); final != nil {
				return e.stranded(final)
			}
			if !backoff.Sleep(ctx, claimRetry) {
				return ctx.Err()
			}
			failures, until = 0, time.Now().Add(claimTimeout)
		default:
			failures++
			e.upstream.Failed(url, err)
			if failures >= e.upstream.Count() || time.Now().After(until) {
				e.log.Warn("cannot reach the control plane to confirm this edge's name: accepting events, and joining the cell once it confirms it", "controlplane", url, "error", err)
				return nil
			}
		}
	}
}

// openedWatch is a WatchEdge stream claimName opened, its first message
// received, for follow to go on with: ctx is the stream's, which cancel
// ends.
type openedWatch struct {
	ctx    context.Context
	cancel context.CancelFunc
	stream *connect.ServerStreamForClient[rivorav1.WatchEdgeResponse]
}

// openWatch opens a WatchEdge at url and waits up to timeout for its
// first message, which tells that the control plane lets this process
// hold its name. The stream lives on (until Run ends it) once it came;
// when it came just as the timeout ended the stream, the name is
// confirmed all the same, and openWatch returns no watch and no error
// (follow opens another).
func (e *Edge) openWatch(ctx context.Context, url string, timeout time.Duration) (*openedWatch, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	timer := time.AfterFunc(timeout, cancel)
	stream, err := e.client(e.upstream.HTTPClient(0), url).WatchEdge(wctx, connect.NewRequest(e.watchRequest()))
	if err != nil {
		cancel()
		return nil, err
	}
	received := stream.Receive()
	late := !timer.Stop()
	if received && !late {
		return &openedWatch{ctx: wctx, cancel: cancel, stream: stream}, nil
	}
	cancel()
	err = stream.Err()
	_ = stream.Close()
	switch {
	case received:
		// The answer raced the timer: it was given, the control plane is
		// reachable, and it is no reason to start held.
		return nil, nil
	case late && ctx.Err() == nil && connect.CodeOf(err) == connect.CodeCanceled:
		err = fmt.Errorf("no answer within %s", timeout)
	case err == nil:
		err = errors.New("control plane closed the stream")
	}
	return nil, err
}

// watchRequest is this process's WatchEdge request.
func (e *Edge) watchRequest() *rivorav1.WatchEdgeRequest {
	return &rivorav1.WatchEdgeRequest{EdgeName: e.cfg.Name, AppliedVersion: e.applied.Load(), InstanceId: e.instance}
}
