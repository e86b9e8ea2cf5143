package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/backoff"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

const (
	// auditRetryFor is how long an audit entry no control plane recorded
	// is retried: long enough for a failover (a new leader is elected
	// within a session TTL and a lock-delay, ~20 s), bounded so that a
	// cell without a leader does not grow the queue for ever.
	auditRetryFor = 5 * time.Minute
	// maxPendingAudits bounds the entries waiting to be recorded.
	maxPendingAudits = 1000
	// lateAfter: an entry recorded this long after its action says when
	// the action was done (the control plane stamps the time it records).
	lateAfter = 10 * time.Second
	// finalAuditWait bounds Run's last try to record what waits, once the
	// agent stops.
	finalAuditWait = 3 * time.Second
)

// audits are the audit entries no control plane has recorded yet, in the
// order their actions were done: they are recorded in that order (a
// replay's end never before its beginning).
type audits struct {
	// turn is held while sending, so one sender records the queue's head
	// at a time.
	turn chan struct{}
	// wake tells Run that an entry waits.
	wake chan struct{}

	mu    sync.Mutex
	queue []*pendingAudit
	// closed: Run has ended (the agent is stopping): nothing retries an
	// entry any more, so none is queued.
	closed bool
}

type pendingAudit struct {
	entry *rivorav1.AuditEntry
	done  time.Time // when the action was done
}

func newAudits() *audits {
	return &audits{turn: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
}

// Audit appends an operator action this agent carried out (lane.skip,
// event.resend, deadletters.replay) to the control plane's audit log, its
// author the caller of ctx's call (its token's name and id, whatever e
// says). It tries each known control plane once within ctx, so a follower
// or a down one does not lose the entry while another serves. An entry
// not recorded then is retried by Run for up to auditRetryFor, until a
// leader answers (a control plane's failover takes seconds); the error
// says the action happened but is not audited (yet).
func (p *Planes) Audit(ctx context.Context, e *rivorav1.AuditEntry) error {
	e.Author, e.TokenId = auth.Author(ctx, "unknown")
	pa := &pendingAudit{entry: e, done: time.Now()}
	switch p.audits.add(pa) {
	case queueFull:
		return fmt.Errorf("%s done, but not audited: %d audit entries already wait for a control plane to record them", e.GetAction(), maxPendingAudits)
	case queueClosed:
		// The agent is stopping (an action that ends as it stops): one
		// try, as nothing would retry it.
		if err := p.record(ctx, pa); err != nil {
			p.lost(pa, "the agent is stopping")
			return fmt.Errorf("%s done, but not audited (the agent is stopping): %w", e.GetAction(), err)
		}
		return nil
	}
	err := p.sendAudits(ctx, pa)
	switch {
	case err == nil:
		return nil
	case refused(err):
		return fmt.Errorf("%s done, but not audited: %w", e.GetAction(), err)
	}
	p.audits.signal()
	return fmt.Errorf("%s done, but %w: %w; the agent keeps retrying to record it for up to %s", e.GetAction(), ErrAuditQueued, err, auditRetryFor)
}

// ErrAuditQueued is in Audit's error when no control plane recorded the
// entry yet and Run retries it: the action is done, and will most likely
// be audited within seconds (a control plane's failover), so its caller
// answers success.
var ErrAuditQueued = errors.New("not audited yet")

// Run records the audit entries Audit could not, retrying with backoff
// (each known control plane in turn, the leader a follower names first)
// until a control plane records them or auditRetryFor passes, which is
// logged as an error, as is every entry still waiting when ctx ends.
func (p *Planes) Run(ctx context.Context) error {
	retry := backoff.Backoff{Initial: 200 * time.Millisecond, Max: 5 * time.Second}
	var again <-chan time.Time
	for {
		select {
		case <-p.audits.wake:
		case <-again:
		case <-ctx.Done():
			p.audits.close()
			// One last try, bounded: the agent is stopping.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalAuditWait)
			_ = p.sendAudits(fctx, nil)
			cancel()
			for _, pa := range p.audits.take(time.Time{}) {
				p.lost(pa, "the agent stopped")
			}
			return nil
		}
		again = nil
		for _, pa := range p.audits.take(time.Now().Add(-auditRetryFor)) {
			p.lost(pa, fmt.Sprintf("no control plane recorded it in %s", auditRetryFor))
		}
		if err := p.sendAudits(ctx, nil); err != nil {
			again = time.After(retry.Next())
			continue
		}
		retry.Reset()
	}
}

func (p *Planes) lost(pa *pendingAudit, why string) {
	e := pa.entry
	p.log.Error("operator action NOT AUDITED: its audit entry is lost", "why", why, "action", e.GetAction(), "destination", e.GetDestinationId(),
		"author", e.GetAuthor(), "done_at", pa.done.UTC().Format(time.RFC3339), "detail", e.GetDetail(), "reason", e.GetReason())
}

// sendAudits records the waiting entries in order, up to and including
// upTo (nil: all of them), within ctx. An entry a control plane refuses
// is dropped (retrying cannot help); its error is returned if it is upTo.
func (p *Planes) sendAudits(ctx context.Context, upTo *pendingAudit) error {
	select {
	case p.audits.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.audits.turn }()
	for {
		pa := p.audits.head()
		if pa == nil {
			// upTo, if any, was recorded by another sender.
			return nil
		}
		err := p.record(ctx, pa)
		if err != nil && !refused(err) {
			return err
		}
		p.audits.pop(pa)
		if err != nil {
			p.lost(pa, err.Error())
		}
		if pa == upTo {
			return err
		}
	}
}

// record tries each control plane once, the followed one first.
func (p *Planes) record(ctx context.Context, pa *pendingAudit) error {
	e := pa.entry
	if time.Since(pa.done) > lateAfter {
		e = proto.Clone(e).(*rivorav1.AuditEntry)
		e.Detail += fmt.Sprintf(" (recorded late: done at %s)", pa.done.UTC().Format(time.RFC3339))
	}
	// Bounds each call that records an operator action.
	httpClient := p.HTTPClient(5 * time.Second)
	var errs []error
	for range p.urls {
		url := p.URL()
		_, err := p.Client(httpClient, url).RecordAudit(ctx, connect.NewRequest(&rivorav1.RecordAuditRequest{Entry: e}))
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", url, err))
		if refused(err) || ctx.Err() != nil {
			break
		}
		p.Failed(url, err)
	}
	return errors.Join(errs...)
}

// refused: the control plane answered that it will not record the entry;
// any other failure (a follower, a control plane down or gone mid-call)
// may pass.
func refused(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeUnauthenticated, connect.CodeNotFound:
		return true
	}
	return false
}

// queueing is what add did with an entry.
type queueing int

const (
	queued      queueing = iota
	queueFull            // maxPendingAudits wait already
	queueClosed          // Run has ended: nothing would retry it
)

func (a *audits) add(pa *pendingAudit) queueing {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return queueClosed
	case len(a.queue) >= maxPendingAudits:
		return queueFull
	}
	a.queue = append(a.queue, pa)
	return queued
}

// close makes add queue nothing more (Run has ended).
func (a *audits) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
}

func (a *audits) head() *pendingAudit {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queue) == 0 {
		return nil
	}
	return a.queue[0]
}

func (a *audits) pop(pa *pendingAudit) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queue) > 0 && a.queue[0] == pa {
		a.queue = a.queue[1:]
	}
}

// take removes and returns the entries whose action was done before
// cutoff (zero: all of them).
func (a *audits) take(cutoff time.Time) []*pendingAudit {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for n < len(a.queue) && (cutoff.IsZero() || a.queue[n].done.Before(cutoff)) {
		n++
	}
	out := a.queue[:n:n]
	a.queue = a.queue[n:]
	return out
}

func (a *audits) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}
