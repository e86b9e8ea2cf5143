// Package traffic is the steady load of the fault tests and the chaos
// run: many lanes, each publishing its events one after the other (the
// next once the previous was acknowledged, so a lane's order is defined),
// spread over the cell's agents, at a chosen overall rate. It records
// every acknowledgement for e2e/checker and every publish's latency.
//
// A failed publish is retried with the same idempotency key (so a stored
// but unacknowledged event is not stored twice) through the next agent,
// until it is acknowledged or the traffic stops.
package traffic

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/rivora/rivora/e2e/checker"
	"github.com/rivora/rivora/sdk"
)

// Lane is one lane of the load.
type Lane struct {
	Destination, Customer, Key string
	Partition                  int
	// Max, when positive, ends the lane after that many events.
	Max int
	// Every, when positive, is this lane's own interval between events
	// (a trickle beside the load), instead of its share of Config.Rate.
	Every time.Duration
}

// Config shapes the load.
type Config struct {
	// Clients are the ingest endpoints (one per agent); lane i starts on
	// client i mod len, and moves to the next one after a failure.
	Clients []*sdk.Client
	Lanes   []Lane
	// Rate is events per second over all lanes.
	Rate float64
	// AttemptTimeout bounds one publish attempt (default 5s).
	AttemptTimeout time.Duration
	// PayloadBytes pads each payload (default 96).
	PayloadBytes int
}

// Sample is one acknowledged publish's latency (its last attempt's
// start to the ack; with the failed attempts before it: Total).
type Sample struct {
	At      time.Time // when the acknowledgement arrived
	Latency time.Duration
	Total   time.Duration
}

// Traffic is a running load; Stop ends it.
type Traffic struct {
	cfg    Config
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	acked    []checker.Publish
	samples  []Sample
	failures []Failure
}

// Failure is one failed publish attempt: a Publish call that failed,
// the SDK's own retries included (the event is tried again through the
// next client).
type Failure struct {
	At     time.Time
	Client int // index into Config.Clients
	Err    error
}

// Start publishes until Stop.
func Start(ctx context.Context, cfg Config) *Traffic {
	if cfg.AttemptTimeout == 0 {
		cfg.AttemptTimeout = 5 * time.Second
	}
	if cfg.PayloadBytes == 0 {
		cfg.PayloadBytes = 96
	}
	ctx, cancel := context.WithCancel(ctx)
	t := &Traffic{cfg: cfg, cancel: cancel}
	// Each lane publishes every len(lanes)/rate, lanes staggered.
	interval := time.Duration(float64(len(cfg.Lanes)) / cfg.Rate * float64(time.Second))
	for i, l := range cfg.Lanes {
		t.wg.Go(func() {
			every := interval
			if l.Every > 0 {
				every = l.Every
			}
			offset := time.Duration(int64(every) * int64(i) / int64(len(cfg.Lanes)))
			t.lane(ctx, i, l, every, offset)
		})
	}
	return t
}

// Stop stops publishing and waits for every lane's publish in progress to
// end (acknowledged or given up).
func (t *Traffic) Stop() {
	t.cancel()
	t.wg.Wait()
}

func (t *Traffic) lane(ctx context.Context, i int, l Lane, interval, offset time.Duration) {
	client := i % len(t.cfg.Clients)
	next := time.Now().Add(offset)
	for seq := 0; l.Max <= 0 || seq < l.Max; seq++ {
		if !sleepUntil(ctx, next) {
			return
		}
		next = next.Add(interval)
		ev := sdk.Event{Destination: l.Destination, Customer: l.Customer, Lane: l.Key, Type: "chaos.test",
			Payload:        Payload(l, seq, t.cfg.PayloadBytes),
			IdempotencyKey: fmt.Sprintf("%s:%s:%s:%d", l.Destination, l.Customer, l.Key, seq)}
		first := time.Now()
		for {
			start := time.Now()
			actx, cancel := context.WithTimeout(ctx, t.cfg.AttemptTimeout)
			id, err := t.cfg.Clients[client].Publish(actx, ev)
			cancel()
			if err == nil {
				now := time.Now()
				t.mu.Lock()
				t.acked = append(t.acked, checker.Publish{ID: id, Destination: l.Destination, Customer: l.Customer, Lane: l.Key, Seq: seq, Partition: l.Partition})
				t.samples = append(t.samples, Sample{At: now, Latency: now.Sub(start), Total: now.Sub(first)})
				t.mu.Unlock()
				break
			}
			if ctx.Err() != nil {
				return // never acknowledged: not recorded
			}
			t.mu.Lock()
			t.failures = append(t.failures, Failure{At: time.Now(), Client: client, Err: err})
			t.mu.Unlock()
			client = (client + 1) % len(t.cfg.Clients)
			if !sleepUntil(ctx, time.Now().Add(200*time.Millisecond)) {
				return
			}
		}
	}
}

func sleepUntil(ctx context.Context, at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Payload is lane l's event seq: it names its lane and place, so a
// delivery can be checked against what was published.
func Payload(l Lane, seq, size int) []byte {
	b := fmt.Appendf(nil, `{"destination":%q,"customer":%q,"lane":%q,"seq":%d,"pad":"`, l.Destination, l.Customer, l.Key, seq)
	for len(b) < size-2 {
		b = append(b, 'x')
	}
	return append(b, '"', '}')
}

// Acked is every acknowledged publish so far.
func (t *Traffic) Acked() []checker.Publish {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]checker.Publish(nil), t.acked...)
}

// Errors is how many publish attempts failed, and the last error.
func (t *Traffic) Errors() (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.failures) == 0 {
		return 0, nil
	}
	return len(t.failures), t.failures[len(t.failures)-1].Err
}

// Failures are the failed publish attempts in [from, to), oldest first.
func (t *Traffic) Failures(from, to time.Time) []Failure {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Failure
	for _, f := range t.failures {
		if !f.At.Before(from) && f.At.Before(to) {
			out = append(out, f)
		}
	}
	return out
}

// P99 is the 99th percentile of the total publish latency (failed
// attempts included) of the publishes acknowledged in [from, to), and
// how many there were.
func (t *Traffic) P99(from, to time.Time) (time.Duration, int) {
	return t.P99Where(func(at time.Time) bool { return !at.Before(from) && at.Before(to) })
}

// P99Where is P99 over the publishes whose acknowledgement time in
// passes (several fault windows, say).
func (t *Traffic) P99Where(in func(time.Time) bool) (time.Duration, int) {
	t.mu.Lock()
	var lat []time.Duration
	for _, s := range t.samples {
		if in(s.At) {
			lat = append(lat, s.Total)
		}
	}
	t.mu.Unlock()
	if len(lat) == 0 {
		return 0, 0
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[min(len(lat)-1, len(lat)*99/100)], len(lat)
}
