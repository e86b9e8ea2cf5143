// Package gone is the agent's side of a 410 Gone. The partner wants no
// more webhooks, so the destination stops here at once, before the control
// plane knows, and the control plane is told (AgentService.ReportGone)
// until it answers; it disables the destination for every agent, and an
// operator's resume re-enables it. Holds owns the destinations stopped
// here and the reports not yet answered; its Run sends them.
//
// Which 410 stops a destination is the verdict's to say (agent/verdict,
// Verdict.Disable): on a destination shared by customers, a 410 that is
// one customer's alone (the partner takes the others') is that
// customer's failure, charged to its event, and never reaches Holds.
package gone

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/upstream"
	"github.com/rivora/rivora/internal/backoff"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Config is what Holds needs.
type Config struct {
	// Name is the agent's, in its reports.
	Name      string
	Scheduler *scheduler.Scheduler
	Upstream  *upstream.Planes
	// Destination answers a destination's partition and whether its
	// config pauses it; ok false when it is deleted (or no config came
	// yet).
	Destination func(id string) (partition int, paused, ok bool)
	// Applied is the config version the agent has applied.
	Applied func() uint64
	Log     *slog.Logger
}

// Holds are the destinations this agent stopped after a 410, and the
// reports the control plane has not answered yet.
//
// A destination is held from the first 410 until the agent has applied
// the config version the control plane answered its report with: from
// then on the config it follows says whether to send (paused while
// disabled, not paused once an operator resumed it). Holds live in memory
// only: after a restart the event is still at its lane's head, the partner
// answers 410 again, and the hold and the report start over.
//
// mu also orders every pause state the agent gives the scheduler, so a
// config applied at the same moment cannot un-pause a destination just
// held (Configure, hold and Release change it only under mu).
type Holds struct {
	cfg   Config
	sched *scheduler.Scheduler
	log   *slog.Logger

	mu   sync.Mutex
	held map[string]*goneHold // by destination id
	wake chan struct{}        // a report to send
}

type goneHold struct {
	report *rivorav1.ReportGoneRequest
	// answered: the control plane answered the report with version.
	answered bool
	version  uint64
}

// New returns the holds (none yet); Run sends their reports.
func New(cfg Config) *Holds {
	return &Holds{cfg: cfg, sched: cfg.Scheduler, log: cfg.Log, held: make(map[string]*goneHold), wake: make(chan struct{}, 1)}
}

// Configure gives the scheduler a destination's pause state: paused in
// its config, or held here.
func (g *Holds) Configure(id string, partition int, paused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sched.SetPaused(id, partition, paused || g.held[id] != nil)
}

// hold stops the destination of report at once and queues the report;
// false if it was held already.
func (g *Holds) hold(partition int, report *rivorav1.ReportGoneRequest) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	id := report.GetDestinationId()
	if g.held[id] != nil {
		return false
	}
	g.held[id] = &goneHold{report: report}
	g.sched.SetPaused(id, partition, true)
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return true
}

// Forget drops a deleted destination's hold and its report: there is
// nothing left to disable.
func (g *Holds) Forget(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.held, id)
}

// unanswered lists the reports to send.
func (g *Holds) unanswered() []*rivorav1.ReportGoneRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*rivorav1.ReportGoneRequest
	for _, h := range g.held {
		if !h.answered {
			out = append(out, h.report)
		}
	}
	return out
}

// answered records the control plane's answer to a destination's report.
func (g *Holds) answered(id string, version uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if h := g.held[id]; h != nil {
		h.answered, h.version = true, version
	}
}

// release ends the holds whose answer's version the agent has applied and
// gives the scheduler those destinations' pause state from their config
// (paused reports it; ok false: the destination is gone).
func (g *Holds) release(applied uint64, config func(id string) (partition int, paused, ok bool)) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var released []string
	for id, h := range g.held {
		if !h.answered || h.version > applied {
			continue
		}
		delete(g.held, id)
		released = append(released, id)
		if p, paused, ok := config(id); ok {
			g.sched.SetPaused(id, p, paused)
		}
	}
	return released
}

// Hold stops an attempt's destination after its partner answered 410
// Gone and queues the report to the control plane. The caller completes
// the attempt after it, so the lane's head is not offered again first.
func (g *Holds) Hold(att *scheduler.Attempt, ev *rivorav1.Event, res delivery.Result) {
	report := &rivorav1.ReportGoneRequest{
		AgentName: g.cfg.Name, DestinationId: ev.GetDestinationId(), EventId: ev.GetEventId(),
		Status: int32(res.Status), At: timestamppb.Now(),
	}
	if g.hold(att.Lane.Partition, report) {
		g.log.Warn("partner answered 410 Gone: destination stopped here; telling the control plane to disable it", "destination", ev.GetDestinationId(), "event_id", ev.GetEventId())
	}
}

// Release ends the holds the applied config has caught up with.
func (g *Holds) Release() {
	for _, id := range g.release(g.cfg.Applied(), g.cfg.Destination) {
		g.log.Info("410 hold released: the destination follows its config again", "destination", id)
	}
}

// Run sends the queued 410 reports to the control plane, retrying with
// backoff until each is answered (a control plane that is down or
// electing a leader gets them once it serves again), until ctx ends.
func (g *Holds) Run(ctx context.Context) error {
	httpClient := g.cfg.Upstream.HTTPClient(10 * time.Second)
	retry := backoff.Backoff{Initial: 200 * time.Millisecond, Max: 5 * time.Second}
	var again <-chan time.Time
	for {
		select {
		case <-g.wake:
		case <-again:
		case <-ctx.Done():
			return nil
		}
		again = nil
		if !g.send(ctx, httpClient) {
			again = time.After(retry.Next())
			continue
		}
		retry.Reset()
	}
}

// send sends each unanswered report once; false if one must be sent
// again.
func (g *Holds) send(ctx context.Context, httpClient *http.Client) bool {
	done := true
	for _, req := range g.unanswered() {
		url := g.cfg.Upstream.URL()
		resp, err := g.cfg.Upstream.Client(httpClient, url).ReportGone(ctx, connect.NewRequest(req))
		switch code := connect.CodeOf(err); {
		case err == nil:
			g.answered(req.GetDestinationId(), resp.Msg.GetVersion())
			g.log.Info("control plane answered the 410 report", "destination", req.GetDestinationId(), "disabled", resp.Msg.GetDisabled(), "version", resp.Msg.GetVersion())
		case code == connect.CodeNotFound || code == connect.CodeInvalidArgument:
			// Deleted meanwhile, or refused: retrying cannot help; the
			// config the agent follows decides.
			g.answered(req.GetDestinationId(), 0)
			g.log.Warn("control plane refused the 410 report", "destination", req.GetDestinationId(), "error", err)
		default:
			done = false
			if code == connect.CodeUnavailable {
				g.cfg.Upstream.Failed(url, err) // a follower, or down
			}
			if ctx.Err() == nil {
				g.log.Warn("report 410 to the control plane; retrying", "destination", req.GetDestinationId(), "controlplane", url, "error", err)
			}
		}
	}
	g.Release()
	return done
}
