package subscriptions

import (
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
)

// A filter that fails on an event for another reason than a missing field
// is counted against its subscription: the event did not reach it. A
// missing field is the filter saying no, and is not counted.
func TestFilterFailuresAreCountedPerSubscription(t *testing.T) {
	table := NewTable()
	if err := table.Replace([]*rivorav1.Subscription{
		{Id: "sub_broken", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: `data.amount / 0 > 1`},
		{Id: "sub_picky", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: `data.vip == true`},
	}); err != nil {
		t.Fatal(err)
	}
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
		if s.Matches("order.created", input) {
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
