package owner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/lanes"
	"github.com/rivora/rivora/testkit/poll"
)

// testLook is a look at INGEST whose answers tell its first look from
// the later ones.
type testLook struct {
	began   atomic.Int64  // looks begun
	release chan struct{} // the first look waits for it (nil: no wait)
	panics  bool          // the first look panics once released
	first   bool          // the first look's answer
	later   bool          // every later look's answer
}

func (tl *testLook) look(context.Context) (bool, error) {
	if tl.began.Add(1) > 1 {
		return tl.later, nil
	}
	if tl.release != nil {
		<-tl.release
	}
	if tl.panics {
		panic("the first look fails")
	}
	return tl.first, nil
}

// waiting reports whether a caller waits for l's next round.
func waiting(l *ingestLook) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next != nil
}

// idle reports whether l has no look under way and nobody waiting.
func idle(l *ingestLook) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.running && l.next == nil
}

func TestIngestLookAloneLooksEachTime(t *testing.T) {
	var l ingestLook
	tl := &testLook{first: false, later: true}
	for i := 1; i <= 3; i++ {
		ahead, err := l.ahead(context.Background(), nil, tl.look)
		if err != nil {
			t.Fatal(err)
		}
		// Each call made a look of its own.
		if want := i > 1; ahead != want || tl.began.Load() != int64(i) {
			t.Fatalf("call %d: ahead %v after %d looks, want %v after %d", i, ahead, tl.began.Load(), want, i)
		}
		if !idle(&l) {
			t.Fatalf("call %d: a lone call left a look running or a round waiting", i)
		}
	}
}

func TestIngestLookNeverSharesALookBegunBeforeTheCall(t *testing.T) {
	var l ingestLook
	tl := &testLook{release: make(chan struct{}), first: true, later: false}
	first := make(chan bool, 1)
	go func() {
		ahead, _ := l.ahead(context.Background(), nil, tl.look)
		first <- ahead
	}()
	poll.True(t, "the first look to begin", 10*time.Second, func() bool { return tl.began.Load() == 1 })

	// These ask while the first look is under way: none may be answered
	// by it, only by a look begun after.
	const callers = 8
	var wg sync.WaitGroup
	answers := make(chan bool, callers)
	for range callers {
		wg.Go(func() {
			ahead, err := l.ahead(context.Background(), nil, tl.look)
			if err != nil {
				t.Error(err)
			}
			answers <- ahead
		})
	}
	poll.True(t, "a caller to wait for the next round", 10*time.Second, func() bool { return waiting(&l) })
	close(tl.release)
	wg.Wait()
	close(answers)
	if !<-first {
		t.Fatal("the first caller did not get its own look's answer")
	}
	for ahead := range answers {
		if ahead {
			t.Fatal("a caller that asked during the first look got that look's answer")
		}
	}
	if n := tl.began.Load(); n < 2 || n > 1+callers {
		t.Fatalf("%d looks for 1+%d callers", n, callers)
	}
	poll.True(t, "the rounds to end", 10*time.Second, func() bool { return idle(&l) })
}

func TestIngestLookServesWaitersAfterAPanickingLook(t *testing.T) {
	var l ingestLook
	tl := &testLook{release: make(chan struct{}), panics: true, later: true}
	go func() {
		defer func() { _ = recover() }()
		_, _ = l.ahead(context.Background(), nil, tl.look)
	}()
	poll.True(t, "the first look to begin", 10*time.Second, func() bool { return tl.began.Load() == 1 })
	answered := make(chan bool, 1)
	go func() {
		ahead, _ := l.ahead(context.Background(), nil, tl.look)
		answered <- ahead
	}()
	poll.True(t, "a caller to wait for the next round", 10*time.Second, func() bool { return waiting(&l) })
	close(tl.release)
	select {
	case ahead := <-answered:
		if !ahead {
			t.Fatal("the waiting caller got no look of its own")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a caller waits for ever behind a look that panicked")
	}
}

func TestIngestLookWaiterStopsWithTheWriter(t *testing.T) {
	var l ingestLook
	tl := &testLook{release: make(chan struct{})}
	defer close(tl.release)
	go l.ahead(context.Background(), nil, tl.look) //nolint:errcheck // held until the test ends
	poll.True(t, "the first look to begin", 10*time.Second, func() bool { return tl.began.Load() == 1 })
	stopped := make(chan struct{})
	close(stopped)
	if _, err := l.ahead(context.Background(), stopped, tl.look); err != ErrNotOwned {
		t.Fatalf("waiting behind a look once the writer stopped: %v, want ErrNotOwned", err)
	}
	// Nobody looking: a caller does not look for a stopped writer either.
	var quiet ingestLook
	if _, err := quiet.ahead(context.Background(), stopped, tl.look); err != ErrNotOwned || tl.began.Load() != 1 {
		t.Fatalf("asking a stopped writer with nobody looking: %v after %d looks, want ErrNotOwned after 1", err, tl.began.Load())
	}
}

// ingestServer is an embedded server with an empty INGEST stream of two
// partitions.
func ingestServer(t *testing.T) jetstream.JetStream {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	js := srv.JetStream()
	if _, err := ingest.New(t.Context(), js, destinations.NewRegistry(), ingest.Config{Partitions: ingest.FixedCount(2)}, log); err != nil {
		t.Fatal(err)
	}
	return js
}

func TestLookIngestSeesWhatWaitsForTheMover(t *testing.T) {
	js := ingestServer(t)
	ctx := t.Context()
	w := newLaneWriter(1, js, nil, nil, nil, slog.New(slog.DiscardHandler))
	look := func(want bool) {
		t.Helper()
		ahead, err := w.lookIngest(ctx)
		if err != nil || ahead != want {
			t.Fatalf("look: ahead %v, %v; want %v", ahead, err, want)
		}
	}
	look(false) // INGEST is empty

	if _, err := js.Publish(ctx, lanes.IngestSubject(0, "orders"), []byte("another partition's")); err != nil {
		t.Fatal(err)
	}
	look(false)

	ack, err := js.Publish(ctx, lanes.IngestSubject(1, "orders"), []byte("waits for the mover"))
	if err != nil {
		t.Fatal(err)
	}
	look(true)
	// The direct read answers the sequence the jetstream client reads.
	stream, err := js.Stream(ctx, lanes.IngestStream)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.CachedInfo().Config.AllowDirect {
		t.Fatal("INGEST with one replica allows no direct get: the look's direct read is not tested")
	}
	last, err := stream.GetLastMsgForSubject(ctx, lanes.IngestFilter(1))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := w.lastInIngestDirect(ctx); err != nil || got != ack.Sequence || got != last.Sequence {
		t.Fatalf("direct read: seq %d, %v; want %d (the jetstream client read %d)", got, err, ack.Sequence, last.Sequence)
	}

	w.moved(ack.Sequence)
	look(false) // the mover handled it
}

// An event this agent forwarded into INGEST keeps the direct path off
// until the mover moved it, even when a look at INGEST does not see it
// there: just after a network partition heals, a server that led INGEST
// before it was cut off may still answer from its stale copy. (Here the
// look finds INGEST empty, as such a server would answer.)
func TestDirectPathWaitsForItsOwnForwardsWhateverALookSays(t *testing.T) {
	js := ingestServer(t)
	w := newLaneWriter(1, js, nil, nil, nil, slog.New(slog.DiscardHandler))
	if behind, err := w.behindIngest(t.Context()); err != nil || behind {
		t.Fatalf("nothing forwarded, INGEST empty: behind %v, %v; want false", behind, err)
	}
	w.forwarded(7)
	if behind, err := w.behindIngest(t.Context()); err != nil || !behind {
		t.Fatalf("an own forward at INGEST seq 7 not moved yet: behind %v, %v; want true", behind, err)
	}
	w.moved(7)
	if behind, err := w.behindIngest(t.Context()); err != nil || behind {
		t.Fatalf("the mover moved it: behind %v, %v; want false", behind, err)
	}
}

// The mover opens the direct path only once it moved its barrier (every
// event INGEST acknowledged before it) and every event this agent
// forwarded, even when its consumer has nothing pending: a consumer's
// leader cut off from its peers may still answer from a stale copy just
// after the heal. (Here the barrier is taken off the consumer by hand,
// so that it counts nothing pending while the mover has not moved it.)
func TestFastPathOpensOnlyPastTheBarrier(t *testing.T) {
	js := ingestServer(t)
	ctx := t.Context()
	consumer, err := js.CreateOrUpdateConsumer(ctx, lanes.IngestStream, jetstream.ConsumerConfig{
		Durable: MoverName(1), FilterSubject: lanes.IngestFilter(1), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := newLaneWriter(1, js, nil, nil, nil, slog.New(slog.DiscardHandler))
	m := &mover{p: 1, ingest: consumer, writer: w, log: slog.New(slog.DiscardHandler)}
	seq := storeBarrier(t, m)
	batch, err := consumer.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for msg := range batch.Messages() {
		meta, _ := msg.Metadata()
		if msg.Headers().Get(barrierHeader) != "1" || len(msg.Data()) == 0 || msg.Subject() != lanes.IngestSubject(1, "~barrier") || meta.Sequence.Stream != seq {
			t.Fatalf("INGEST's message for partition 1: %s %v %q, want the barrier at %d", msg.Subject(), msg.Headers(), msg.Data(), seq)
		}
		msgs = append(msgs, msg)
	}
	w.moved(seq - 1)
	if m.openDirect(ctx) {
		t.Fatal("the fast path opened before the barrier was moved")
	}
	// The mover acknowledges a barrier and stores nothing for it.
	if items, _, _, _ := m.decode(ctx, msgs); len(items) != 0 {
		t.Fatalf("the barrier decoded as %d events", len(items))
	}
	poll.True(t, "the barrier is acknowledged", 5*time.Second, func() bool {
		info, err := consumer.Info(ctx)
		return err == nil && info.AckFloor.Stream == seq
	})
	w.forwarded(seq + 1)
	w.moved(seq)
	if m.openDirect(ctx) {
		t.Fatal("the fast path opened while an own forward waits in INGEST")
	}
	w.moved(seq + 1)
	if !m.openDirect(ctx) {
		t.Fatal("the fast path stayed closed with everything moved")
	}

	// INGEST elected a leader: closed until the one it replaced cannot
	// answer any more, and then only past a new barrier.
	m.closeDirect(time.Now().Add(time.Hour))
	if _, open, _ := w.gate.observe(); open || m.barrier.seq != 0 {
		t.Fatalf("after an election: gate open %v, barrier %d; want closed, no barrier", open, m.barrier.seq)
	}
	next := storeBarrier(t, m)
	again, err := consumer.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range again.Messages() {
		m.decode(ctx, []jetstream.Msg{msg})
	}
	w.moved(next)
	poll.True(t, "the new barrier is acknowledged", 5*time.Second, func() bool {
		info, err := consumer.Info(ctx)
		return err == nil && info.AckFloor.Stream == next
	})
	if m.openDirect(ctx) {
		t.Fatal("the fast path opened again within the stale leader window")
	}
	m.directFrom = time.Now()
	if !m.openDirect(ctx) {
		t.Fatal("the fast path stayed closed past the window and the new barrier")
	}
}

// A message a consumer handed over and nobody acknowledged (a previous
// mover of the partition took it) keeps the fast path closed past the
// barrier: it comes back only after the consumer's ack wait.
func TestFastPathStaysClosedWhileAMessageIsUnacknowledged(t *testing.T) {
	js := ingestServer(t)
	ctx := t.Context()
	consumer, err := js.CreateOrUpdateConsumer(ctx, lanes.IngestStream, jetstream.ConsumerConfig{
		Durable: MoverName(1), FilterSubject: lanes.IngestFilter(1), AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, lanes.IngestSubject(1, "orders"), []byte("taken by a previous mover")); err != nil {
		t.Fatal(err)
	}
	taken, err := consumer.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range taken.Messages() { // handed over, never acknowledged
	}
	w := newLaneWriter(1, js, nil, nil, nil, slog.New(slog.DiscardHandler))
	m := &mover{p: 1, ingest: consumer, writer: w, log: slog.New(slog.DiscardHandler)}
	poll.True(t, "the barrier is stored", 10*time.Second, func() bool {
		m.openDirect(ctx)
		return m.barrier.seq != 0
	})
	barrier, err := consumer.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range barrier.Messages() {
		if err := msg.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w.moved(m.barrier.seq)
	if m.openDirect(ctx) {
		t.Fatal("the fast path opened while a message taken before waits unacknowledged")
	}
}

// storeBarrier has the closed fast path store its barrier, and returns
// its INGEST sequence; the path must not open meanwhile.
func storeBarrier(t *testing.T, m *mover) uint64 {
	t.Helper()
	poll.True(t, "the barrier is stored", 10*time.Second, func() bool {
		if m.openDirect(t.Context()) {
			t.Fatal("the fast path opened before its barrier was moved")
		}
		return m.barrier.seq != 0
	})
	return m.barrier.seq
}

// A consumer that skips an event of the partition (hands a later one over
// while the earlier one waits in INGEST) shows no gap in its sequence; the
// mover must not move the later one ahead of it, and restarts the
// partition (whose fresh consumer hands both over, in order). The skip is
// made here by a consumer that filters the earlier event out.
func TestMoverRestartsWhenItsConsumerSkipsAnEvent(t *testing.T) {
	js := ingestServer(t)
	ctx := t.Context()
	earlier, err := js.Publish(ctx, lanes.IngestSubject(1, "a"), []byte("earlier"))
	if err != nil {
		t.Fatal(err)
	}
	later, err := js.Publish(ctx, lanes.IngestSubject(1, "b"), []byte("later"))
	if err != nil {
		t.Fatal(err)
	}
	skipping, err := js.CreateOrUpdateConsumer(ctx, lanes.IngestStream, jetstream.ConsumerConfig{
		Durable: "skipping", FilterSubject: lanes.IngestSubject(1, "b"), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := newLaneWriter(1, js, nil, nil, nil, slog.New(slog.DiscardHandler))
	m := &mover{p: 1, ingest: skipping, writer: w, log: slog.New(slog.DiscardHandler)}
	// The writer does not run: a mover that tried to move the later event
	// would wait for it until the context ends.
	runCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = m.run(runCtx)
	if !errors.Is(err, ErrMoveGap) || !strings.Contains(err.Error(), fmt.Sprintf("seq %d", earlier.Sequence)) {
		t.Fatalf("mover with a consumer that skipped INGEST seq %d: %v; want ErrMoveGap naming it", earlier.Sequence, err)
	}
	if runCtx.Err() != nil {
		t.Fatal("the mover tried to move the later event before it stopped")
	}

	// In order, the same check passes: the first of the partition, then
	// (the first moved) the next. (A WorkQueue stream takes one consumer
	// per subject.)
	if err := js.DeleteConsumer(ctx, lanes.IngestStream, "skipping"); err != nil {
		t.Fatal(err)
	}
	whole, err := js.CreateOrUpdateConsumer(ctx, lanes.IngestStream, jetstream.ConsumerConfig{
		Durable: "whole", FilterSubject: lanes.IngestFilter(1), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := whole.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for msg := range batch.Messages() {
		msgs = append(msgs, msg)
	}
	if len(msgs) != 2 || streamSeq(msgs[0]) != earlier.Sequence || streamSeq(msgs[1]) != later.Sequence {
		t.Fatalf("fetched %d messages, want INGEST seq %d then %d", len(msgs), earlier.Sequence, later.Sequence)
	}
	if err := m.firstInOrder(ctx, msgs[0]); err != nil {
		t.Fatalf("the partition's first message: %v", err)
	}
	w.moved(earlier.Sequence)
	if err := m.firstInOrder(ctx, msgs[1]); err != nil {
		t.Fatalf("the next message once the first was moved: %v", err)
	}
}
