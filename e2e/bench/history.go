package main

// history measures the history behind `events get/list/resend` (issue 12:
// "an agent's memory does not grow with the number of retained events";
// "events get p99 under 50 ms with 10M retained events") against a real
// `rivora dev`:
//
//	go run ./e2e/bench history                                  # 300k delivered; lookups at 1M and 10M
//	go run ./e2e/bench history -events 30000 -sizes 100000      # a short run
//
// memory: one `rivora dev` with a short --dedup-window delivers -events
// events to a fast partner on 127.0.0.1, waits until the history holds
// their records and the dedup window has passed, restarts, and measures
// heap in use after two forced GCs (GET /debug/pprof/heap?gc=1, then
// /metrics) and RSS; then a fresh `rivora dev` with the same destinations
// is measured the same way. (retained - fresh) / events is the memory per
// retained event.
//
// lookups: a fresh `rivora dev` (--nats-listen) whose HISTORY stream is
// filled directly over NATS, as a real agent writes it: per event an
// outcome (delivered) and the delivered event (-payload bytes), batched
// per subject and flush interval as the agent's writer batches them, ids
// UUIDv7 accepted at -rate events/s, the newest accepted now; each
// subject gets its index once its bucket is over, as the agent's writer
// appends it (so the newest seconds are read whole). At each of
// -sizes retained events, -lookups random ids are looked up one after
// another through the API (GetEvent, checked to answer delivered); at the
// last size (its newest event accepted now) one ListEvents (delivered,
// limit 100) is timed. The agent's rivora_history_lookup_subjects_total
// tells how many subjects the lookups read through their index and whole.
//
// Progress goes to stderr; a table and, as the last line, one JSON object
// go to stdout. It exits non-zero when anything fails or -timeout passes.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/history"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
)

type historyFlags struct {
	common
	events, lanes, dests int
	payload              int
	batch, conc          int
	dedup, settle        time.Duration
	sizes                string
	lookups, rate        int
	pubPending           int
	skipMemory           bool
	skipLookups          bool
	timeout              time.Duration
}

func runHistory(args []string) error {
	fs := flag.NewFlagSet("history", flag.ExitOnError)
	var f historyFlags
	f.register(fs)
	fs.IntVar(&f.events, "events", 300_000, "memory: events delivered before the restart")
	fs.IntVar(&f.lanes, "lanes", 10_000, "memory: lanes the events are spread over")
	fs.IntVar(&f.dests, "dests", 4, "memory: destinations")
	fs.IntVar(&f.payload, "payload", 64, "payload bytes per event")
	fs.IntVar(&f.batch, "batch", 500, "memory: events per PublishBatch")
	fs.IntVar(&f.conc, "c", 4, "memory: concurrent PublishBatch calls")
	fs.DurationVar(&f.dedup, "dedup-window", 10*time.Second, "memory: rivora dev --dedup-window (the restart waits it out)")
	fs.DurationVar(&f.settle, "settle", 20*time.Second, "memory: wait after a start before measuring (the embedded NATS server drops block caches it loaded at start-up after ~10 s)")
	fs.StringVar(&f.sizes, "sizes", "1000000,10000000", "lookups: retained events at which to measure, comma-separated, ascending")
	fs.IntVar(&f.lookups, "lookups", 3000, "lookups: GetEvent calls per size")
	fs.IntVar(&f.rate, "rate", 1000, "lookups: events/s the filled history's ids are spread at")
	fs.IntVar(&f.pubPending, "pub-pending", 8192, "lookups: max outstanding async publishes while filling")
	fs.BoolVar(&f.skipMemory, "skip-memory", false, "skip the memory phase")
	fs.BoolVar(&f.skipLookups, "skip-lookups", false, "skip the lookups phase")
	fs.DurationVar(&f.timeout, "timeout", 60*time.Minute, "fail when the whole bench takes longer")
	fs.Parse(args)
	sizes, err := parseSizes(f.sizes)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	return f.run(ctx, sizes)
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n <= 0 || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, fmt.Errorf("-sizes %q: want positive counts in ascending order, such as 1000000,10000000", s)
		}
		out = append(out, n)
	}
	return out, nil
}

type histMemory struct {
	retainedInuse, retainedRSS uint64
	freshInuse, freshRSS       uint64
	records                    uint64
	deliver                    time.Duration
}

type histLookup struct {
	size            int
	missing         []int // indexes of events GetEvent did not find
	fill            time.Duration
	p50, p99, worst time.Duration
	list            time.Duration
	listed          int
	diskBytes       uint64
	// indexed and whole are the subjects the lookups read through their
	// index and whole (rivora_history_lookup_subjects_total; -1 when the
	// agent has no such metric, an older rivora).
	indexed, whole float64
}

func (f *historyFlags) run(ctx context.Context, sizes []int) error {
	fmt.Fprintf(os.Stderr, "bench history: GOMAXPROCS=%d NumCPU=%d events=%d sizes=%v payload=%dB\n",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), f.events, sizes, f.payload)
	root, err := os.MkdirTemp("", "rivora-history-")
	if err != nil {
		return err
	}
	defer func() {
		if f.keep {
			progress("kept %s", root)
			return
		}
		os.RemoveAll(root)
	}()
	if f.bin, err = buildRivora(ctx, f.bin, root); err != nil {
		return err
	}
	var mem *histMemory
	if !f.skipMemory {
		mem = &histMemory{}
		if err := f.memory(ctx, root, mem); err != nil {
			return fmt.Errorf("memory: %w", err)
		}
	}
	var looks []histLookup
	if !f.skipLookups {
		if looks, err = f.lookupPhase(ctx, root, sizes); err != nil {
			return fmt.Errorf("lookups: %w", err)
		}
	}
	f.report(mem, looks)
	for _, l := range looks {
		if len(l.missing) > 0 {
			return fmt.Errorf("%d retained: %d of %d lookups answered not found (events %v)", l.size, len(l.missing), f.lookups, l.missing)
		}
	}
	return nil
}

// histProc is a `rivora dev` of this bench, with its NATS client port.
type histProc struct {
	*rbProc
	natsAddr string
}

func (f *historyFlags) start(dataDir, logName string) (*histProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	natsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	natsAddr := "127.0.0.1:" + strconv.Itoa(natsPort)
	args := []string{"dev", "--listen", addr, "--data-dir", dataDir, "--pprof", "--nats-listen", natsAddr,
		"--partitions", strconv.Itoa(f.partitions), "--workers", strconv.Itoa(f.workers), "--dedup-window", f.dedup.String()}
	if f.fsync {
		args = append(args, "--fsync")
	}
	p, err := startProc(f.bin, "rivora dev", addr, filepath.Join(filepath.Dir(dataDir), logName), args, false)
	if err != nil {
		return nil, err
	}
	hp := &histProc{rbProc: &rbProc{proc: p}, natsAddr: natsAddr}
	if _, err := p.waitHealthy(context.Background(), 2*time.Minute, 50*time.Millisecond); err != nil {
		p.kill()
		return nil, err
	}
	return hp, nil
}

func (f *historyFlags) clients(base string) (rivorav1connect.AdminServiceClient, rivorav1connect.IngestServiceClient, rivorav1connect.EventServiceClient) {
	hc := f.httpClient(f.conc + 4)
	return rivorav1connect.NewAdminServiceClient(hc, base), rivorav1connect.NewIngestServiceClient(hc, base), rivorav1connect.NewEventServiceClient(hc, base)
}

// historyMsgs is the history's message (batch) count and bytes (both
// streams).
func historyMsgs(ctx context.Context, js jetstream.JetStream) (uint64, uint64, error) {
	var msgs, bytes uint64
	for _, name := range []string{history.Stream, history.BodiesStream} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return 0, 0, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, 0, err
		}
		msgs, bytes = msgs+info.State.Msgs, bytes+info.State.Bytes
	}
	return msgs, bytes, nil
}

// historyOutcomes counts the outcome records in the HISTORY stream's
// batches (a batch's count is known only by reading it).
func historyOutcomes(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	st, err := js.Stream(ctx, history.Stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs == 0 {
		return 0, err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, err
	}
	var n uint64
	for read := uint64(0); read < info.State.Msgs; {
		msgs, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return 0, err
		}
		got := 0
		for m := range msgs.Messages() {
			var b rivorav1.HistoryBatch
			if err := proto.Unmarshal(m.Data(), &b); err != nil {
				return 0, fmt.Errorf("decode a %s batch: %w", history.Stream, err)
			}
			n += uint64(len(b.GetOutcomes()))
			got++
		}
		if err := msgs.Error(); err != nil {
			return 0, err
		}
		if got == 0 {
			return 0, fmt.Errorf("read %d of %d %s messages", read, info.State.Msgs, history.Stream)
		}
		read += uint64(got)
	}
	return n, nil
}

func streamMsgs(ctx context.Context, js jetstream.JetStream, name string) (uint64, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

func connectNATS(addr string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect("nats://"+addr, nats.Name("rivora-bench-history"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to embedded NATS %s: %w", addr, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func (f *historyFlags) memory(ctx context.Context, root string, res *histMemory) error {
	part, err := partner.Start(partner.Options{CountOnly: true})
	if err != nil {
		return err
	}
	defer part.Close()
	dests := make([]string, f.dests)
	for i := range dests {
		dests[i] = fmt.Sprintf("hist-%d", i)
	}
	setupDests := func(admin rivorav1connect.AdminServiceClient) error {
		for _, id := range dests {
			if err := createDestination(ctx, admin, id, part.URL(), &rivorav1.Limits{RatePerSecond: 1e6, Burst: 100_000, MaxInFlight: 1000}); err != nil {
				return err
			}
		}
		return nil
	}

	data := filepath.Join(root, "retained", "data")
	p, err := f.start(data, "retained.log")
	if err != nil {
		return err
	}
	defer p.kill()
	admin, ingest, _ := f.clients(p.url())
	if err := setupDests(admin); err != nil {
		return err
	}
	rf := &rebuildFlags{events: f.events, lanes: f.lanes, payload: f.payload, batch: f.batch, conc: f.conc}
	progress("publishing %d events over %d lanes to %d destinations (delivered at once)", f.events, f.lanes, f.dests)
	start := time.Now()
	if err := rf.publish(ctx, ingest, dests); err != nil {
		return err
	}
	if err := until(ctx, 30*time.Minute, 200*time.Millisecond, "every event delivered", func() error {
		if err := p.diedErr(); err != nil {
			return err
		}
		if n := int64(part.Delivered()); n < int64(f.events) {
			return fmt.Errorf("%d of %d delivered", n, f.events)
		}
		return nil
	}); err != nil {
		return err
	}
	res.deliver = time.Since(start)
	progress("%d events delivered in %s", f.events, res.deliver.Round(time.Millisecond))
	nc, js, err := connectNATS(p.natsAddr)
	if err != nil {
		return err
	}
	// A delivered outcome per event (and as many delivered events, in
	// the bodies stream, written with them).
	want := uint64(f.events)
	if _, err := js.Stream(ctx, history.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		// An older rivora (-bin), with one EVENTS subject per event: one
		// record per delivered event.
		progress("no %s stream (an older rivora): counting the EVENTS stream", history.Stream)
	}
	err = until(ctx, 5*time.Minute, time.Second, "the history holds every record", func() error {
		n, err := historyOutcomes(ctx, js)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			n, err = streamMsgs(ctx, js, "EVENTS")
		}
		if err == nil && n < want {
			err = fmt.Errorf("%d of %d records", n, want)
		}
		res.records = n
		return err
	})
	nc.Close()
	if err != nil {
		return err
	}
	progress("waiting out the dedup window (%s) so the lane stores forget the events' ids", f.dedup)
	time.Sleep(f.dedup + 2*time.Second)
	if _, err := p.terminate(time.Minute); err != nil {
		return err
	}
	p, err = f.start(data, "retained-restart.log")
	if err != nil {
		return err
	}
	defer p.kill()
	time.Sleep(f.settle)
	if res.retainedInuse, err = settledHeap(ctx, p, filepath.Join(root, "retained-heap.pprof")); err != nil {
		return err
	}
	res.retainedRSS = p.rss()
	progress("restarted with %d records retained: heap in use %.1f MB, RSS %.1f MB", res.records, mb(res.retainedInuse), mb(res.retainedRSS))
	if _, err := p.terminate(time.Minute); err != nil {
		return err
	}

	fresh, err := f.start(filepath.Join(root, "fresh", "data"), "fresh.log")
	if err != nil {
		return err
	}
	defer fresh.kill()
	admin, _, _ = f.clients(fresh.url())
	if err := setupDests(admin); err != nil {
		return err
	}
	if _, err := fresh.terminate(time.Minute); err != nil {
		return err
	}
	// Restarted too, so both are measured the same way: after a start
	// on a data dir, destinations known.
	fresh, err = f.start(filepath.Join(root, "fresh", "data"), "fresh-restart.log")
	if err != nil {
		return err
	}
	defer fresh.kill()
	time.Sleep(f.settle)
	if res.freshInuse, err = settledHeap(ctx, fresh, filepath.Join(root, "fresh-heap.pprof")); err != nil {
		return err
	}
	res.freshRSS = fresh.rss()
	progress("fresh: heap in use %.1f MB, RSS %.1f MB", mb(res.freshInuse), mb(res.freshRSS))
	_, err = fresh.terminate(time.Minute)
	return err
}

// settledHeap is the heap in use after two forced GCs: the embedded NATS
// server keeps the 8 MB buffers of message blocks it loaded at start-up
// (expiry checks, dedup rebuild) in a sync.Pool, which only the second GC
// empties; they are transient, not retained events.
func settledHeap(ctx context.Context, p *histProc, profile string) (uint64, error) {
	if _, _, err := p.heap(ctx, ""); err != nil {
		return 0, err
	}
	inuse, _, err := p.heap(ctx, profile)
	return inuse, err
}

// v7At is a UUIDv7 whose time is at.
func v7At(at time.Time, rng *rand.Rand) string {
	var u uuid.UUID
	for i := range u {
		u[i] = byte(rng.Uint32())
	}
	ms := at.UnixMilli()
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = u[6]&0x0f | 0x70
	u[8] = u[8]&0x3f | 0x80
	return u.String()
}

// filler writes a history as an agent at -rate events/s would have: in
// batches, as the agent's history writer coalesces them, one message per
// subject per flush interval (history.DefaultFlushInterval of the
// events' delivery times), or sooner at the batch bounds.
type filler struct {
	f       *historyFlags
	js      jetstream.JetStream
	base    time.Time
	every   time.Duration
	written int
	seed    uint64
	// msgs is the messages (batches) published.
	msgs uint64
	// round is the flush interval being batched, its batches by subject in
	// the order of their first records.
	round   int64
	batches map[string]*fillBatch
	order   []*fillBatch
	// unindexed is the subjects whose index is not written yet, by
	// subject, and per stream in the order their first batch was
	// published (their buckets' order).
	unindexed map[string]*fillSubject
	dueOrder  map[string][]*fillSubject
	// subjectMsgs counts the messages published to each subject: an
	// index's total, as the agent's writer counts it (a subject written
	// on after its index, across two fills, gets an incomplete one).
	subjectMsgs map[string]uint64
}

type fillBatch struct {
	subject string
	batch   rivorav1.HistoryBatch
	bytes   int
	ids     []string
}

// fillSubject is one subject's published batches, indexed (as the agent's
// writer indexes them) once its bucket is over.
type fillSubject struct {
	subject string
	due     time.Time
	batches []fillPublished
}

type fillPublished struct {
	ack jetstream.PubAckFuture
	ids []string
}

func (fl *filler) at(i int) time.Time { return fl.base.Add(time.Duration(i) * fl.every) }

// id is event i's id (the same every time: a seeded generator per event).
func (fl *filler) id(i int) string {
	return v7At(fl.at(i), rand.New(rand.NewPCG(fl.seed, uint64(i))))
}

// fill writes events [fl.written, n).
func (fl *filler) fill(ctx context.Context, n int) error {
	body := payload(fl.f.payload, 9)
	start := time.Now()
	last := start
	for i := fl.written; i < n; i++ {
		if err := fl.write(i, body); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			progress("filled %d/%d (%.0f events/s)", i, n, float64(i-fl.written)/time.Since(start).Seconds())
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if err := fl.publishAll(); err != nil {
		return err
	}
	// The agent has indexed every subject whose bucket ended (and its
	// grace) before now.
	if err := fl.index(time.Now()); err != nil {
		return err
	}
	select {
	case <-fl.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	fl.written = n
	return nil
}

func (fl *filler) write(i int, body []byte) error {
	id, accepted := fl.id(i), fl.at(i)
	delivered := accepted.Add(30 * time.Millisecond)
	if round := delivered.UnixNano() / int64(history.DefaultFlushInterval); round != fl.round {
		if err := fl.publishAll(); err != nil {
			return err
		}
		if err := fl.index(delivered); err != nil {
			return err
		}
		fl.round = round
	}
	ev := &rivorav1.Event{
		EventId: id, DestinationId: "hist-get", CustomerId: "bench", LaneKey: "lane-" + strconv.Itoa(i%10_000),
		Type: "bench.history", Payload: body, ContentType: "application/json", AcceptedAt: timestamppb.New(accepted),
	}
	o := &rivorav1.EventOutcome{
		Kind: rivorav1.EventOutcome_KIND_DELIVERED, EventId: id, DestinationId: ev.DestinationId, CustomerId: ev.CustomerId,
		LaneKey: ev.LaneKey, Type: ev.Type, AcceptedAt: ev.AcceptedAt,
		Attempt: &rivorav1.Attempt{Number: 1, At: timestamppb.New(accepted.Add(10 * time.Millisecond)), StatusCode: 200, Duration: durationpb.New(20 * time.Millisecond)},
	}
	b := fl.batch(history.OutcomeSubject(delivered, id, accepted))
	b.batch.Outcomes = append(b.batch.Outcomes, o)
	b.batch.OutcomeTimes = append(b.batch.OutcomeTimes, delivered.UnixNano())
	b.bytes += proto.Size(o)
	b.ids = append(b.ids, id)
	if err := fl.bound(b); err != nil {
		return err
	}
	b = fl.batch(history.BodySubject(delivered, id, accepted))
	b.batch.Events = append(b.batch.Events, ev)
	b.bytes += proto.Size(ev)
	b.ids = append(b.ids, id)
	return fl.bound(b)
}

func (fl *filler) batch(subject string) *fillBatch {
	if fl.batches == nil {
		fl.batches = make(map[string]*fillBatch)
	}
	b := fl.batches[subject]
	if b == nil {
		b = &fillBatch{subject: subject}
		fl.batches[subject] = b
		fl.order = append(fl.order, b)
	}
	return b
}

// bound publishes b when it reaches the writer's size bounds.
func (fl *filler) bound(b *fillBatch) error {
	if b.bytes < history.DefaultMaxBatchBytes && len(b.batch.Outcomes)+len(b.batch.Events) < history.DefaultMaxBatchRecords {
		return nil
	}
	delete(fl.batches, b.subject)
	err := fl.publish(b)
	b.batch, b.ids = rivorav1.HistoryBatch{}, nil // publishAll skips it
	return err
}

func (fl *filler) publishAll() error {
	for _, b := range fl.order {
		if len(b.batch.Outcomes)+len(b.batch.Events) > 0 {
			if err := fl.publish(b); err != nil {
				return err
			}
		}
	}
	clear(fl.batches)
	fl.order = fl.order[:0]
	return nil
}

func (fl *filler) publish(b *fillBatch) error {
	data, err := proto.Marshal(&b.batch)
	if err != nil {
		return err
	}
	// A long stall wait: the server may fall behind for a moment (block
	// rolls, fsyncs), and a filler has nothing better to do.
	ack, err := fl.js.PublishAsync(b.subject, data, jetstream.WithStallWait(time.Minute))
	if err != nil {
		return err
	}
	fl.msgs++
	if fl.unindexed == nil {
		fl.unindexed = make(map[string]*fillSubject)
		fl.subjectMsgs = make(map[string]uint64)
	}
	fl.subjectMsgs[b.subject]++
	s := fl.unindexed[b.subject]
	if s == nil {
		s = &fillSubject{subject: b.subject, due: history.IndexDue(b.subject)}
		fl.unindexed[b.subject] = s
		if fl.dueOrder == nil {
			fl.dueOrder = make(map[string][]*fillSubject)
		}
		stream := b.subject[:len("history.o")]
		fl.dueOrder[stream] = append(fl.dueOrder[stream], s)
	}
	s.batches = append(s.batches, fillPublished{ack: ack, ids: b.ids})
	return nil
}

// index writes the index of every subject due by now (write time), as
// the agent's history writer does: its batches' sequences and ids.
func (fl *filler) index(now time.Time) error {
	for stream, order := range fl.dueOrder {
		for len(order) > 0 && !now.Before(order[0].due) {
			if err := fl.writeIndex(order[0]); err != nil {
				return err
			}
			order = order[1:]
		}
		fl.dueOrder[stream] = order
	}
	return nil
}

// writeIndex appends s's index, once every batch of it is stored.
func (fl *filler) writeIndex(s *fillSubject) error {
	delete(fl.unindexed, s.subject)
	batches := make([]history.IndexedBatch, 0, len(s.batches))
	for _, p := range s.batches {
		select {
		case ack := <-p.ack.Ok():
			batches = append(batches, history.IndexedBatch{Seq: ack.Sequence, IDs: p.ids})
		case err := <-p.ack.Err():
			return fmt.Errorf("publish a batch of %s: %w", s.subject, err)
		}
	}
	if _, err := fl.js.PublishAsync(s.subject, history.EncodeIndex(batches, fl.subjectMsgs[s.subject]), jetstream.WithStallWait(time.Minute)); err != nil {
		return err
	}
	fl.msgs++
	fl.subjectMsgs[s.subject]++
	return nil
}

func (f *historyFlags) lookupPhase(ctx context.Context, root string, sizes []int) ([]histLookup, error) {
	part, err := partner.Start(partner.Options{CountOnly: true})
	if err != nil {
		return nil, err
	}
	defer part.Close()
	data := filepath.Join(root, "lookups", "data")
	p, err := f.start(data, "lookups.log")
	if err != nil {
		return nil, err
	}
	defer p.kill()
	admin, _, events := f.clients(p.url())
	if err := createDestination(ctx, admin, "hist-get", part.URL(), nil); err != nil {
		return nil, err
	}
	nc, err := nats.Connect("nats://"+p.natsAddr, nats.Name("rivora-bench-history"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(f.pubPending))
	if err != nil {
		return nil, err
	}
	largest := sizes[len(sizes)-1]
	every := time.Second / time.Duration(f.rate)
	fl := &filler{f: f, js: js, every: every, base: time.Now().Add(-time.Duration(largest) * every), seed: 12}
	var out []histLookup
	for _, size := range sizes {
		progress("filling HISTORY to %d events (%d records, in batches), ids spread at %d events/s", size, 2*size, f.rate)
		start := time.Now()
		if err := fl.fill(ctx, size); err != nil {
			return nil, err
		}
		want := fl.msgs
		var bytes uint64
		if err := until(ctx, 10*time.Minute, 200*time.Millisecond, "the history holds every record", func() error {
			n, b, err := historyMsgs(ctx, js)
			if err == nil && n < want {
				err = fmt.Errorf("%d of %d messages", n, want)
			}
			bytes = b
			return err
		}); err != nil {
			return nil, err
		}
		res := histLookup{size: size, fill: time.Since(start), diskBytes: bytes}
		progress("filled in %s (%.1f MB in the stream)", res.fill.Round(time.Millisecond), mb(bytes))
		if err := f.measureLookups(ctx, p.url(), events, fl, &res, size == largest); err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// measureLookups times GetEvent of random retained ids, and (last: the
// newest event was accepted now) one ListEvents.
func (f *historyFlags) measureLookups(ctx context.Context, base string, events rivorav1connect.EventServiceClient, fl *filler, res *histLookup, last bool) error {
	indexed0, whole0 := lookupReads(ctx, base)
	defer func() {
		indexed1, whole1 := lookupReads(ctx, base)
		res.indexed, res.whole = indexed1-indexed0, whole1-whole0
		if indexed0 < 0 || indexed1 < 0 {
			res.indexed, res.whole = -1, -1
		}
	}()
	rng := rand.New(rand.NewPCG(7, uint64(res.size)))
	lat := make([]time.Duration, 0, f.lookups)
	for range f.lookups {
		i := rng.IntN(res.size)
		id := fl.id(i)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t0 := time.Now()
		resp, err := events.GetEvent(cctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
		took := time.Since(t0)
		cancel()
		if connect.CodeOf(err) == connect.CodeNotFound {
			// Counted and reported (the bench then fails), so the figures
			// of the other lookups are not lost.
			progress("GetEvent(%s, event %d): not found", id, i)
			res.missing = append(res.missing, i)
			continue
		}
		if err != nil {
			return fmt.Errorf("GetEvent(%s, event %d): %w", id, i, err)
		}
		if st := resp.Msg.GetState(); st != rivorav1.EventState_EVENT_STATE_DELIVERED || len(resp.Msg.GetAttempts()) != 1 {
			return fmt.Errorf("GetEvent(%s, event %d) = state %v with %d attempts, want delivered with 1", id, i, st, len(resp.Msg.GetAttempts()))
		}
		lat = append(lat, took)
	}
	slices.Sort(lat)
	res.p50, res.p99, res.worst = percentile(lat, 0.50), percentile(lat, 0.99), lat[len(lat)-1]
	progress("%d retained: events get p50 %.2f ms, p99 %.2f ms, max %.2f ms over %d lookups", res.size, ms(res.p50), ms(res.p99), ms(res.worst), len(lat))
	if !last {
		return nil
	}
	t0 := time.Now()
	l, err := events.ListEvents(ctx, connect.NewRequest(&rivorav1.ListEventsRequest{DestinationId: "hist-get", State: rivorav1.EventState_EVENT_STATE_DELIVERED, Limit: 100}))
	res.list = time.Since(t0)
	if err != nil {
		return fmt.Errorf("ListEvents: %w", err)
	}
	if res.listed = len(l.Msg.GetEvents()); res.listed != 100 {
		return fmt.Errorf("ListEvents(delivered, limit 100) listed %d", res.listed)
	}
	if newest := l.Msg.GetEvents()[0].GetEventId(); newest != fl.id(res.size-1) {
		return errors.New("ListEvents: the newest delivered event is not listed first")
	}
	progress("%d retained: events list (delivered, limit 100) %.1f ms", res.size, ms(res.list))
	return nil
}

// lookupReads is the agent's rivora_history_lookup_subjects_total: the
// subjects lookups read through their index, and whole (-1, -1 when it
// has no such series).
func lookupReads(ctx context.Context, base string) (indexed, whole float64) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return -1, -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1, -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1, -1
	}
	indexed, whole = -1, 0
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, `rivora_history_lookup_subjects_total{read="index"} `); ok {
			indexed, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
		if v, ok := strings.CutPrefix(line, `rivora_history_lookup_subjects_total{read="scan"} `); ok {
			whole, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if indexed < 0 {
		return -1, -1
	}
	return indexed, whole
}

func (f *historyFlags) report(mem *histMemory, looks []histLookup) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "history: %d-byte payloads, %d partitions\n", f.payload, f.partitions)
	fmt.Fprintln(tw, "measure\tvalue\tnote")
	out := map[string]float64{"payload_bytes": float64(f.payload)}
	order := []string{"payload_bytes"}
	if mem != nil {
		perEvent := (float64(mem.retainedInuse) - float64(mem.freshInuse)) / float64(f.events)
		rssPerEvent := (float64(mem.retainedRSS) - float64(mem.freshRSS)) / float64(f.events)
		fmt.Fprintf(tw, "delivered\t%d events in %.1f s\t%d lanes, %d destinations, dedup window %s; %d delivered outcomes in the history\n", f.events, mem.deliver.Seconds(), f.lanes, f.dests, f.dedup, mem.records)
		fmt.Fprintf(tw, "heap, restarted with them\t%.1f MB\tin use after two forced GCs; RSS %.1f MB\n", mb(mem.retainedInuse), mb(mem.retainedRSS))
		fmt.Fprintf(tw, "heap, fresh\t%.1f MB\tsame destinations, empty data dir restarted; RSS %.1f MB\n", mb(mem.freshInuse), mb(mem.freshRSS))
		fmt.Fprintf(tw, "per retained event\t%.1f B heap\t%.1f B RSS (target: within ~20 B)\n", perEvent, rssPerEvent)
		out["events"], out["heap_bytes_per_event"], out["rss_bytes_per_event"] = float64(f.events), round(perEvent, 1), round(rssPerEvent, 1)
		out["retained_heap_mb"], out["fresh_heap_mb"] = round(mb(mem.retainedInuse), 1), round(mb(mem.freshInuse), 1)
		order = append(order, "events", "heap_bytes_per_event", "rss_bytes_per_event", "retained_heap_mb", "fresh_heap_mb")
	}
	for _, l := range looks {
		fmt.Fprintf(tw, "events get, %d retained\tp50 %.2f ms, p99 %.2f ms\tmax %.2f ms over %d random ids via the API; filled in %.0f s, %.0f MB stream\n",
			l.size, ms(l.p50), ms(l.p99), ms(l.worst), f.lookups, l.fill.Seconds(), mb(l.diskBytes))
		k := strconv.Itoa(l.size)
		out["get_p50_ms_"+k], out["get_p99_ms_"+k] = round(ms(l.p50), 2), round(ms(l.p99), 2)
		order = append(order, "get_p50_ms_"+k, "get_p99_ms_"+k)
		if l.indexed >= 0 {
			fmt.Fprintf(tw, "subjects read, %d retained\t%.0f via their index, %.0f whole\tby the lookups (rivora_history_lookup_subjects_total); whole: no complete index (the newest buckets, history from before the index)\n", l.size, l.indexed, l.whole)
			out["indexed_reads_"+k], out["whole_reads_"+k] = l.indexed, l.whole
			order = append(order, "indexed_reads_"+k, "whole_reads_"+k)
		}
		if l.listed > 0 {
			fmt.Fprintf(tw, "events list, %d retained\t%.1f ms\tdelivered, limit 100 (the newest bucket)\n", l.size, ms(l.list))
			out["list_ms_"+k] = round(ms(l.list), 1)
			order = append(order, "list_ms_"+k)
		}
	}
	tw.Flush()
	for _, l := range looks {
		if l.size >= 10_000_000 {
			verdict := "met"
			if l.p99 >= 50*time.Millisecond {
				verdict = "MISSED"
			}
			fmt.Printf("  target (events get p99 < 50 ms at 10M retained events): %s\n", verdict)
		}
	}
	printJSON(out, order)
}
