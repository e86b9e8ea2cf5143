package history_test

import (
	"context"
	"slices"
	"testing"

	"github.com/rivora/rivora/agent/history"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A listing narrowed to a subscription keeps that subscription's events,
// and each carries its subscription id.
func TestListBySubscription(t *testing.T) {
	r := newRig(t)
	routed := func(kind rivorav1.EventOutcome_Kind, sub string) string {
		id := v7At(t, r.now)
		o := terminal(kind, id, "d1", "c1", "u1")
		o.SubscriptionId = sub
		r.record(o)
		return id
	}
	a1 := routed(rivorav1.EventOutcome_KIND_DELIVERED, "sub_a")
	routed(rivorav1.EventOutcome_KIND_DELIVERED, "sub_b")
	a2 := routed(rivorav1.EventOutcome_KIND_DEAD, "sub_a")
	routed(rivorav1.EventOutcome_KIND_DELIVERED, "")
	r.stored()
	l, err := r.h.List(context.Background(), history.Filter{Destination: "d1", Subscription: "sub_a", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range l.Events {
		if e.Outcome.GetSubscriptionId() != "sub_a" {
			t.Errorf("listed %s of subscription %q", e.Outcome.GetEventId(), e.Outcome.GetSubscriptionId())
		}
		got = append(got, e.Outcome.GetEventId())
	}
	slices.Sort(got)
	want := []string{a1, a2}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("List(sub_a) = %v, want %v", got, want)
	}
}
