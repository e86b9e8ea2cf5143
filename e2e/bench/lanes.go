package main

// lanes measures `lanes list` (LaneService.ListLanes) over a destination
// with many pending lanes, and what it costs delivery elsewhere:
//
//	go run ./e2e/bench lanes                 # 1,000,000 pending lanes
//	go run ./e2e/bench lanes -lanes 100000 -rounds 2
//
// It creates a destination "big" and pauses it, publishes one event on
// each of -lanes distinct lanes to it with PublishBatch (they stay
// pending), and creates "steady", which delivers to a fast partner. Then,
// in -rounds rounds of three phases of -phase each, it publishes -rate
// events/s to steady and measures each one's delivery latency (publish
// call to the partner's first 2xx): alone; while ListLanes calls on big
// run back to back (or one every -list-every; each timed; limit -limit);
// and, as a control for the machine's own load, while CountPending (a
// cheap call) runs the same way. Interleaving the phases puts a shared
// machine's drifting load on each alike. The targets: ListLanes
// under 1 s over 1M lanes, and steady's delivery p99 not raised while it
// runs.
//
// Progress goes to stderr; a table and, as the last line, one JSON object
// go to stdout. It exits non-zero when anything fails or -timeout passes.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
)

type lanesFlags struct {
	common
	lanes, payload, batch, conc int
	rate                        int
	limit                       int
	phase, timeout, every       time.Duration
	control                     bool
	rounds                      int
}

type lanesResult struct {
	publish      time.Duration
	alone, along latencies // steady's delivery, without and with listing
	control      latencies // with cheap calls back to back instead (-control)
	controlCalls int
	lists        []time.Duration
	matched      int64
}

type latencies struct {
	events   int
	p50, p99 time.Duration
	max      time.Duration
}

func runLanes(args []string) error {
	fs := flag.NewFlagSet("lanes", flag.ExitOnError)
	var f lanesFlags
	f.register(fs)
	fs.IntVar(&f.lanes, "lanes", 1_000_000, "pending lanes on the big destination (one event each)")
	fs.IntVar(&f.payload, "payload", 64, "payload bytes per event")
	fs.IntVar(&f.batch, "batch", 1000, "events per PublishBatch")
	fs.IntVar(&f.conc, "c", 4, "concurrent PublishBatch calls")
	fs.IntVar(&f.rate, "rate", 200, "events/s published to the steady destination")
	fs.IntVar(&f.limit, "limit", 100, "ListLanes limit")
	fs.BoolVar(&f.control, "control", true, "phase 3: steady while CountPending (a cheap call) runs back to back, to tell the machine's CPU load from ListLanes' own cost")
	fs.DurationVar(&f.every, "list-every", 0, "start a ListLanes call this often in phase 2 (0: back to back, one after another)")
	fs.DurationVar(&f.phase, "phase", 5*time.Second, "length of each delivery phase (alone, with ListLanes, with CountPending)")
	fs.IntVar(&f.rounds, "rounds", 4, "rounds of the three phases, interleaved so the machine's drifting load falls on each alike")
	fs.DurationVar(&f.timeout, "timeout", 15*time.Minute, "fail when the whole bench takes longer")
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if f.lanes <= 0 || f.batch <= 0 || f.conc <= 0 || f.rate <= 0 || f.payload < 2 || f.limit <= 0 || f.phase <= 0 || f.rounds <= 0 {
		return errors.New("-lanes, -batch, -c, -rate, -limit, -phase and -rounds must be positive, -payload at least 2")
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	res, err := f.run(ctx)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("overran -timeout %s: %w", f.timeout, err)
	}
	if err != nil {
		return err
	}
	f.report(res)
	return nil
}

func (f *lanesFlags) run(ctx context.Context) (*lanesResult, error) {
	d, err := f.startDev()
	defer d.stop()
	if err != nil {
		return nil, err
	}
	part, err := partner.Start(partner.Options{CountOnly: true})
	if err != nil {
		return nil, err
	}
	defer part.Close()
	hc := f.httpClient(f.conc + 4)
	base := "http://" + d.Addr
	admin := rivorav1connect.NewAdminServiceClient(hc, base)
	ingest := rivorav1connect.NewIngestServiceClient(hc, base)
	lanesAPI := rivorav1connect.NewLaneServiceClient(hc, base)
	if err := setup(ctx, admin, []string{"big"}, part.DestURL("big")); err != nil {
		return nil, err
	}
	if err := createDestination(ctx, admin, "steady", part.DestURL("steady"), &rivorav1.Limits{RatePerSecond: 10000, Burst: 1000, MaxInFlight: 64}); err != nil {
		return nil, err
	}
	res := &lanesResult{}
	progress("publishing one event on each of %d lanes of the paused destination big", f.lanes)
	start := time.Now()
	if err := f.fill(ctx, ingest); err != nil {
		return nil, err
	}
	res.publish = time.Since(start)
	parts := rivorav1connect.NewPartitionServiceClient(hc, base)
	if err := until(ctx, 5*time.Minute, 200*time.Millisecond, fmt.Sprintf("%d events pending on big", f.lanes), func() error {
		resp, err := parts.CountPending(ctx, connect.NewRequest(&rivorav1.CountPendingRequest{DestinationId: "big"}))
		if err != nil {
			return err
		}
		if n := resp.Msg.GetPending(); n != int64(f.lanes) {
			return fmt.Errorf("%d pending", n)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	progress("all %d lanes pending after %s", f.lanes, time.Since(start).Round(time.Millisecond))

	var alone, along, control []time.Duration
	for round := range f.rounds {
		seed := round * 3 << 24
		progress("round %d/%d: steady alone for %s at %d events/s", round+1, f.rounds, f.phase, f.rate)
		lat, err := f.steady(ctx, ingest, part, seed)
		if err != nil {
			return nil, err
		}
		alone = append(alone, lat...)

		progress("round %d/%d: steady while ListLanes runs on big", round+1, f.rounds)
		lists, matched, lat, err := f.withLists(ctx, ingest, part, lanesAPI, seed+1<<24)
		if err != nil {
			return nil, err
		}
		if matched != int64(f.lanes) {
			return nil, fmt.Errorf("ListLanes matched %d lanes, want %d", matched, f.lanes)
		}
		res.lists, res.matched = append(res.lists, lists...), matched
		along = append(along, lat...)

		if f.control {
			progress("round %d/%d: steady while CountPending runs (control)", round+1, f.rounds)
			lat, calls, err := f.controlPhase(ctx, ingest, part, parts, seed+2<<24)
			if err != nil {
				return nil, err
			}
			control = append(control, lat...)
			res.controlCalls += calls
		}
	}
	res.alone, res.along, res.control = summarize(alone), summarize(along), summarize(control)
	slices.Sort(res.lists)
	progress("delivery p99 alone %.2f ms, with ListLanes %.2f ms, with CountPending %.2f ms; %d ListLanes calls, p50 %.1f ms, max %.1f ms",
		ms(res.alone.p99), ms(res.along.p99), ms(res.control.p99), len(res.lists), ms(percentile(res.lists, 0.5)), ms(res.lists[len(res.lists)-1]))
	return res, nil
}

func summarize(lat []time.Duration) latencies {
	if len(lat) == 0 {
		return latencies{}
	}
	slices.Sort(lat)
	return latencies{events: len(lat), p50: percentile(lat, 0.5), p99: percentile(lat, 0.99), max: lat[len(lat)-1]}
}

// withLists is steady while ListLanes calls run on big.
func (f *lanesFlags) withLists(ctx context.Context, ingest rivorav1connect.IngestServiceClient, part *partner.Partner, api rivorav1connect.LaneServiceClient, seed int) ([]time.Duration, int64, []time.Duration, error) {
	lctx, stop := context.WithCancel(ctx)
	var lists []time.Duration
	var matched int64
	var listErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		lists, matched, listErr = f.listLoop(lctx, api)
	}()
	lat, err := f.steady(ctx, ingest, part, seed)
	stop()
	<-done
	if err == nil {
		err = listErr
	}
	if err == nil && len(lists) == 0 {
		err = errors.New("no ListLanes call finished while steady ran")
	}
	return lists, matched, lat, err
}

// controlPhase is steady while a cheap call runs back to back.
func (f *lanesFlags) controlPhase(ctx context.Context, ingest rivorav1connect.IngestServiceClient, part *partner.Partner, parts rivorav1connect.PartitionServiceClient, seed int) ([]time.Duration, int, error) {
	cctx, stop := context.WithCancel(ctx)
	var calls int
	var callErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cctx.Err() == nil {
			if f.every > 0 {
				select {
				case <-time.After(f.every):
				case <-cctx.Done():
				}
			}
			if _, err := parts.CountPending(cctx, connect.NewRequest(&rivorav1.CountPendingRequest{DestinationId: "big"})); err != nil {
				if cctx.Err() == nil {
					callErr = err
				}
				return
			}
			calls++
		}
	}()
	lat, err := f.steady(ctx, ingest, part, seed)
	stop()
	<-done
	if err == nil {
		err = callErr
	}
	return lat, calls, err
}

// fill publishes one event on each of f.lanes lanes of big.
func (f *lanesFlags) fill(ctx context.Context, ingest rivorav1connect.IngestServiceClient) error {
	body := payload(f.payload, 7)
	bp := &batchPublish{n: f.lanes, batch: f.batch, conc: f.conc, event: func(i int) *rivorav1.PublishRequest {
		return &rivorav1.PublishRequest{
			DestinationId: "big", CustomerId: "c" + strconv.Itoa(i%16), LaneKey: "lane-" + strconv.Itoa(i),
			Type: "bench.lanes", Payload: body,
		}
	}}
	done := make(chan error, 1)
	go func() { done <- bp.run(ctx, ingest) }()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			progress("published %d/%d", bp.acked.Load(), f.lanes)
		}
	}
}

// steady publishes f.rate events/s to steady for f.phase, then waits for
// every one to be delivered and returns their delivery latencies.
func (f *lanesFlags) steady(ctx context.Context, ingest rivorav1connect.IngestServiceClient, part *partner.Partner, seed int) ([]time.Duration, error) {
	type sent struct {
		id string
		at time.Time
	}
	var out []sent
	tick := time.NewTicker(time.Second / time.Duration(f.rate))
	defer tick.Stop()
	end := time.Now().Add(f.phase)
	for i := 0; time.Now().Before(end); i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		at := time.Now()
		resp, err := ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: "steady", CustomerId: "s", LaneKey: "s-" + strconv.Itoa((seed+i)%64), Type: "bench.steady", Payload: payload(f.payload, seed+i),
		}))
		if err != nil {
			return nil, fmt.Errorf("publish to steady: %w", err)
		}
		out = append(out, sent{resp.Msg.GetEventId(), at})
	}
	var lat []time.Duration
	err := until(ctx, time.Minute, 50*time.Millisecond, "every steady event delivered", func() error {
		lat = lat[:0]
		for _, s := range out {
			t, ok := part.DeliveredAt(s.id)
			if !ok {
				return fmt.Errorf("%s not delivered yet", s.id)
			}
			lat = append(lat, t.Sub(s.at))
		}
		return nil
	})
	return lat, err
}

// listLoop calls ListLanes on big back to back until ctx ends.
func (f *lanesFlags) listLoop(ctx context.Context, api rivorav1connect.LaneServiceClient) ([]time.Duration, int64, error) {
	var took []time.Duration
	var matched int64
	for ctx.Err() == nil {
		t0 := time.Now()
		resp, err := api.ListLanes(ctx, connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: "big", Limit: int32(f.limit)}))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return nil, 0, fmt.Errorf("ListLanes: %w", err)
		}
		took = append(took, time.Since(t0))
		matched = resp.Msg.GetMatched()
		if len(resp.Msg.GetLanes()) != min(f.limit, f.lanes) {
			return nil, 0, fmt.Errorf("ListLanes returned %d lanes, want %d", len(resp.Msg.GetLanes()), min(f.limit, f.lanes))
		}
		if wait := f.every - time.Since(t0); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
	}
	return took, matched, nil
}

func (f *lanesFlags) report(r *lanesResult) {
	listP50, listMax := percentile(r.lists, 0.5), r.lists[len(r.lists)-1]
	ratio := float64(r.along.p99) / float64(r.alone.p99)
	phases := 2
	if f.control {
		phases = 3
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "lanes: %d pending lanes on a paused destination; steady delivers %d events/s to a fast partner; %d partitions, %d workers; %d rounds of %d phases of %s\n",
		f.lanes, f.rate, f.partitions, f.workers, f.rounds, phases, f.phase)
	fmt.Fprintln(tw, "measure\tvalue\tnote")
	fmt.Fprintf(tw, "publish\t%.2f s\t%.0f events/s (PublishBatch of %d, %d concurrent)\n", r.publish.Seconds(), float64(f.lanes)/r.publish.Seconds(), f.batch, f.conc)
	pace := "back to back"
	if f.every > 0 {
		pace = "one every " + f.every.String()
	}
	fmt.Fprintf(tw, "ListLanes p50\t%.1f ms\t%d calls %s, limit %d, %d lanes matched\n", ms(listP50), len(r.lists), pace, f.limit, r.matched)
	fmt.Fprintf(tw, "ListLanes max\t%.1f ms\t\n", ms(listMax))
	fmt.Fprintf(tw, "delivery alone\tp50 %.2f ms, p99 %.2f ms, max %.2f ms\t%d events: publish call to the partner's first 2xx\n", ms(r.alone.p50), ms(r.alone.p99), ms(r.alone.max), r.alone.events)
	fmt.Fprintf(tw, "delivery with ListLanes\tp50 %.2f ms, p99 %.2f ms, max %.2f ms\t%d events, while ListLanes ran %s\n", ms(r.along.p50), ms(r.along.p99), ms(r.along.max), r.along.events, pace)
	fmt.Fprintf(tw, "p99 ratio\t%.2f\twith ListLanes / alone\n", ratio)
	if f.control {
		fmt.Fprintf(tw, "delivery with CountPending\tp50 %.2f ms, p99 %.2f ms, max %.2f ms\t%d events, while %d CountPending calls (cheap) ran %s: the machine's share\n",
			ms(r.control.p50), ms(r.control.p99), ms(r.control.max), r.control.events, r.controlCalls, pace)
	}
	tw.Flush()
	if f.lanes >= 1_000_000 {
		verdict := "met"
		if listMax >= time.Second {
			verdict = "MISSED"
		}
		fmt.Printf("  target (ListLanes over 1M lanes in under 1 s): %s\n", verdict)
	}
	printJSON(map[string]float64{
		"lanes":                    float64(f.lanes),
		"list_p50_ms":              round(ms(listP50), 1),
		"list_max_ms":              round(ms(listMax), 1),
		"list_calls":               float64(len(r.lists)),
		"deliver_p50_ms":           round(ms(r.alone.p50), 2),
		"deliver_p99_ms":           round(ms(r.alone.p99), 2),
		"deliver_p50_ms_with_list": round(ms(r.along.p50), 2),
		"deliver_p99_ms_with_list": round(ms(r.along.p99), 2),
		"deliver_p99_ratio":        round(ratio, 2),
		"publish_per_s":            round(float64(f.lanes)/r.publish.Seconds(), 0),
		"deliver_p99_ms_control":   round(ms(r.control.p99), 2),
	}, []string{"lanes", "list_p50_ms", "list_max_ms", "list_calls", "deliver_p50_ms", "deliver_p99_ms",
		"deliver_p50_ms_with_list", "deliver_p99_ms_with_list", "deliver_p99_ratio", "deliver_p99_ms_control", "publish_per_s"})
}
