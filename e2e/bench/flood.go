package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// `bench flood`: one customer floods the ingest gateway with PublishBatch
// calls while another publishes single events at a steady pace, both to
// one shared destination (paused, so delivery takes no CPU): the quiet
// customer's Publish latency before and during the flood, and the flood's
// rate — with the gateway's turns (--max-concurrent-events, default)
// and, in the same run, without them (a limit no flood reaches).
type floodFlags struct {
	common
	n, batch, conc int
	quietRate      float64
	idle           time.Duration
	limit          time.Duration
}

// floodRun is one rivora dev's figures.
type floodRun struct {
	turns                 string
	idleP50, idleP99      time.Duration
	floodP50, floodP99    time.Duration
	quietCalls, quietSlow int
	floodPerS             float64
	floodElapsed          time.Duration
}

func runFlood(args []string) error {
	f := &floodFlags{}
	fs := flag.NewFlagSet("flood", flag.ExitOnError)
	f.register(fs)
	fs.IntVar(&f.n, "n", 300_000, "events the flooding customer publishes")
	fs.IntVar(&f.batch, "batch", 100, "events per PublishBatch of the flood")
	fs.IntVar(&f.conc, "c", 256, "concurrent PublishBatch calls of the flood")
	fs.Float64Var(&f.quietRate, "quiet-rate", 100, "Publish calls per second of the quiet customer")
	fs.DurationVar(&f.idle, "idle", 5*time.Second, "how long the quiet customer publishes alone first")
	fs.DurationVar(&f.limit, "limit", 5*time.Minute, "time limit of each rivora dev's phases")
	_ = fs.Parse(args)
	without, err := f.runOne([]string{"--max-concurrent-events", strconv.Itoa(1 << 30)}, "none (a limit no flood reaches)")
	if err != nil {
		return fmt.Errorf("without turns: %w", err)
	}
	with, err := f.runOne(nil, "--max-concurrent-events default")
	if err != nil {
		return fmt.Errorf("with turns: %w", err)
	}
	return f.report(without, with)
}

// runOne starts rivora dev with extra flags and measures.
func (f *floodFlags) runOne(extra []string, turns string) (res floodRun, err error) {
	res.turns = turns
	c := f.common
	c.devArgs = append(slices.Clone(c.devArgs), extra...)
	d, err := c.startDev()
	defer d.stop()
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.limit)
	defer cancel()
	hc := c.httpClient(f.conc + 16)
	admin := rivorav1connect.NewAdminServiceClient(hc, d.url())
	ingest := rivorav1connect.NewIngestServiceClient(hc, d.url())
	// Nothing answers at this address: the destination stays paused.
	if err := createDestination(ctx, admin, "shared", "http://127.0.0.1:9/", nil); err != nil {
		return res, err
	}
	pause, err := admin.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "shared", Reason: "bench flood", Author: "bench"}))
	if err != nil {
		return res, fmt.Errorf("pause: %w", err)
	}
	if err := waitApplied(ctx, admin, pause.Msg.GetVersion()); err != nil {
		return res, err
	}

	progress("%s: the quiet customer alone, %s at %.0f/s", turns, f.idle, f.quietRate)
	quiet := &quietPublisher{ingest: ingest, rate: f.quietRate}
	alone := make(chan struct{})
	time.AfterFunc(f.idle, func() { close(alone) })
	idle, err := quiet.run(ctx, alone)
	if err != nil {
		return res, err
	}
	res.idleP50, res.idleP99 = percentile(idle, 0.5), percentile(idle, 0.99)

	progress("%s: flood of %d events (batches of %d, %d concurrent) with the quiet customer beside it", turns, f.n, f.batch, f.conc)
	flood := &batchPublish{n: f.n, batch: f.batch, conc: f.conc, event: func(i int) *rivorav1.PublishRequest {
		return &rivorav1.PublishRequest{DestinationId: "shared", CustomerId: "whale", LaneKey: "u" + strconv.Itoa(i%1000),
			Type: "bench.flood", Payload: payload(256, i), IdempotencyKey: "whale-" + strconv.Itoa(i)}
	}}
	floodDone := make(chan struct{})
	var floodErr error
	start := time.Now()
	go func() {
		defer close(floodDone)
		floodErr = flood.run(ctx, ingest)
		res.floodElapsed = time.Since(start)
	}()
	during, err := quiet.run(ctx, floodDone)
	<-floodDone
	if err != nil {
		return res, err
	}
	if floodErr != nil {
		return res, floodErr
	}
	res.floodPerS = float64(f.n) / res.floodElapsed.Seconds()
	res.floodP50, res.floodP99 = percentile(during, 0.5), percentile(during, 0.99)
	res.quietCalls = len(during)
	for _, l := range during {
		if l > 100*time.Millisecond {
			res.quietSlow++
		}
	}
	return res, nil
}

// quietPublisher is the quiet customer: one Publish every 1/rate, each in
// its own goroutine, so a slow answer does not delay the next call.
type quietPublisher struct {
	ingest rivorav1connect.IngestServiceClient
	rate   float64
	seq    int
}

// run publishes until stop is closed and returns the calls' latencies,
// sorted.
func (q *quietPublisher) run(ctx context.Context, stop <-chan struct{}) ([]time.Duration, error) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / q.rate))
	defer tick.Stop()
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	for running := true; running; {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil, fmt.Errorf("quiet customer: %w", ctx.Err())
		case <-stop:
			running = false
			continue
		case <-tick.C:
		}
		q.seq++
		i := q.seq
		wg.Go(func() {
			req := &rivorav1.PublishRequest{DestinationId: "shared", CustomerId: "quiet", LaneKey: "q" + strconv.Itoa(i%10),
				Type: "bench.quiet", Payload: payload(256, i), IdempotencyKey: "quiet-" + strconv.Itoa(i)}
			t0 := time.Now()
			_, err := q.ingest.Publish(ctx, connect.NewRequest(req))
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("quiet customer's publish %d: %w", i, err)
			}
			lat = append(lat, time.Since(t0))
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	slices.Sort(lat)
	return lat, nil
}

func (f *floodFlags) report(without, with floodRun) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "turns\tquiet p50/p99 alone\tquiet p50/p99 during the flood\tquiet calls > 100 ms\tflood events/s\n")
	for _, r := range []floodRun{without, with} {
		fmt.Fprintf(tw, "%s\t%.1f / %.1f ms\t%.1f / %.1f ms\t%d of %d\t%.0f\n", r.turns, ms(r.idleP50), ms(r.idleP99),
			ms(r.floodP50), ms(r.floodP99), r.quietSlow, r.quietCalls, r.floodPerS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	out := map[string]any{
		"flood_events": f.n, "flood_batch": f.batch, "flood_concurrency": f.conc, "quiet_rate": f.quietRate,
		"quiet_idle_p99_ms":                round(ms(with.idleP99), 2),
		"quiet_flood_p50_ms":               round(ms(with.floodP50), 2),
		"quiet_flood_p99_ms":               round(ms(with.floodP99), 2),
		"flood_per_s":                      round(with.floodPerS, 0),
		"quiet_idle_p99_ms_without_turns":  round(ms(without.idleP99), 2),
		"quiet_flood_p50_ms_without_turns": round(ms(without.floodP50), 2),
		"quiet_flood_p99_ms_without_turns": round(ms(without.floodP99), 2),
		"flood_per_s_without_turns":        round(without.floodPerS, 0),
		"flood_rate_ratio":                 round(with.floodPerS/without.floodPerS, 3),
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
