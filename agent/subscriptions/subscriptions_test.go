package subscriptions

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
)

func TestTableMatchesByCustomerTypeAndFilter(t *testing.T) {
	tab := NewTable()
	err := tab.Replace([]*rivorav1.Subscription{
		{Id: "sub_b", CustomerId: "c1", DestinationId: "d1", Types: []string{"order.*"}},
		{Id: "sub_a", CustomerId: "c1", DestinationId: "d2", Types: []string{"order.created"}, Filter: "data.amount > 100"},
		{Id: "sub_c", CustomerId: "c2", DestinationId: "d1", Types: []string{"*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	list := tab.ForCustomer("c1")
	if len(list) != 2 || list[0].ID != "sub_a" || list[1].ID != "sub_b" {
		t.Fatalf("ForCustomer(c1) = %v", list)
	}
	in := func(amount float64) func() routing.Input {
		return func() routing.Input { return routing.Input{Data: map[string]any{"amount": amount}} }
	}
	if !list[0].Matches("order.created", in(150)) || list[0].Matches("order.created", in(50)) || list[0].Matches("order.updated", in(150)) {
		t.Fatal("sub_a matched wrongly")
	}
	if !list[1].Matches("order.updated", in(0)) || list[1].Matches("invoice.paid", in(0)) {
		t.Fatal("sub_b matched wrongly")
	}
	if err := tab.Update(nil, []string{"sub_b"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := tab.Get("sub_b"); ok || tab.Len() != 2 {
		t.Fatal("sub_b not removed")
	}
	if err := tab.Update([]*rivorav1.Subscription{{Id: "sub_x", CustomerId: "c1", Types: []string{"*"}, Filter: "data >"}}, nil); err == nil {
		t.Fatal("a filter that does not compile was applied")
	}
}

func TestPausedBetween(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s, err := FromProto(&rivorav1.Subscription{Id: "sub_a", Pauses: []*rivorav1.PauseInterval{
		{Start: timestamppb.New(t0.Add(time.Minute)), End: timestamppb.New(t0.Add(3 * time.Minute))},
		{Start: timestamppb.New(t0.Add(10 * time.Minute))},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.PausedBetween(t0, t0.Add(12*time.Minute)); got != 4*time.Minute {
		t.Fatalf("PausedBetween = %v, want 4m", got)
	}
	if got := s.PausedBetween(t0.Add(2*time.Minute), t0.Add(5*time.Minute)); got != time.Minute {
		t.Fatalf("PausedBetween = %v, want 1m", got)
	}
}

func TestCatalogue(t *testing.T) {
	c := NewCatalogue()
	if err := c.Check("anything", []byte(`{}`), true); err != nil {
		t.Fatal(err)
	}
	err := c.Replace([]*rivorav1.EventType{
		{Name: "order.created", Schema: `{"type":"object","required":["amount"]}`},
		{Name: "note"},
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check("order.created", []byte(`{"amount":1}`), true); err != nil {
		t.Fatal(err)
	}
	if err := c.Check("order.created", []byte(`{}`), true); err == nil || !strings.Contains(err.Error(), "required") {
		t.Fatalf("missing field: %v", err)
	}
	if err := c.Check("note", []byte(`plain`), false); err != nil {
		t.Fatal(err)
	}
	if err := c.Check("other", []byte(`{}`), true); err == nil || !strings.Contains(err.Error(), "strict") {
		t.Fatalf("unknown type in a strict catalogue: %v", err)
	}
}
