package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// buildRivora returns bin when set; otherwise it builds ./cmd/rivora into
// dir and returns that binary.
func buildRivora(ctx context.Context, bin, dir string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	bin = filepath.Join(dir, "rivora")
	progress("building ./cmd/rivora")
	mod, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rivora")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/rivora: %v\n%s", err, out)
	}
	return bin, nil
}

// batchPublish publishes n events, event(i) for i in [0, n), in
// PublishBatch calls of batch events from conc goroutines. acked counts
// the events acknowledged so far, for progress. It fails on the first
// error, or when an answer does not carry one id per event.
type batchPublish struct {
	n, batch, conc int
	event          func(i int) *rivorav1.PublishRequest
	acked          atomic.Int64
}

func (bp *batchPublish) run(ctx context.Context, ingest rivorav1connect.IngestServiceClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := (bp.n + bp.batch - 1) / bp.batch
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	fail := func(err error) { once.Do(func() { firstErr = err; cancel() }) }
	var wg sync.WaitGroup
	for range bp.conc {
		wg.Go(func() {
			for {
				b := int(next.Add(1)) - 1
				if b >= batches || ctx.Err() != nil {
					return
				}
				if err := bp.send(ctx, ingest, b); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("publish: %w", firstErr)
	}
	if n := bp.acked.Load(); n != int64(bp.n) {
		return fmt.Errorf("publish: %d of %d acked: %w", n, bp.n, ctx.Err())
	}
	return nil
}

// send publishes batch b.
func (bp *batchPublish) send(ctx context.Context, ingest rivorav1connect.IngestServiceClient, b int) error {
	lo, hi := b*bp.batch, min((b+1)*bp.batch, bp.n)
	events := make([]*rivorav1.PublishRequest, 0, hi-lo)
	for i := lo; i < hi; i++ {
		events = append(events, bp.event(i))
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	resp, err := ingest.PublishBatch(ctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events}))
	if err != nil {
		return fmt.Errorf("batch %d: %w", b, err)
	}
	if got := len(resp.Msg.GetEventIds()); got != len(events) {
		return fmt.Errorf("batch %d: %d ids for %d events", b, got, len(events))
	}
	bp.acked.Add(int64(len(events)))
	return nil
}

// pacedPublishPhase offers n Publish calls at rate per second, open loop:
// call i is due at start + i/rate whatever the earlier ones did, and its
// latency runs from when it was due (a slow server's queueing counts, as
// it would for a publisher producing at that rate). At most maxConc calls
// are in flight; a call that finds none free waits, and that wait counts.
func pacedPublishPhase(ctx context.Context, ingest rivorav1connect.IngestServiceClient, n int, rate float64, maxConc int, limit time.Duration, req func(int) *rivorav1.PublishRequest) (row, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var firstErr error
	var errOnce sync.Once
	lat := make([]time.Duration, n)
	slots := make(chan struct{}, maxConc)
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if _, err := ingest.Publish(ctx, connect.NewRequest(req(i))); err != nil {
				errOnce.Do(func() { firstErr = fmt.Errorf("event %d: %w", i, err); cancel() })
				return
			}
			lat[i] = time.Since(due)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return row{}, firstErr
	}
	if ctx.Err() != nil {
		return row{}, fmt.Errorf("paced publish: not done within %s", limit)
	}
	slices.Sort(lat)
	return row{name: fmt.Sprintf("rivora Publish at %.0f/s offered", rate), events: n, elapsed: elapsed, p50: percentile(lat, 0.5), p99: percentile(lat, 0.99),
		note: fmt.Sprintf("open loop, at most %d in flight; latency from when each call was due", maxConc)}, nil
}
