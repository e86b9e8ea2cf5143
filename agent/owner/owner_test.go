package owner_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/internal/ssrf"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

const (
	partitions = 2
	secret     = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// ---- partner ---------------------------------------------------------------

// newPartner starts a partner (testkit/partner) that verifies nothing and
// answers status where fail says so for an event id's n-th request (this
// one included), 200 otherwise.
func newPartner(t *testing.T, status int, fail func(id string, n int) bool) *partner.Partner {
	var answer func(partner.Request) int
	if fail != nil {
		answer = func(r partner.Request) int {
			if fail(r.ID, r.Sent) {
				return status
			}
			return 0
		}
	}
	return partner.New(t, partner.Options{Answer: answer, RefusalBody: "boom\n"})
}

// ---- node: one set of partition owners over one embedded server -------------

type node struct {
	t     *testing.T
	srv   *natsd.Server
	reg   *destinations.Registry
	subs  *subscriptions.Table
	sched *scheduler.Scheduler
	gw    *ingest.Gateway
	hist  *history.History
	parts []*owner.Partition
	// deps and leases are what the partitions were opened with (a test
	// reopens one as the agent does after it failed).
	deps   owner.Deps
	leases []*ownership.Lease
	// applied is the config version the node has applied (Deps.Applied).
	applied atomic.Uint64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// open starts an embedded server on dir and opens (rebuilds) every
// partition. Nothing runs until run.
func open(t *testing.T, dir string, arch archive.Archive, dests []*rivorav1.Destination) *node {
	t.Helper()
	return openWith(t, dir, arch, dests, "", slog.New(slog.DiscardHandler))
}

// openWith is open with the owners' pending snapshots kept in snapshotDir
// ("": none) and their log on log.
func openWith(t *testing.T, dir string, arch archive.Archive, dests []*rivorav1.Destination, snapshotDir string, log *slog.Logger) *node {
	t.Helper()
	return openTuned(t, dir, arch, dests, log, func(deps *owner.Deps) { deps.SnapshotDir = snapshotDir })
}

// openDraining is open with a short duplicate window for the lane
// stores: they keep done events for their window (dedupKeep), and a test
// that waits for the pending store to empty would wait two minutes.
func openDraining(t *testing.T, dir string, arch archive.Archive, dests []*rivorav1.Destination) *node {
	t.Helper()
	return openTuned(t, dir, arch, dests, slog.New(slog.DiscardHandler), func(deps *owner.Deps) { deps.DedupWindow = drainingWindow })
}

// drainingWindow is openDraining's duplicate window.
const drainingWindow = 2 * time.Second

// openTuned is open with the owners' log on log and their deps changed by
// tune.
func openTuned(t *testing.T, dir string, arch archive.Archive, dests []*rivorav1.Destination, log *slog.Logger, tune func(*owner.Deps)) *node {
	t.Helper()
	ctx := context.Background()
	srv, err := natsd.Start(natsd.Config{DataDir: dir}, log)
	if err != nil {
		t.Fatalf("start embedded nats: %v", err)
	}
	n := &node{t: t, srv: srv, reg: destinations.NewRegistry(), subs: subscriptions.NewTable(), sched: scheduler.New(clock.Real{})}
	fail := func(err error) {
		srv.Shutdown()
		t.Fatal(err)
	}
	js := srv.JetStream()
	if n.gw, err = ingest.New(ctx, js, n.reg, ingest.Config{Partitions: ingest.FixedCount(partitions), Subscriptions: n.subs}, log); err != nil {
		fail(err)
	}
	hist, err := history.New(ctx, js, history.Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		fail(err)
	}
	runHistory(t, hist)
	n.hist = hist
	fwd, err := ingest.NewForwardedCheck(ctx, js, ingest.DefaultDedupWindow, 1)
	if err != nil {
		fail(err)
	}
	deps := owner.Deps{JS: js, Scheduler: n.sched, Registry: n.reg, Subscriptions: n.subs, Applied: n.applied.Load, History: hist, Archive: arch, Clock: clock.Real{}, Log: log, DedupWindow: ingest.DefaultDedupWindow, Forwarded: fwd}
	tune(&deps)
	locker := ownership.NewLocal()
	for p := range partitions {
		lease, err := locker.TryAcquire(ctx, p)
		if err != nil {
			fail(err)
		}
		part, err := owner.Open(ctx, p, deps, lease)
		if err != nil {
			fail(err)
		}
		n.parts = append(n.parts, part)
		n.leases = append(n.leases, lease)
	}
	n.deps = deps
	list := n.reg.Replace(time.Now(), dests)
	for _, d := range list {
		p := lanes.Partition(d.ID, partitions)
		n.sched.SetLimits(d.ID, p, d.Limits)
		n.sched.SetClass(d.ID, p, d.Class)
	}
	t.Cleanup(n.stop)
	return n
}

// run starts the partitions' loops and, with workers, the scheduler and a
// delivery worker doing what the agent's workers do.
func (n *node) run(workers bool) {
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	for _, part := range n.parts {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := part.Run(ctx); err != nil {
				n.t.Errorf("partition: %v", err)
			}
		}()
	}
	if !workers {
		return
	}
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		_ = n.sched.Run(ctx)
	}()
	go func() {
		defer n.wg.Done()
		w := owner.Worker{
			Scheduler: n.sched, Sender: delivery.NewSender("rivora/owner-test", ssrf.New(ssrf.Loopback)),
			Clock: clock.Real{}, Log: slog.New(slog.DiscardHandler),
		}
		for {
			var att *scheduler.Attempt
			select {
			case att = <-n.sched.Attempts():
			case <-ctx.Done():
				return
			}
			// Every attempt ends in exactly one settlement.
			if v, err := w.Attempt(context.WithoutCancel(ctx), n.parts[att.Lane.Partition], att); err != nil {
				n.t.Errorf("attempt %s (verdict %v): %v", att.Entry.EventID, v.Kind, err)
			}
			if !n.sched.Settled(att) {
				n.t.Errorf("attempt %s was not settled", att.Entry.EventID)
			}
		}
	}()
}

// stop ends every loop and shuts the server down; idempotent.
func (n *node) stop() {
	if n.srv == nil {
		return
	}
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
	n.srv.Shutdown()
	n.srv = nil
}

func (n *node) publish(dest, lane string) string {
	n.t.Helper()
	resp, err := n.gw.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{
		DestinationId: dest, CustomerId: "acme", LaneKey: lane, Type: "t", Payload: []byte(`{}`),
	}))
	if err != nil {
		n.t.Fatalf("publish: %v", err)
	}
	return resp.Msg.GetEventId()
}

func (n *node) streamMsgs(name string) uint64 {
	n.t.Helper()
	st, err := n.srv.JetStream().Stream(context.Background(), name)
	if err != nil {
		n.t.Fatalf("stream %s: %v", name, err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		n.t.Fatalf("stream %s info: %v", name, err)
	}
	return info.State.Msgs
}

func (n *node) totalMsgs(name func(int) string) uint64 {
	var sum uint64
	for p := range partitions {
		sum += n.streamMsgs(name(p))
	}
	return sum
}

func dest(id, url string, maxAttempts int32) *rivorav1.Destination {
	return &rivorav1.Destination{Id: id, Url: url, Secret: secret, Limits: &rivorav1.Limits{
		RatePerSecond: 1000, Burst: 1000, MaxInFlight: 16, MaxAttempts: maxAttempts,
	}}
}

// ---- tests -----------------------------------------------------------------

// Events move from INGEST into lanes, go out in lane order (a failing head
// holds only its lane), and once delivered leave no trace in the pending
// store: INGEST acked, lane store reclaimed, ledger head records purged.
func TestMoveDeliverReclaim(t *testing.T) {
	var slowHead string
	var mu sync.Mutex
	p := newPartner(t, http.StatusBadRequest, func(id string, n int) bool {
		mu.Lock()
		defer mu.Unlock()
		return id == slowHead && n == 1
	})
	n := openDraining(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", p.URL(), 5), dest("billing", p.URL(), 5)})
	want := make(map[string][]string)
	for i := range 4 {
		for _, l := range []struct{ dest, lane string }{{"orders", "slow"}, {"orders", "u1"}, {"billing", "u2"}} {
			id := n.publish(l.dest, l.lane)
			if l.lane == "slow" && i == 0 {
				mu.Lock()
				slowHead = id
				mu.Unlock()
			}
			want[l.lane] = append(want[l.lane], id)
		}
	}
	n.run(true)
	poll.True(t, "every event delivered", 15*time.Second, func() bool {
		got := p.DeliveredByLane()
		for lane, ids := range want {
			if len(got[lane]) < len(ids) {
				return false
			}
		}
		return true
	})
	for lane, ids := range want {
		if got := p.DeliveredByLane()[lane]; !slices.Equal(got, ids) {
			t.Fatalf("lane %s delivered %v, want %v in order", lane, got, ids)
		}
	}
	if r := p.Sent(want["slow"][0]); r != 2 {
		t.Fatalf("failing head was sent %d times, want 2 (one failure, one retry)", r)
	}
	// The partner sees a delivery before its answer reaches the worker.
	poll.True(t, "scheduler empty", 10*time.Second, func() bool {
		return n.sched.Pending("orders")+n.sched.Pending("billing") == 0
	})
	poll.True(t, "pending store emptied once the duplicate window passed", 20*time.Second, func() bool {
		return n.streamMsgs(lanes.IngestStream) == 0 && n.totalMsgs(lanes.LanesStream) == 0 && n.totalMsgs(lanes.LedgerStream) == 0
	})
}

// After a restart the scheduler holds exactly what the store says: pending
// lanes in order, and the failed head's attempt state from the ledger.
func TestRebuildRestoresLanesAndAttempts(t *testing.T) {
	var failID string
	var mu sync.Mutex
	// 503: the destination's fault, the lane is held by it.
	p := newPartner(t, http.StatusServiceUnavailable, func(id string, _ int) bool {
		mu.Lock()
		defer mu.Unlock()
		return id == failID
	})
	dir, arch := t.TempDir(), mustDir(t, t.TempDir())
	dests := []*rivorav1.Destination{dest("orders", p.URL(), 50)}
	n := open(t, dir, arch, dests)
	mu.Lock()
	failID = n.publish("orders", "stuck")
	mu.Unlock()
	behind := []string{n.publish("orders", "stuck"), n.publish("orders", "stuck")}
	done := n.publish("orders", "free")
	n.run(true)
	poll.True(t, "head failed and recorded", 10*time.Second, func() bool {
		loc, ok := n.sched.Find(failID)
		return ok && !loc.Head.LastAttemptAt.IsZero() && !loc.InFlight
	})
	// The stuck lane holds the low-water mark, so the delivered event's
	// space stays; what makes it stay delivered across a restart is the
	// done record in the ledger (beside the failed head's record).
	poll.True(t, "free lane delivered and recorded done", 10*time.Second, func() bool {
		return len(p.DeliveredByLane()["free"]) == 1 && n.totalMsgs(lanes.LedgerStream) >= 2
	})
	// Accepted just before the stop: still in INGEST or already moved.
	late := n.publish("orders", "stuck")
	n.stop()
	before, ok := n.sched.Find(failID)
	if !ok {
		t.Fatal("failed head not pending after stop")
	}

	n2 := open(t, dir, arch, dests)
	after, ok := n2.sched.Find(failID)
	if !ok {
		t.Fatalf("failed head %s not rebuilt", failID)
	}
	if after.Ahead != 0 || after.Head.Attempts != before.Head.Attempts || after.Head.LastStatus != 503 ||
		after.Head.LastError != before.Head.LastError || after.Head.NotBefore.After(before.Head.NotBefore) ||
		!after.Head.FirstAttemptAt.Equal(before.Head.FirstAttemptAt) || !after.Head.HeldByDestination {
		t.Fatalf("rebuilt head state %+v\nwant (as before the stop) %+v", after.Head, before.Head)
	}
	if !strings.HasPrefix(after.Head.LastError, "HTTP 503") {
		t.Fatalf("rebuilt last error %q", after.Head.LastError)
	}
	for i, id := range behind {
		loc, ok := n2.sched.Find(id)
		if !ok || loc.Ahead != i+1 || loc.Lane.Key != "stuck" {
			t.Fatalf("event %s after rebuild: %+v (pending %v), want %d ahead in lane stuck", id, loc, ok, i+1)
		}
	}
	if _, ok := n2.sched.Find(done); ok {
		t.Fatalf("delivered event %s came back after a restart", done)
	}
	// Only the mover runs: the late event reaches its place behind the others.
	n2.run(false)
	poll.True(t, "late event moved into its lane", 10*time.Second, func() bool {
		loc, ok := n2.sched.Find(late)
		return ok && loc.Ahead == 3
	})
	if got := n2.sched.Pending("orders"); got != 4 {
		t.Fatalf("pending after rebuild = %d, want 4", got)
	}
}

// While the archive is down, a dead letter stays in the ledger and the lane
// moves on; across a restart it is neither lost nor delivered again; when
// the archive is back it is written once and leaves the ledger.
func TestDeadLetterWaitsForArchive(t *testing.T) {
	var deadID string
	var mu sync.Mutex
	p := newPartner(t, http.StatusBadRequest, func(id string, _ int) bool {
		mu.Lock()
		defer mu.Unlock()
		return id == deadID
	})
	dir, archRoot := t.TempDir(), t.TempDir()
	arch := mustDir(t, archRoot)
	block := filepath.Join(archRoot, "deadletter")
	if err := os.WriteFile(block, nil, 0o644); err != nil { // a file where the archive needs a directory
		t.Fatal(err)
	}
	dests := []*rivorav1.Destination{dest("orders", p.URL(), 2)}
	n := openDraining(t, dir, arch, dests)
	mu.Lock()
	deadID = n.publish("orders", "u1")
	mu.Unlock()
	next := n.publish("orders", "u1")
	n.run(true)
	poll.True(t, "lane continues past the dead event", 10*time.Second, func() bool {
		return slices.Equal(p.DeliveredByLane()["u1"], []string{next})
	})
	if r := p.Sent(deadID); r != 2 {
		t.Fatalf("dead event sent %d times, want max_attempts = 2", r)
	}
	part := lanes.Partition("orders", partitions)
	ledger, err := n.srv.JetStream().Stream(context.Background(), lanes.LedgerStream(part))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ledger.GetLastMsgForSubject(context.Background(), fmt.Sprintf("ledger.%d.dead.>", part))
	if err != nil {
		t.Fatalf("dead letter not in the ledger while the archive is down: %v", err)
	}
	dl := &rivorav1.DeadLetter{}
	if err := proto.Unmarshal(raw.Data, dl); err != nil {
		t.Fatal(err)
	}
	if dl.GetEvent().GetEventId() != deadID || dl.GetAttempts() != 2 || dl.GetLastStatus() != 400 || dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS {
		t.Fatalf("ledger dead letter = %v", dl)
	}
	n.stop()

	n2 := openDraining(t, dir, arch, dests)
	if _, ok := n2.sched.Find(deadID); ok {
		t.Fatal("dead event is pending again after a restart")
	}
	n2.run(true)
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	var objects []string
	poll.True(t, "dead letter archived once the archive is back", 20*time.Second, func() bool {
		objects = findObjects(t, archRoot)
		return len(objects) > 0 && n2.streamMsgs(lanes.LedgerStream(part)) == 0
	})
	var letters []*rivorav1.DeadLetter
	for _, o := range objects {
		letters = append(letters, readObject(t, o)...)
	}
	if len(letters) != 1 || letters[0].GetEvent().GetEventId() != deadID {
		t.Fatalf("archive holds %d letters (%v), want exactly %s", len(letters), letters, deadID)
	}
	if !strings.Contains(objects[0], filepath.Join("deadletter", "orders")) {
		t.Fatalf("object %s not under deadletter/orders", objects[0])
	}
	if r := p.Sent(deadID); r != 2 {
		t.Fatalf("dead event sent %d times in all, want 2", r)
	}
}

// An owner that fetched events from INGEST and stopped (or crashed) before
// moving them leaves them unacknowledged. The next owner must move them
// first, before anything accepted later on the same lane, and without
// waiting for their ack deadline.
func TestUnmovedEventsKeepTheirPlaceAfterRestart(t *testing.T) {
	p := newPartner(t, http.StatusBadRequest, nil)
	dir, arch := t.TempDir(), mustDir(t, t.TempDir())
	dests := []*rivorav1.Destination{dest("orders", p.URL(), 5)}
	n := open(t, dir, arch, dests)
	first := n.publish("orders", "u1")
	// The previous owner's mover got the message and never acked it.
	part := lanes.Partition("orders", partitions)
	cons, err := n.srv.JetStream().Consumer(context.Background(), lanes.IngestStream, fmt.Sprintf("mover-%d", part))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var fetched int
	for range batch.Messages() {
		fetched++
	}
	if fetched != 1 {
		t.Fatalf("fetched %d messages, want the one published (err %v)", fetched, batch.Error())
	}
	n.stop()

	n2 := open(t, dir, arch, dests)
	n2.run(false)
	second := n2.publish("orders", "u1")
	poll.True(t, "both events in their lane", 10*time.Second, func() bool {
		_, ok1 := n2.sched.Find(first)
		_, ok2 := n2.sched.Find(second)
		return ok1 && ok2
	})
	a, _ := n2.sched.Find(first)
	b, _ := n2.sched.Find(second)
	if a.Ahead != 0 || b.Ahead != 1 {
		t.Fatalf("lane order after restart: first has %d ahead, second %d; want 0 and 1", a.Ahead, b.Ahead)
	}
}

func mustDir(t *testing.T, dir string) *archive.Dir {
	t.Helper()
	d, err := archive.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func findObjects(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".ndjson.gz") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

func readObject(t *testing.T, path string) []*rivorav1.DeadLetter {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []*rivorav1.DeadLetter
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		dl := &rivorav1.DeadLetter{}
		if err := protojson.Unmarshal(sc.Bytes(), dl); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, dl)
	}
	return out
}

// An operator's skip makes a poison head a dead letter with reason manual
// through the usual path (ledger, then archive), and the lane's next event
// is delivered.
func TestSkipHeadDeadLettersManual(t *testing.T) {
	var poison string
	var mu sync.Mutex
	p := newPartner(t, http.StatusBadRequest, func(id string, _ int) bool {
		mu.Lock()
		defer mu.Unlock()
		return id == poison
	})
	archRoot := t.TempDir()
	n := open(t, t.TempDir(), mustDir(t, archRoot), []*rivorav1.Destination{dest("orders", p.URL(), 100)})
	mu.Lock()
	poison = n.publish("orders", "u1")
	mu.Unlock()
	next := n.publish("orders", "u1")
	n.run(true)
	poll.True(t, "the poison head fails", 10*time.Second, func() bool {
		l := n.sched.ListLanes("orders", scheduler.LaneFilter{Stuck: true, Limit: 10})
		return len(l.Lanes) == 1 && l.Lanes[0].HeadEventID == poison && l.Lanes[0].Depth == 2 && l.Lanes[0].Head.LastStatus == 400
	})
	id := lanes.ID{Destination: "orders", Customer: "acme", Key: "u1"}
	var att *scheduler.Attempt
	poll.True(t, "the head is taken between attempts", 10*time.Second, func() bool {
		var err error
		att, err = n.sched.TakeHead(id, poison)
		if err != nil && !errors.Is(err, scheduler.ErrHeadInFlight) {
			t.Fatalf("TakeHead: %v", err)
		}
		return err == nil
	})
	remaining, err := n.parts[lanes.Partition("orders", partitions)].SkipHead(context.Background(), att)
	if err != nil || remaining != 1 {
		t.Fatalf("SkipHead = %d, %v; want 1 remaining", remaining, err)
	}
	poll.True(t, "the next event is delivered", 10*time.Second, func() bool {
		return slices.Equal(p.DeliveredByLane()["u1"], []string{next})
	})
	var letters []*rivorav1.DeadLetter
	poll.True(t, "the skipped head is archived", 20*time.Second, func() bool {
		letters = nil
		for _, o := range findObjects(t, archRoot) {
			letters = append(letters, readObject(t, o)...)
		}
		return len(letters) > 0
	})
	if len(letters) != 1 || letters[0].GetEvent().GetEventId() != poison || letters[0].GetReason() != rivorav1.DeadReason_DEAD_REASON_MANUAL || letters[0].GetLastStatus() != 400 {
		t.Fatalf("archive holds %v, want %s with reason manual and last status 400", letters, poison)
	}
}

// runHistory runs h's writer until the test ends.
func runHistory(t testing.TB, h *history.History) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
