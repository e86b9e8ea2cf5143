package owner_test

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/verdict"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// fenceCell is one embedded server with INGEST and history, on which the
// tests open a partition themselves, with leases they hold.
type fenceCell struct {
	t      *testing.T
	srv    *natsd.Server
	js     jetstream.JetStream
	deps   owner.Deps
	locker *ownership.Local
	p      int
}

func startFenceCell(t *testing.T) *fenceCell {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, log)
	if err != nil {
		t.Fatalf("start embedded nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	js := srv.JetStream()
	reg := destinations.NewRegistry()
	if _, err := ingest.New(ctx, js, reg, ingest.Config{}, log); err != nil {
		t.Fatal(err)
	}
	hist, err := history.New(ctx, js, history.Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runHistory(t, hist)
	return &fenceCell{
		t: t, srv: srv, js: js, locker: ownership.NewLocal(), p: lanes.Partition("orders", partitions),
		deps: owner.Deps{JS: js, Registry: reg, History: hist, Archive: mustDir(t, t.TempDir()), Clock: clock.Real{}, Log: log, DedupWindow: ingest.DefaultDedupWindow},
	}
}

// open opens (rebuilds) the partition under lease into a fresh scheduler,
// as an agent does after a restart.
func (c *fenceCell) open(lease *ownership.Lease) (*owner.Partition, *scheduler.Scheduler, error) {
	deps := c.deps
	deps.Scheduler = scheduler.New(clock.Real{})
	part, err := owner.Open(context.Background(), c.p, deps, lease)
	return part, deps.Scheduler, err
}

func (c *fenceCell) acquire() *ownership.Lease {
	c.t.Helper()
	lease, err := c.locker.TryAcquire(context.Background(), c.p)
	if err != nil {
		c.t.Fatal(err)
	}
	return lease
}

// storeEvent writes an event into its lane as the owner stores it, and
// returns its lane-store sequence.
func (c *fenceCell) storeEvent(id, lane string) uint64 {
	c.t.Helper()
	ev := &rivorav1.Event{EventId: id, DestinationId: "orders", CustomerId: "acme", LaneKey: lane, Type: "t", Payload: []byte(`{}`), AcceptedAt: timestamppb.Now()}
	data, err := proto.Marshal(ev)
	if err != nil {
		c.t.Fatal(err)
	}
	msg := nats.NewMsg(laneID(lane).Subject(c.p))
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, id)
	ack, err := c.js.PublishMsg(context.Background(), msg)
	if err != nil {
		c.t.Fatal(err)
	}
	return ack.Sequence
}

// writeLedger publishes a ledger entry stamped with epoch, straight into
// the partition's ledger: what an owner holding that epoch would write.
func (c *fenceCell) writeLedger(subject string, m proto.Message, epoch uint64, rollup bool) {
	c.t.Helper()
	data, err := proto.Marshal(m)
	if err != nil {
		c.t.Fatal(err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(owner.EpochHeader, strconv.FormatUint(epoch, 10))
	if rollup {
		msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	}
	if _, err := c.js.PublishMsg(context.Background(), msg); err != nil {
		c.t.Fatalf("write ledger %s: %v", subject, err)
	}
}

func (c *fenceCell) streamState(name string) jetstream.StreamState {
	c.t.Helper()
	st, err := c.js.Stream(context.Background(), name)
	if err != nil {
		c.t.Fatalf("stream %s: %v", name, err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		c.t.Fatalf("stream %s info: %v", name, err)
	}
	return info.State
}

func laneID(key string) lanes.ID { return lanes.ID{Destination: "orders", Customer: "acme", Key: key} }

func headRecord(seq uint64, id string, attempts int32, notBefore time.Time) *rivorav1.LaneHead {
	return &rivorav1.LaneHead{
		Seq: seq, EventId: id, Attempts: attempts, NotBefore: timestamppb.New(notBefore),
		LastStatus: 503, LastError: "HTTP 503 attempt " + strconv.Itoa(int(attempts)),
		FirstAttemptAt: timestamppb.New(notBefore.Add(-time.Hour)), LastAttemptAt: timestamppb.New(notBefore.Add(-time.Minute)),
		HeldByDestination: true,
	}
}

// A ledger that holds an entry written under a newer epoch than this
// owner's lease means someone else owns the partition now: the owner
// refuses to open it (ErrFenced) instead of delivering from stale state.
// An entry under its own epoch is fine.
func TestOpenRefusesLedgerOfNewerEpoch(t *testing.T) {
	c := startFenceCell(t)
	lease := c.acquire()
	if _, _, err := c.open(lease); err != nil {
		t.Fatalf("open on an empty store: %v", err)
	}
	seq := c.storeEvent("ev-1", "u1")
	notBefore := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	head := laneID("u1").HeadSubject(c.p)

	// Written under this lease's own epoch: the rebuild uses it.
	c.writeLedger(head, headRecord(seq, "ev-1", 3, notBefore), lease.Epoch, true)
	_, sched, err := c.open(lease)
	if err != nil {
		t.Fatalf("reopen with the ledger at this lease's epoch: %v", err)
	}
	loc, ok := sched.Find("ev-1")
	if !ok || loc.Head.Attempts != 3 || !loc.Head.NotBefore.Equal(notBefore) {
		t.Fatalf("rebuilt head %+v (found %v), want 3 attempts, not before %s", loc.Head, ok, notBefore)
	}

	// A newer owner recorded an attempt since.
	c.writeLedger(head, headRecord(seq, "ev-1", 4, notBefore), lease.Epoch+1000, true)
	part, sched, err := c.open(lease)
	if !errors.Is(err, owner.ErrFenced) {
		t.Fatalf("open with epoch %d over a ledger entry of epoch %d: %v (partition %v), want ErrFenced", lease.Epoch, lease.Epoch+1000, err, part)
	}
	if _, ok := sched.Find("ev-1"); ok {
		t.Fatal("a fenced-off open installed the lane in the scheduler")
	}
}

// Entries an owner wrote after it had lost the partition (their epoch is
// older than one written earlier in the ledger) are ignored by the
// rebuild: a stale head record does not roll the attempt state back, a
// stale dead letter does not kill a pending event, a stale done record
// does not drop one. The same entries under the current epoch do take
// effect, so the observations below can tell the difference.
func TestRebuildIgnoresEntriesOfStaleEpochs(t *testing.T) {
	c := startFenceCell(t)
	lease := c.acquire()
	if _, _, err := c.open(lease); err != nil {
		t.Fatal(err)
	}
	current, stale := lease.Epoch, lease.Epoch-1000
	headSeq := c.storeEvent("head-1", "u1")
	nextSeq := c.storeEvent("head-2", "u1")
	otherSeq := c.storeEvent("other-1", "u2")
	newer := time.Now().Add(2 * time.Hour).Truncate(time.Microsecond)
	older := time.Now().Add(time.Minute).Truncate(time.Microsecond)

	// The current owner's head record (written as the owner writes it,
	// with rollup), then an old owner's writes. The stale head record
	// carries no rollup here: with one it would erase the current
	// record before the rebuild could compare epochs.
	c.writeLedger(laneID("u1").HeadSubject(c.p), headRecord(headSeq, "head-1", 7, newer), current, true)
	c.writeLedger(laneID("u1").HeadSubject(c.p), headRecord(headSeq, "head-1", 2, older), stale, false)
	c.writeLedger(lanes.DeadSubject(c.p, otherSeq), &rivorav1.DeadLetter{
		Event:     &rivorav1.Event{EventId: "other-1", DestinationId: "orders", CustomerId: "acme", LaneKey: "u2"},
		Attempts:  5,
		Reason:    rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS,
		Partition: uint32(c.p),
		LaneSeq:   otherSeq,
	}, stale, false)
	c.writeDone([]uint64{nextSeq}, stale)

	part, sched, err := c.open(lease)
	if err != nil {
		t.Fatalf("rebuild over stale entries: %v", err)
	}
	loc, ok := sched.Find("head-1")
	if !ok || loc.Head.Attempts != 7 || !loc.Head.NotBefore.Equal(newer) || loc.Head.LastError != "HTTP 503 attempt 7" {
		t.Fatalf("rebuilt head %+v (found %v), want the current epoch's: 7 attempts, not before %s", loc.Head, ok, newer)
	}
	if loc, ok := sched.Find("head-2"); !ok || loc.Ahead != 1 {
		t.Fatalf("event listed done by a stale owner: %+v (pending %v), want pending behind head-1", loc, ok)
	}
	if _, ok := sched.Find("other-1"); !ok {
		t.Fatal("event dead-lettered by a stale owner is no longer pending")
	}
	if n := part.Unarchived("orders"); n != 0 {
		t.Fatalf("%d dead letters queued for the archive, want the stale one ignored", n)
	}

	// Control: the same dead letter and done record under the current
	// epoch are obeyed.
	c.writeLedger(lanes.DeadSubject(c.p, otherSeq), &rivorav1.DeadLetter{
		Event:     &rivorav1.Event{EventId: "other-1", DestinationId: "orders", CustomerId: "acme", LaneKey: "u2"},
		Attempts:  5,
		Reason:    rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS,
		Partition: uint32(c.p),
		LaneSeq:   otherSeq,
	}, current, false)
	c.writeDone([]uint64{nextSeq}, current)
	part, sched, err = c.open(lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sched.Find("other-1"); ok {
		t.Fatal("control: a dead letter of the current epoch did not take the event out of its lane")
	}
	if n := part.Unarchived("orders"); n != 1 {
		t.Fatalf("control: %d dead letters queued, want 1", n)
	}
	if _, ok := sched.Find("head-2"); ok {
		t.Fatal("control: an event listed done under the current epoch is pending again")
	}
	if loc, ok := sched.Find("head-1"); !ok || loc.Head.Attempts != 7 {
		t.Fatalf("control: head %+v (found %v), want 7 attempts", loc.Head, ok)
	}
}

// writeDone appends a done record (delivered lane-store sequences), as
// the owner's reclaim loop does.
func (c *fenceCell) writeDone(seqs []uint64, epoch uint64) {
	c.t.Helper()
	var data []byte
	var prev uint64
	for _, s := range seqs { // sorted uvarint deltas, as the owner encodes them
		data = binary.AppendUvarint(data, s-prev)
		prev = s
	}
	msg := nats.NewMsg(lanes.DoneSubject(c.p))
	msg.Data = data
	msg.Header.Set(owner.EpochHeader, strconv.FormatUint(epoch, 10))
	if _, err := c.js.PublishMsg(context.Background(), msg); err != nil {
		c.t.Fatal(err)
	}
}

// Once its lease is released, a running partition stops with ErrFenced,
// says it is no longer owned, and writes nothing more: appends fail and
// an attempt's outcome is not recorded in the ledger.
func TestReleasedLeaseStopsWrites(t *testing.T) {
	c := startFenceCell(t)
	list := c.deps.Registry.Replace(time.Now(), []*rivorav1.Destination{dest("orders", "http://127.0.0.1:1/hook", 50)})
	lease := c.acquire()
	part, sched, err := c.open(lease)
	if err != nil {
		t.Fatal(err)
	}
	sched.SetLimits("orders", c.p, list[0].Limits)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- part.Run(ctx) }()
	schedDone := make(chan struct{})
	go func() {
		defer close(schedDone)
		_ = sched.Run(ctx)
	}()
	defer func() {
		cancel()
		<-schedDone
	}()

	seqOf := 0
	appendOne := func(lane string) (string, error) {
		seqOf++
		id := "ev-" + strconv.Itoa(seqOf)
		ev := &rivorav1.Event{EventId: id, DestinationId: "orders", CustomerId: "acme", LaneKey: lane, Type: "t", Payload: []byte(`{}`), AcceptedAt: timestamppb.Now()}
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		_, err = part.Append(ctx, []owner.Item{{Event: ev, Data: data, MsgID: id}})
		return id, err
	}
	// Until the partition has drained INGEST, appends go through INGEST
	// (which any agent may write). Wait for the direct path: an append that
	// leaves INGEST untouched.
	poll.True(t, "appends go straight into the lanes", 10*time.Second, func() bool {
		before := c.streamState(lanes.IngestStream).LastSeq
		if _, err := appendOne("u1"); err != nil {
			t.Fatalf("append while owned: %v", err)
		}
		return c.streamState(lanes.IngestStream).LastSeq == before
	})
	if _, err := appendOne("u2"); err != nil {
		t.Fatalf("append while owned: %v", err)
	}
	// One attempt per lane: u1's head, then u2's.
	var attempts []*scheduler.Attempt
	for len(attempts) < 2 {
		select {
		case a := <-sched.Attempts():
			attempts = append(attempts, a)
		case <-time.After(10 * time.Second):
			t.Fatalf("scheduler handed out %d attempts, want 2", len(attempts))
		}
	}
	fail := delivery.Result{Status: 503, Err: errors.New("HTTP 503"), Duration: time.Millisecond}
	complete := func(a *scheduler.Attempt) {
		ev, err := part.Load(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		// Settled as a worker would after Observe: the first failure
		// of a destination with no success yet is held, its head
		// recorded in the ledger.
		v := verdict.Decide(verdict.Facts{
			Attempt: a, Now: time.Now(), PartitionOpen: true, DestinationKnown: true, Owned: true,
			Policy: retry.DefaultPolicy(), WindowStart: ev.GetAcceptedAt().AsTime(), Result: &fail,
		})
		if v.Kind != verdict.Hold || !v.Ledger {
			t.Fatalf("verdict %v (ledger %v), want a hold recorded in the ledger", v.Kind, v.Ledger)
		}
		_, _ = owner.Settle(ctx, sched, part, a, ev, v, fail)
	}
	ledger := lanes.LedgerStream(c.p)
	complete(attempts[0])
	if st := c.streamState(ledger); st.Msgs != 1 {
		t.Fatalf("a failed attempt under a valid lease left %d ledger records, want its head record", st.Msgs)
	}
	if !part.Owned() {
		t.Fatal("not owned while the lease is held")
	}

	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if part.Owned() {
		t.Fatal("still owned after the lease was released")
	}
	select {
	case err := <-runErr:
		if !errors.Is(err, owner.ErrFenced) {
			t.Fatalf("Run after the lease was released: %v, want ErrFenced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("partition still running after its lease was released")
	}
	lanesBefore := c.streamState(lanes.LanesStream(c.p)).LastSeq
	id, err := appendOne("u1")
	if err == nil {
		t.Fatal("append after the lease was released succeeded")
	}
	if got := c.streamState(lanes.LanesStream(c.p)).LastSeq; got != lanesBefore {
		t.Fatalf("lane store went from seq %d to %d after the lease was released", lanesBefore, got)
	}
	if _, ok := sched.Find(id); ok {
		t.Fatalf("event %s appended after the release is scheduled", id)
	}
	ledgerBefore := c.streamState(ledger).LastSeq
	complete(attempts[1])
	if got := c.streamState(ledger).LastSeq; got != ledgerBefore {
		t.Fatalf("ledger went from seq %d to %d: an attempt was recorded after the lease was released", ledgerBefore, got)
	}
}
