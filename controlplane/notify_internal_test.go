package controlplane

import (
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/controlplane/notices"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Several agents answer for a destination (a handoff, or partitions that
// moved): it is parked if any says so, since the earliest park, and its
// archived counters add up.
func TestSummarizeHealthAcrossAgents(t *testing.T) {
	t1 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	parkedAt := func(at time.Time, cause string) *rivorav1.HealthTransition {
		return &rivorav1.HealthTransition{At: timestamppb.New(at), From: "degraded", To: "parked", Cause: cause}
	}
	park, archived := summarize([]*rivorav1.DestinationHealth{
		{DestinationId: "orders", State: "parked", LastTransition: parkedAt(t1.Add(time.Minute), "later"), ArchivedDeadLetters: 2},
		{DestinationId: "orders", State: "parked", LastTransition: parkedAt(t1, "earlier"), ArchivedDeadLetters: 3},
		{DestinationId: "orders", State: "healthy"},
		{DestinationId: "billing", State: "degraded", ArchivedDeadLetters: 1},
		{DestinationId: "search", State: "parked"}, // no transition recorded
	})
	if p, ok := park["orders"]; !ok || !p.since.Equal(t1) || p.cause != "earlier" {
		t.Errorf("orders: %+v, %v; want parked since %s (earlier)", p, ok, t1)
	}
	if _, ok := park["billing"]; ok {
		t.Error("billing is degraded, not parked")
	}
	if p, ok := park["search"]; !ok || !p.since.IsZero() {
		t.Errorf("search: %+v, %v; want parked, since unknown", p, ok)
	}
	if archived["orders"] != 5 || archived["billing"] != 1 || len(archived) != 2 {
		t.Errorf("archived %v, want orders 5, billing 1", archived)
	}
}

// A restarted notifier re-derives from the audit log only the notices
// after the newest one ingest accepted (the audit mark), so a clean
// restart repeats none: the operator got the same override.expired
// notice on every restart while it stayed within the lookback.
func TestRestartedNotifierRepeatsNoAcceptedAuditNotice(t *testing.T) {
	dir := t.TempDir()
	cp, err := New(Config{StateDir: dir, Keys: testKeys(t)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	clock := now.Add(-3 * time.Minute)
	cp.now = func() time.Time { return clock }
	cp.record("limits.expire", "orders", systemActor, "override expired", 7)
	clock = now.Add(-2 * time.Minute)
	cp.record("limits.expire", "billing", systemActor, "override expired", 8)
	clock = now
	first := newNotifier(cp, "https://ops.example.com/hook", "", 0)
	if err := first.start(); err != nil {
		t.Fatal(err)
	}
	if len(first.queue) != 2 {
		t.Fatalf("a first start queued %d notices, want both expiries", len(first.queue))
	}
	// Ingest accepts the first of them; then the control plane restarts.
	nt, _ := first.head()
	first.pop()
	first.advance(nt)
	second := newNotifier(cp, "https://ops.example.com/hook", "", 0)
	if err := second.start(); err != nil {
		t.Fatal(err)
	}
	if len(second.queue) != 1 || second.queue[0].DestinationID != "billing" {
		t.Fatalf("after a restart the notifier queued %+v, want only billing's (orders' was accepted)", second.queue)
	}
}

// Audit notices reach the queue out of version order (an override expiry
// and a 410 race): the mark stops short of any still queued, which a
// restart must derive again.
func TestAuditMarkStopsShortOfAQueuedNotice(t *testing.T) {
	cp, err := New(Config{StateDir: t.TempDir(), Keys: testKeys(t)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	n := newNotifier(cp, "https://ops.example.com/hook", "", 0)
	now := time.Now()
	n.enqueue(notices.Expired("y", 11, now), notices.Disabled("x", "partner answered 410 Gone", 10, now))
	y, _ := n.head()
	n.pop()
	n.advance(y)
	if got := auditVersion(n.marked); got != 9 {
		t.Fatalf("audit mark after accepting version 11 with 10 queued = %d, want 9", got)
	}
	x, _ := n.head()
	n.pop()
	n.advance(x)
	if got := auditVersion(n.marked); got != 10 {
		t.Fatalf("audit mark after accepting version 10 too = %d, want 10 (it does not go back, nor past what was accepted in order)", got)
	}
}
