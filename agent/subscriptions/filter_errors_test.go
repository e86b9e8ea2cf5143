package subscriptions

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
)

// A filter that fails on an event for another reason than a missing field
// is counted against its subscription: the event did not reach it. A
// missing field is the filter saying no, and is not counted.
func TestFilterFailuresAreCountedPerSubscription(t *testing.T) {
	table := NewTable()
	allUsable(t, table.Replace(time.Now(), []*rivorav1.Subscription{
		{Id: "sub_broken", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: `data.amount / 0 > 1`},
		{Id: "sub_picky", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: `data.vip == true`},
	}))
	var data any
	if err := json.Unmarshal([]byte(`{"amount": 180}`), &data); err != nil {
		t.Fatal(err)
	}
	input := func() routing.Input {
		return routing.Input{Data: data, Type: "order.created", Customer: "acme", Lane: "u1"}
	}
	broken, picky := filterErrors.WithLabelValues("sub_broken"), filterErrors.WithLabelValues("sub_picky")
	before := [2]float64{testutil.ToFloat64(broken), testutil.ToFloat64(picky)}
	for _, id := range []string{"sub_broken", "sub_picky"} {
		s, _ := table.Get(id)
		if matches(s, "order.created", input) {
			t.Errorf("%s matched an event its filter cannot take", id)
		}
	}
	if got := testutil.ToFloat64(broken) - before[0]; got != 1 {
		t.Errorf("sub_broken's failures counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(picky) - before[1]; got != 0 {
		t.Errorf("sub_picky's missing field counted %v, want 0", got)
	}
}

// A deleted subscription's failure count leaves /metrics with it (a
// removal, or a snapshot without it); the others' stay.
func TestFilterFailureSeriesLeaveWithTheirSubscription(t *testing.T) {
	table := NewTable()
	subs := []*rivorav1.Subscription{
		{Id: "sub_gone1", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: `data.amount / 0 > 1`},
		{Id: "sub_gone2", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: `data.amount / 0 > 1`},
		{Id: "sub_stays", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: `data.amount / 0 > 1`},
	}
	allUsable(t, table.Replace(time.Now(), subs))
	var data any
	if err := json.Unmarshal([]byte(`{"amount": 180}`), &data); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sub_gone1", "sub_gone2", "sub_stays"} {
		s, _ := table.Get(id)
		matches(s, "order.created", func() routing.Input { return routing.Input{Data: data, Type: "order.created", Customer: "acme"} })
	}
	series := func() map[string]bool {
		t.Helper()
		got := map[string]bool{}
		ch := make(chan prometheus.Metric, 16)
		go func() { filterErrors.Collect(ch); close(ch) }()
		for m := range ch {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil {
				t.Fatal(err)
			}
			got[pb.GetLabel()[0].GetValue()] = true
		}
		return got
	}
	if s := series(); !s["sub_gone1"] || !s["sub_gone2"] || !s["sub_stays"] {
		t.Fatalf("series before: %v", s)
	}
	stale, _ := table.Get("sub_gone1")
	allUsable(t, table.Update(time.Now(), nil, []string{"sub_gone1"}))
	allUsable(t, table.Replace(time.Now(), subs[2:]))
	if s := series(); s["sub_gone1"] || s["sub_gone2"] || !s["sub_stays"] {
		t.Fatalf("series after deleting sub_gone1 (update) and sub_gone2 (snapshot): %v; want sub_stays only", s)
	}
	// A reader that took the deleted subscription before the delete
	// does not bring its series back.
	matches(stale, "order.created", func() routing.Input { return routing.Input{Data: data, Type: "order.created", Customer: "acme"} })
	if s := series(); s["sub_gone1"] {
		t.Fatalf("a stale reader brought back the deleted subscription's series: %v", s)
	}
}

// A filter its context ended before (the event's filter budget spent, or
// its publisher gone) answers an error, not "no": the publish is refused
// rather than stored without that delivery, and the filter is not counted
// as failing.
func TestAFilterNotRunIsNotAnAnswer(t *testing.T) {
	table := NewTable()
	allUsable(t, table.Replace(time.Now(), []*rivorav1.Subscription{{Id: "sub_late", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: `data.amount > 1`}}))
	s, _ := table.Get("sub_late")
	counter := filterErrors.WithLabelValues("sub_late")
	before := testutil.ToFloat64(counter)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	input := func() routing.Input {
		return routing.Input{Data: map[string]any{"amount": float64(5)}, Type: "order.created"}
	}
	if ok, err := s.Matches(ctx, "order.created", input); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("Matches with an ended context = %v, %v; want no answer (the context's end)", ok, err)
	}
	if got := testutil.ToFloat64(counter) - before; got != 0 {
		t.Fatalf("a filter not run counted %v failures, want 0", got)
	}
	if !matches(s, "order.created", input) {
		t.Fatal("with time to run, the filter does not match amount 5 > 1")
	}
}

// A filter past its cost limit on an event's data has not answered: its
// subscription says so (the publish is refused, naming it), and it is
// not counted as the filter failing.
func TestFilterPastItsCostIsAnErrorNotAFailure(t *testing.T) {
	table := NewTable()
	allUsable(t, table.Replace(time.Now(), []*rivorav1.Subscription{
		{Id: "sub_costly", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: `data.items.map(i, data.s).size() > 5`},
	}))
	items := make([]any, 120_000)
	for i := range items {
		items[i] = float64(i)
	}
	input := func() routing.Input {
		return routing.Input{Data: map[string]any{"items": items, "s": "x"}, Type: "order.created", Customer: "acme"}
	}
	costly := filterErrors.WithLabelValues("sub_costly")
	before := testutil.ToFloat64(costly)
	s, _ := table.Get("sub_costly")
	ok, err := s.Matches(context.Background(), "order.created", input)
	if ok || !routing.OverCost(err) {
		t.Fatalf("Matches past the filter's cost limit = %v, %v; want its cost error", ok, err)
	}
	if got := testutil.ToFloat64(costly) - before; got != 0 {
		t.Errorf("sub_costly's cost limit counted as %v filter failures, want 0", got)
	}
}
