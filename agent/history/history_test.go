package history_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/natsd"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

var quiet = slog.New(slog.DiscardHandler)

func startNATS(t *testing.T) *natsd.Server {
	t.Helper()
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir(), Name: t.Name()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("start embedded nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func failed(id string, n int32) *rivorav1.EventOutcome {
	return &rivorav1.EventOutcome{
		Kind: rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, EventId: id, DestinationId: "d1", CustomerId: "c1", LaneKey: "u1",
		Attempt: &rivorav1.Attempt{Number: n, StatusCode: 500, Error: "HTTP 500"},
	}
}

// waitFor polls Lookup until it returns want outcomes.
func waitFor(t *testing.T, h *history.History, id string, want int) []*rivorav1.EventOutcome {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := h.Lookup(context.Background(), id)
		if err != nil {
			t.Fatalf("Lookup(%s): %v", id, err)
		}
		if len(got) >= want {
			if len(got) > want {
				t.Fatalf("Lookup(%s) = %d outcomes, want %d", id, len(got), want)
			}
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lookup(%s) = %d outcomes after 10s, want %d", id, len(got), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRecordAndLookupInOrder(t *testing.T) {
	srv := startNATS(t)
	h, err := history.NewRunning(t, context.Background(), srv.JetStream(), history.Config{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	// More outcomes than one fetch returns, so Lookup must page.
	const n = 300
	for i := 1; i <= n; i++ {
		h.Record(failed("ev-many", int32(i)))
	}
	h.Record(failed("ev-other", 1))
	h.Record(&rivorav1.EventOutcome{Kind: rivorav1.EventOutcome_KIND_DELIVERED, EventId: "ev-other", Attempt: &rivorav1.Attempt{Number: 2, StatusCode: 200}})

	h.Flush() // stored: the reads below page through the stream
	got := waitFor(t, h, "ev-many", n)
	for i, o := range got {
		if o.GetEventId() != "ev-many" || o.GetAttempt().GetNumber() != int32(i+1) {
			t.Fatalf("outcome %d = %s attempt %d, want ev-many attempt %d (oldest first, no other event's records)", i, o.GetEventId(), o.GetAttempt().GetNumber(), i+1)
		}
	}
	other := waitFor(t, h, "ev-other", 2)
	if other[0].GetKind() != rivorav1.EventOutcome_KIND_ATTEMPT_FAILED || other[1].GetKind() != rivorav1.EventOutcome_KIND_DELIVERED {
		t.Fatalf("ev-other kinds = %v, %v; want ATTEMPT_FAILED then DELIVERED", other[0].GetKind(), other[1].GetKind())
	}
}

func TestLookupUnknownIsEmpty(t *testing.T) {
	srv := startNATS(t)
	h, err := history.NewRunning(t, context.Background(), srv.JetStream(), history.Config{Retention: time.Hour}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.Lookup(context.Background(), "never-recorded")
	if err != nil || got != nil {
		t.Fatalf("Lookup(unknown) = %v, %v; want nil, nil", got, err)
	}
}

// Lookup answers an operator's "where is my event?": it must return as soon
// as the records are read, not after a fetch times out.
func TestLookupIsPrompt(t *testing.T) {
	srv := startNATS(t)
	h, err := history.NewRunning(t, context.Background(), srv.JetStream(), history.Config{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		h.Record(failed(fmt.Sprintf("ev-%d", i), 1))
	}
	h.Flush() // stored: the lookups below read the stream
	start := time.Now()
	for i := range 3 {
		got, err := h.Lookup(context.Background(), fmt.Sprintf("ev-%d", i))
		if err != nil || len(got) != 1 {
			t.Fatalf("Lookup(ev-%d) = %d outcomes, %v; want 1", i, len(got), err)
		}
	}
	// Three lookups of one record each; a lookup that waits out its fetch
	// (2 s) would take 6 s. Generous bound: this is a latency bug check,
	// not a benchmark.
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("3 lookups took %s: Lookup waits for its fetch to expire", took)
	}
}

func TestHistoryPersistsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	srv, err := natsd.Start(natsd.Config{DataDir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h, err := history.NewRunning(t, context.Background(), srv.JetStream(), history.Config{}, quiet)
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	h.Record(failed("ev-kept", 1))
	h.Flush() // returns once the stream acked it
	srv.Shutdown()

	srv2, err := natsd.Start(natsd.Config{DataDir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Shutdown)
	h2, err := history.NewRunning(t, context.Background(), srv2.JetStream(), history.Config{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, h2, "ev-kept", 1)
	if got[0].GetAttempt().GetStatusCode() != 500 {
		t.Fatalf("restored outcome = %v", got[0])
	}
}

// An event's records are found by its id whichever acceptance token they
// were written under: its id's bucket, Unbucketed (a key's time far from
// the acceptance, a resend) or Keyed, and both of the first two for an
// event accepted, then resent.
func TestLookupFindsEveryAcceptanceToken(t *testing.T) {
	srv := startNATS(t)
	h, err := history.NewRunning(t, context.Background(), srv.JetStream(), history.Config{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	at := func(o *rivorav1.EventOutcome, accepted time.Time) *rivorav1.EventOutcome {
		o.AcceptedAt = timestamppb.New(accepted)
		return o
	}
	fresh, old, resent := v7At(t, now), v7At(t, now.Add(-72*time.Hour)), v7At(t, now.Add(-time.Hour))
	h.Record(at(failed(fresh, 1), now))
	h.Record(at(failed(old, 1), now))
	h.Record(at(failed(resent, 1), now.Add(-time.Hour)))
	h.Record(at(failed(resent, 2), now)) // resent: accepted again now
	h.Record(at(failed("order-42", 1), now))
	// Retried in later write buckets (each flushed before the next, as
	// buckets seconds apart are): Unbucketed subjects are read together,
	// in the order they were stored.
	h.Flush()
	for i, later := range []time.Duration{10 * time.Second, time.Hour} {
		history.SetNow(h, func() time.Time { return now.Add(later) })
		h.Record(at(failed(old, int32(i+2)), now))
		h.Flush()
	}
	h.Flush()
	for id, want := range map[string]int{fresh: 1, old: 3, resent: 2, "order-42": 1} {
		got := waitFor(t, h, id, want)
		for i, o := range got {
			if o.GetAttempt().GetNumber() != int32(i+1) {
				t.Fatalf("%s: outcome %d is attempt %d, want %d (oldest first)", id, i, o.GetAttempt().GetNumber(), i+1)
			}
		}
	}
}
