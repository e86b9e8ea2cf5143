package controlplane

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

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
