package subscriptions

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
)

func TestTableMatchesByCustomerTypeAndFilter(t *testing.T) {
	tab := NewTable()
	allUsable(t, tab.Replace(time.Now(), []*rivorav1.Subscription{
		{Id: "sub_b", CustomerId: "c1", DestinationId: "d1", Types: []string{"order.*"}},
		{Id: "sub_a", CustomerId: "c1", DestinationId: "d2", Types: []string{"order.created"}, Filter: "data.amount > 100"},
		{Id: "sub_c", CustomerId: "c2", DestinationId: "d1", Types: []string{"*"}},
	}))
	list := tab.ForCustomer("c1")
	if len(list) != 2 || list[0].ID != "sub_a" || list[1].ID != "sub_b" {
		t.Fatalf("ForCustomer(c1) = %v", list)
	}
	in := func(amount float64) func() routing.Input {
		return func() routing.Input { return routing.Input{Data: map[string]any{"amount": amount}} }
	}
	if !matches(list[0], "order.created", in(150)) || matches(list[0], "order.created", in(50)) || matches(list[0], "order.updated", in(150)) {
		t.Fatal("sub_a matched wrongly")
	}
	if !matches(list[1], "order.updated", in(0)) || matches(list[1], "invoice.paid", in(0)) {
		t.Fatal("sub_b matched wrongly")
	}
	allUsable(t, tab.Update(time.Now(), nil, []string{"sub_b"}))
	if _, ok := tab.Get("sub_b"); ok || tab.Len() != 2 {
		t.Fatal("sub_b not removed")
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

func TestTableUpdatesOnlyWhatChanged(t *testing.T) {
	tab := NewTable()
	allUsable(t, tab.Replace(time.Now(), []*rivorav1.Subscription{
		{Id: "sub_1", CustomerId: "c1", Types: []string{"*"}},
		{Id: "sub_2", CustomerId: "c1", Types: []string{"a"}},
		{Id: "sub_3", CustomerId: "c2", Types: []string{"*"}},
	}))
	before := tab.ForCustomer("c1")
	// sub_2 changes types, sub_4 is new for c1, sub_3 moves to c3, sub_1 goes.
	allUsable(t, tab.Update(time.Now(), []*rivorav1.Subscription{
		{Id: "sub_2", CustomerId: "c1", Types: []string{"b"}},
		{Id: "sub_4", CustomerId: "c1", Types: []string{"*"}},
		{Id: "sub_3", CustomerId: "c3", Types: []string{"*"}},
	}, []string{"sub_1"}))
	ids := func(list []*Subscription) (out []string) {
		for _, s := range list {
			out = append(out, s.ID)
		}
		return out
	}
	if got := ids(tab.ForCustomer("c1")); !slices.Equal(got, []string{"sub_2", "sub_4"}) {
		t.Fatalf("c1 = %v, want [sub_2 sub_4]", got)
	}
	if s, _ := tab.Get("sub_2"); !slices.Equal(s.Types, []string{"b"}) {
		t.Fatalf("sub_2's types = %v, want the update's", s.Types)
	}
	if got := ids(tab.ForCustomer("c2")); len(got) != 0 {
		t.Fatalf("c2 = %v, want none (sub_3 moved)", got)
	}
	if got := ids(tab.ForCustomer("c3")); !slices.Equal(got, []string{"sub_3"}) {
		t.Fatalf("c3 = %v", got)
	}
	if got := ids(before); !slices.Equal(got, []string{"sub_1", "sub_2"}) || !slices.Equal(before[1].Types, []string{"a"}) {
		t.Fatalf("a list read before the update changed under its reader: %v", got)
	}
	if tab.Len() != 3 {
		t.Fatalf("Len = %d, want 3", tab.Len())
	}
}

// allUsable fails t if any of installed is unusable.
func allUsable(t testing.TB, installed []*Subscription) {
	t.Helper()
	for _, s := range installed {
		if s.Unusable != nil {
			t.Fatalf("installed %s unusable: %v", s.ID, s.Unusable)
		}
	}
}

// matches is Matches with no budget to run out of: an error is a bug.
func matches(s *Subscription, typ string, input func() routing.Input) bool {
	ok, err := s.Matches(context.Background(), typ, input)
	if err != nil {
		panic(err)
	}
	return ok
}
