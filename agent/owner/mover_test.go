package owner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/edge"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func ingestMeta(consumerSeq, delivered uint64) *jetstream.MsgMetadata {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Consumer: consumerSeq, Stream: 100 + consumerSeq}, NumDelivered: delivered}
}

func TestIngestOrderRefusesGapsAndRedeliveries(t *testing.T) {
	var order ingestOrder
	for _, seq := range []uint64{1, 2, 3, 4, 5, 6} {
		if err := order.check(ingestMeta(seq, 1)); err != nil {
			t.Fatalf("in-order message %d: %v", seq, err)
		}
	}
	if err := order.check(ingestMeta(8, 1)); !errors.Is(err, ErrMoveGap) {
		t.Fatalf("a skipped message: %v, want ErrMoveGap", err)
	}
	if err := order.check(ingestMeta(6, 1)); !errors.Is(err, ErrMoveGap) {
		t.Fatalf("a repeated consumer sequence: %v, want ErrMoveGap", err)
	}
	if err := order.check(ingestMeta(7, 2)); !errors.Is(err, ErrMoveGap) {
		t.Fatalf("a redelivery: %v, want ErrMoveGap", err)
	}
	if err := order.check(ingestMeta(7, 1)); err != nil {
		t.Fatalf("the next message after refused ones: %v", err)
	}
	var first ingestOrder
	if err := first.check(ingestMeta(1, 3)); !errors.Is(err, ErrMoveGap) {
		t.Fatalf("a redelivered first message: %v, want ErrMoveGap", err)
	}
	// The mover's consumer is fresh: a first message past sequence 1 is
	// one lost, or an old consumer's.
	var late ingestOrder
	if err := late.check(ingestMeta(4, 1)); !errors.Is(err, ErrMoveGap) {
		t.Fatalf("a fresh consumer's first message at sequence 4: %v, want ErrMoveGap", err)
	}
}

// A gap right after the consumer reported a change of its leader is that
// change's (ErrMoverLeaderChanged, still an ErrMoveGap); one without such
// a report, or long after it, is not.
func TestMoverTellsAGapAfterALeaderChange(t *testing.T) {
	var m mover
	gap := fmt.Errorf("%w: consumer sequence 624 after 622", ErrMoveGap)
	if err := m.explainGap(gap); errors.Is(err, ErrMoverLeaderChanged) {
		t.Fatalf("a gap with no leader change reported: %v", err)
	}
	m.consumeErrored(errors.New("some other consumer error"))
	if err := m.explainGap(gap); errors.Is(err, ErrMoverLeaderChanged) {
		t.Fatalf("a gap after another consumer error: %v", err)
	}
	m.consumeErrored(jetstream.ErrConsumerLeadershipChanged)
	err := m.explainGap(gap)
	if !errors.Is(err, ErrMoverLeaderChanged) || !errors.Is(err, ErrMoveGap) {
		t.Fatalf("a gap right after a leader change: %v, want ErrMoverLeaderChanged and ErrMoveGap", err)
	}
	m.leaderChangedAt.Store(time.Now().Add(-leaderChangeGapWindow - time.Second).UnixNano())
	if err := m.explainGap(gap); errors.Is(err, ErrMoverLeaderChanged) {
		t.Fatalf("a gap long after a leader change: %v", err)
	}
}

// stuckCheck is a ForwardedCheck whose first duplicate comparison never
// answers until its context ends (a probe of a stream with no leader).
type stuckCheck struct{ calls atomic.Int32 }

func (c *stuckCheck) CheckForwarded(_ context.Context, events []edge.Forwarded) ([]string, error) {
	return make([]string, len(events)), nil
}

func (c *stuckCheck) DuplicateConflict(ctx context.Context, _ edge.Forwarded, _ []byte, _ string, _ uint64) (string, error) {
	if c.calls.Add(1) == 1 {
		<-ctx.Done()
		return "", ctx.Err()
	}
	return "", nil
}

// A comparison that does not answer is abandoned after compareTimeout,
// logged and tried again: it never holds the mover (and its unacked
// INGEST batch) for as long as the partition runs (issue 27).
func TestKeepConflictsBoundsAComparisonThatNeverAnswers(t *testing.T) {
	saved := compareTimeout
	compareTimeout = 100 * time.Millisecond
	t.Cleanup(func() { compareTimeout = saved })
	check := &stuckCheck{}
	var logged bytes.Buffer
	m := &mover{p: 6, check: check, log: slog.New(slog.NewTextHandler(&logged, nil))}
	ev := &rivorav1.Event{EventId: "0cf24cf9-e8e5-8dc7-9fd7-01c8b2580d9c", DestinationId: "fast5"}
	items := []Item{{Event: ev, MsgID: ev.GetEventId(), Fingerprint: []byte("fp")}}
	at := []Stored{{Stream: "LANES_6", Seq: 38206, Duplicate: true}}
	done := make(chan bool, 1)
	go func() { done <- m.keepConflicts(context.Background(), items, at) }()
	select {
	case kept := <-done:
		if !kept {
			t.Fatal("keepConflicts returned false with its context alive")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("keepConflicts still waits on a comparison that never answers after 10s")
	}
	if got := check.calls.Load(); got != 2 {
		t.Fatalf("DuplicateConflict called %d times, want the stuck try and one more", got)
	}
	if !strings.Contains(logged.String(), "comparing a duplicate with its original failed; retrying") || !strings.Contains(logged.String(), "deadline exceeded") {
		t.Fatalf("the abandoned comparison was not logged: %q", logged.String())
	}
}
