package owner

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/lanes"
)

// roundLook is a look at INGEST whose answers tell the rounds apart: the
// n-th look answers ahead = (n is even), and records which round began
// after which caller asked.
type roundLook struct {
	began   atomic.Int64 // looks begun
	release chan struct{}
	// hold, when set, makes the first look wait for release.
	hold bool
}

func (r *roundLook) look(context.Context) (bool, error) {
	n := r.began.Add(1)
	if n == 1 && r.hold {
		<-r.release
	}
	return n%2 == 0, nil
}

func TestIngestLookAloneLooksEachTime(t *testing.T) {
	var l ingestLook
	r := &roundLook{}
	for i := 1; i <= 3; i++ {
		ahead, err := l.ahead(context.Background(), nil, r.look)
		if err != nil {
			t.Fatal(err)
		}
		// Each call made a look of its own: the i-th answers the i-th.
		if want := i%2 == 0; ahead != want || r.began.Load() != int64(i) {
			t.Fatalf("call %d: ahead %v after %d looks, want %v after %d", i, ahead, r.began.Load(), want, i)
		}
	}
	if l.running || l.next != nil {
		t.Fatalf("after lone calls: running %v, next %v; want neither", l.running, l.next)
	}
}

func TestIngestLookNeverSharesALookBegunBeforeTheCall(t *testing.T) {
	var l ingestLook
	// The first look, held until released, answers ahead; every later
	// one answers not ahead.
	var began atomic.Int64
	release := make(chan struct{})
	look := func(context.Context) (bool, error) {
		if began.Add(1) == 1 {
			<-release
			return true, nil
		}
		return false, nil
	}
	first := make(chan bool, 1)
	go func() {
		ahead, _ := l.ahead(context.Background(), nil, look)
		first <- ahead
	}()
	waitFor(t, "the first look to begin", func() bool { return began.Load() == 1 })

	// These ask while the first look is under way: none may be answered
	// by it, only by a look begun after.
	const callers = 8
	var wg sync.WaitGroup
	answers := make(chan bool, callers)
	for range callers {
		wg.Go(func() {
			ahead, err := l.ahead(context.Background(), nil, look)
			if err != nil {
				t.Error(err)
			}
			answers <- ahead
		})
	}
	waitFor(t, "a caller to wait for the next round", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.next != nil
	})
	close(release)
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
	if n := began.Load(); n < 2 || n > 1+callers {
		t.Fatalf("%d looks for 1+%d callers", n, callers)
	}
	waitFor(t, "the rounds to end", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return !l.running && l.next == nil
	})
}

func TestIngestLookServesWaitersAfterAPanickingLook(t *testing.T) {
	var l ingestLook
	var began atomic.Int64
	release := make(chan struct{})
	look := func(context.Context) (bool, error) {
		if began.Add(1) == 1 {
			<-release
			panic("the first look fails")
		}
		return true, nil
	}
	go func() {
		defer func() { _ = recover() }()
		_, _ = l.ahead(context.Background(), nil, look)
	}()
	waitFor(t, "the first look to begin", func() bool { return began.Load() == 1 })
	answered := make(chan bool, 1)
	go func() {
		ahead, _ := l.ahead(context.Background(), nil, look)
		answered <- ahead
	}()
	waitFor(t, "a caller to wait for the next round", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.next != nil
	})
	close(release)
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
	r := &roundLook{hold: true, release: make(chan struct{})}
	defer close(r.release)
	go l.ahead(context.Background(), nil, r.look) //nolint:errcheck // held until the test ends
	waitFor(t, "the first look to begin", func() bool { return r.began.Load() == 1 })
	stopped := make(chan struct{})
	close(stopped)
	if _, err := l.ahead(context.Background(), stopped, r.look); err != ErrNotOwned {
		t.Fatalf("waiting behind a look once the writer stopped: %v, want ErrNotOwned", err)
	}
	// Nobody looking: a caller does not look for a stopped writer either.
	var idle ingestLook
	if _, err := idle.ahead(context.Background(), stopped, r.look); err != ErrNotOwned || r.began.Load() != 1 {
		t.Fatalf("asking a stopped writer with nobody looking: %v after %d looks, want ErrNotOwned after 1", err, r.began.Load())
	}
}

// waitFor polls cond (a state another goroutine reaches without telling).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLookIngestSeesWhatWaitsForTheMover(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	js := srv.JetStream()
	ctx := t.Context()
	if _, err := ingest.New(ctx, js, destinations.NewRegistry(), ingest.Config{Partitions: ingest.FixedCount(2)}, log); err != nil {
		t.Fatal(err)
	}
	w := newLaneWriter(1, js, nil, nil, nil, log)
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
