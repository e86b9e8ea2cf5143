package main

// fanout measures publishing without a destination: the heap each
// subscription costs a `rivora dev` process (control plane and agent
// together) with 100k subscriptions over 10k customers, and how fast they
// are created; then, with those in the tables, PublishBatch when every
// event matches 1, 3 and 10 subscriptions, next to the direct
// (destination-named) path in the same run; and what matching costs per
// event, measured in this process on the agent's own table.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"

	"github.com/rivora/rivora/agent/subscriptions"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/routing"
	"github.com/rivora/rivora/testkit/partner"
)

type fanoutFlags struct {
	common
	n, batch, conc, size int
	subs, customers      int
	createConc           int
	limit                time.Duration
	keyed                bool
}

func runFanout(args []string) error {
	fs := flag.NewFlagSet("fanout", flag.ExitOnError)
	var f fanoutFlags
	f.register(fs)
	fs.IntVar(&f.n, "n", 60000, "events per PublishBatch phase")
	fs.IntVar(&f.batch, "batch", 500, "events per PublishBatch")
	fs.IntVar(&f.conc, "batch-c", 4, "concurrent PublishBatch calls")
	fs.IntVar(&f.size, "payload", 256, "payload bytes")
	fs.IntVar(&f.subs, "subs", 100000, "subscriptions created for the memory phase")
	fs.IntVar(&f.customers, "sub-customers", 10000, "customers the memory phase's subscriptions are spread over")
	fs.IntVar(&f.createConc, "create-c", 16, "concurrent CreateSubscription calls in the memory phase")
	fs.DurationVar(&f.limit, "phase-timeout", 5*time.Minute, "fail when a phase takes longer")
	fs.BoolVar(&f.keyed, "keys", true, "give every event its own idempotency key, as the SDKs do")
	fs.Parse(args)
	fmt.Fprintf(os.Stderr, "bench fanout: GOMAXPROCS=%d NumCPU=%d payload=%dB\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), f.size)
	return f.run(context.Background())
}

// fanoutCustomers are the publishing customers of the throughput phases,
// with how many subscriptions each event of theirs matches.
var fanoutCustomers = []struct {
	name    string
	matches int
}{{"fan1", 1}, {"fan3", 3}, {"fan10", 10}}

const fanoutDests = 10

func (f *fanoutFlags) run(ctx context.Context) error {
	f.pprof = true
	d, err := f.startDev()
	defer d.stop()
	if err != nil {
		return err
	}
	hc := f.httpClient(f.conc * 2)
	admin := rivorav1connect.NewAdminServiceClient(hc, d.url())
	subsAPI := rivorav1connect.NewSubscriptionServiceClient(hc, d.url())
	ingest := rivorav1connect.NewIngestServiceClient(hc, d.url())
	p, err := partner.Start(partner.Options{CountOnly: true})
	if err != nil {
		return err
	}
	defer p.Close()
	// An almost empty budget keeps the events pending: the measurement is
	// ingest alone.
	dests := make([]string, fanoutDests)
	for i := range dests {
		dests[i] = fmt.Sprintf("fan-%02d", i)
		if err := createDestination(ctx, admin, dests[i], p.URL(), &rivorav1.Limits{RatePerSecond: 0.001, Burst: 1}); err != nil {
			return err
		}
	}
	var version uint64
	for _, c := range fanoutCustomers {
		for i := range c.matches {
			resp, err := subsAPI.CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{
				CustomerId: c.name, DestinationId: dests[i], Types: []string{"bench.*"},
			}))
			if err != nil {
				return fmt.Errorf("create subscription for %s: %w", c.name, err)
			}
			version = resp.Msg.GetVersion()
		}
	}
	if err := waitApplied(ctx, admin, version); err != nil {
		return err
	}
	// The memory phase runs first, on a server with no backlog yet (a
	// pending event costs far more heap than a subscription); the
	// throughput phases then run with its subscriptions in the tables.
	mem, err := f.memory(ctx, d, admin, subsAPI, dests)
	if err != nil {
		return err
	}
	nc, err := nats.Connect("nats://"+d.natsAddr, nats.Name("rivora-bench"))
	if err != nil {
		return fmt.Errorf("connect to embedded NATS %s: %w", d.natsAddr, err)
	}
	defer nc.Close()

	body := payload(f.size, 1)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	request := func(customer, dest string) func(int) *rivorav1.PublishRequest {
		return func(i int) *rivorav1.PublishRequest {
			r := &rivorav1.PublishRequest{DestinationId: dest, CustomerId: customer, LaneKey: "lane-" + strconv.Itoa(i%2000), Type: "bench.event", Payload: body}
			if f.keyed {
				r.IdempotencyKey = run + "-" + customer + "-" + strconv.Itoa(i)
			}
			return r
		}
	}
	progress("warm-up: %d events, direct", f.n/10)
	if _, err := batchPhase(ctx, ingest, f.n/10, f.batch, f.conc, f.limit, func(i int) *rivorav1.PublishRequest {
		return request("warm", dests[i%len(dests)])(i)
	}); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if err := waitIdle(nc, f.limit); err != nil {
		return err
	}
	progress("direct PublishBatch: %d events over %d destinations", f.n, len(dests))
	direct, err := batchPhase(ctx, ingest, f.n, f.batch, f.conc, f.limit, func(i int) *rivorav1.PublishRequest {
		return request("direct", dests[i%len(dests)])(i)
	})
	if err != nil {
		return fmt.Errorf("direct phase: %w", err)
	}
	progress("direct: %.0f events/s", direct.rate())
	rows := []row{direct}
	fan := map[int]row{}
	for _, c := range fanoutCustomers {
		if err := waitIdle(nc, f.limit); err != nil {
			return err
		}
		progress("fan-out PublishBatch: %d events, each matching %d subscriptions", f.n, c.matches)
		r, err := batchPhaseChecked(ctx, ingest, f.n, f.batch, f.conc, f.limit, request(c.name, ""), routesCheck(c.matches))
		if err != nil {
			return fmt.Errorf("fan-out %d phase: %w", c.matches, err)
		}
		r.name = fmt.Sprintf("fan-out to %d", c.matches)
		progress("%s: %.0f events/s, %.0f deliveries stored/s", r.name, r.rate(), r.rate()*float64(c.matches))
		rows = append(rows, r)
		fan[c.matches] = r
	}

	match, matchFilter := matchCost(f.size)

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tevents\tseconds\tevents/s\tdeliveries/s\tvs direct\tbatch p99 ms\t")
	for i, r := range rows {
		k := 1
		if i > 0 {
			k = fanoutCustomers[i-1].matches
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%.0f\t%.2f\t%.2f\t\n", r.name, r.events, r.elapsed.Seconds(), r.rate(), r.rate()*float64(k), r.rate()*float64(k)/direct.rate(), ms(r.p99))
	}
	tw.Flush()
	fmt.Printf("memory: %d subscriptions over %d customers: %.0f B of heap each (in use after GC, control plane and agent in one process); created at %.0f/s\n",
		mem.subs, f.customers, mem.perSub, mem.createRate)
	fmt.Printf("match cost per event (this process, the agent's table with 100k subscriptions over 10k customers): %.0f ns for a customer's 10 subscriptions by type, %.0f ns with a CEL filter on each (JSON decode included)\n",
		match, matchFilter)
	out := map[string]float64{
		"direct_per_s":          round(direct.rate(), 0),
		"fanout1_deliveries_s":  round(fan[1].rate(), 0),
		"fanout3_deliveries_s":  round(fan[3].rate()*3, 0),
		"fanout10_deliveries_s": round(fan[10].rate()*10, 0),
		"fanout1_ratio":         round(fan[1].rate()/direct.rate(), 3),
		"fanout3_ratio":         round(fan[3].rate()*3/direct.rate(), 3),
		"fanout10_ratio":        round(fan[10].rate()*10/direct.rate(), 3),
		"sub_heap_bytes":        round(mem.perSub, 0),
		"match_ns":              round(match, 0),
		"match_filter_ns":       round(matchFilter, 0),
	}
	return printJSON(out, []string{"direct_per_s", "fanout1_deliveries_s", "fanout3_deliveries_s", "fanout10_deliveries_s",
		"fanout1_ratio", "fanout3_ratio", "fanout10_ratio", "sub_heap_bytes", "match_ns", "match_filter_ns"})
}

// routesCheck checks that every event of a fan-out batch was stored for
// exactly matches subscriptions.
func routesCheck(matches int) func(*rivorav1.PublishBatchResponse, int) error {
	return func(resp *rivorav1.PublishBatchResponse, events int) error {
		if len(resp.GetResults()) != events {
			return fmt.Errorf("%d results for %d events", len(resp.GetResults()), events)
		}
		for i, r := range resp.GetResults() {
			if len(r.GetRoutes()) != matches {
				return fmt.Errorf("events[%d] was routed to %d subscriptions, want %d", i, len(r.GetRoutes()), matches)
			}
		}
		return nil
	}
}

type fanoutMemory struct {
	subs       int
	perSub     float64
	createRate float64
}

// memory creates f.subs subscriptions spread over f.customers customers
// and measures the heap they add.
func (f *fanoutFlags) memory(ctx context.Context, d *dev, admin rivorav1connect.AdminServiceClient, api rivorav1connect.SubscriptionServiceClient, dests []string) (fanoutMemory, error) {
	before, _, err := heapOf(ctx, d.url(), "")
	if err != nil {
		return fanoutMemory{}, err
	}
	progress("memory: creating %d subscriptions over %d customers, %d concurrent (heap in use before: %.1f MB)", f.subs, f.customers, f.createConc, mb(before))
	ctx, cancel := context.WithTimeout(ctx, f.limit)
	defer cancel()
	var next, version atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range f.createConc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= f.subs || ctx.Err() != nil {
					return
				}
				resp, err := api.CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{
					CustomerId:    fmt.Sprintf("mem-%05d", i%f.customers),
					DestinationId: dests[(i/f.customers)%len(dests)],
					Types:         []string{"order.*", fmt.Sprintf("invoice.%d", i%7)},
					Filter:        "data.amount > 100",
					Path:          fmt.Sprintf("/in/%d", i),
				}))
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("create subscription %d: %w", i, err); cancel() })
					return
				}
				for v := int64(resp.Msg.GetVersion()); ; {
					cur := version.Load()
					if v <= cur || version.CompareAndSwap(cur, v) {
						break
					}
				}
				if i > 0 && i%10000 == 0 {
					progress("memory: %d subscriptions created", i)
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fanoutMemory{}, firstErr
	}
	elapsed := time.Since(start)
	if err := waitApplied(context.Background(), admin, uint64(version.Load())); err != nil {
		return fanoutMemory{}, err
	}
	after, _, err := heapOf(context.Background(), d.url(), "")
	if err != nil {
		return fanoutMemory{}, err
	}
	m := fanoutMemory{subs: f.subs, createRate: float64(f.subs) / elapsed.Seconds()}
	if after > before {
		m.perSub = float64(after-before) / float64(f.subs)
	}
	progress("memory: heap in use %.1f MB after (%.0f B per subscription)", mb(after), m.perSub)
	return m, nil
}

// matchCost measures, in this process, what the agent's routing costs per
// event: a customer's 10 subscriptions matched by type among 100k
// subscriptions, then the same with a CEL filter on each (the event's
// JSON decoded once, as ingest does).
func matchCost(size int) (byType, withFilter float64) {
	build := func(filter string) *subscriptions.Table {
		list := make([]*rivorav1.Subscription, 0, 100000)
		for i := range 100000 {
			list = append(list, &rivorav1.Subscription{
				Id: fmt.Sprintf("sub_%016x", i), CustomerId: fmt.Sprintf("c%05d", i%10000), DestinationId: "d",
				Types: []string{"order.*", "invoice.paid"}, Filter: filter,
			})
		}
		t := subscriptions.NewTable()
		for _, s := range t.Replace(time.Now(), list) {
			if s.Unusable != nil {
				panic(s.Unusable)
			}
		}
		return t
	}
	data := fmt.Appendf(nil, `{"amount": 150, "note": %q}`, string(payload(max(size-40, 1), 1)))
	customers := make([]string, 10000)
	for i := range customers {
		customers[i] = fmt.Sprintf("c%05d", i)
	}
	measure := func(t *subscriptions.Table) float64 {
		res := testing.Benchmark(func(b *testing.B) {
			for i := range b.N {
				var decoded any
				var once bool
				input := func() routing.Input {
					if !once {
						once = true
						_ = json.Unmarshal(data, &decoded)
					}
					return routing.Input{Data: decoded, Type: "order.created", Customer: "c", Lane: "l"}
				}
				n := 0
				for _, s := range t.ForCustomer(customers[i%len(customers)]) {
					if ok, _ := s.Matches(context.Background(), "order.created", input); ok {
						n++
					}
				}
				if n != 10 {
					b.Fatalf("matched %d subscriptions, want 10", n)
				}
			}
		})
		return float64(res.NsPerOp())
	}
	progress("match cost: 100k subscriptions in the agent's table, 10 per customer")
	return measure(build("")), measure(build("data.amount > 100"))
}
