package controlplane_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/e2e/consultest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Both stores keep subscriptions and event types as they keep
// destinations: a change writes them (one too large for a Consul
// transaction is staged), a reopened store reads them back, and
// ChangedSince names the subscriptions changed and deleted and whether the
// catalogue changed.
func TestStoresKeepSubscriptionsAndEventTypes(t *testing.T) {
	client := consulClient(t, consultest.Start(t))
	dir := t.TempDir()
	stores := []struct {
		name string
		open func() controlplane.Store
	}{
		{"file", func() controlplane.Store {
			s, err := controlplane.OpenStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"consul", func() controlplane.Store { return openConsulStore(t, client) }},
	}
	sub := func(i int) *rivorav1.Subscription {
		return &rivorav1.Subscription{Id: fmt.Sprintf("sub_%016d", i), CustomerId: fmt.Sprintf("c%d", i%7), DestinationId: "erp", Types: []string{"order.*"}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	}
	for _, st := range stores {
		s := st.open()
		// 70 subscriptions: over the 64 operations of one Consul
		// transaction, so the change is staged.
		v1, err := s.Update(func(tx *controlplane.DestinationTx) error {
			tx.Put(&rivorav1.Destination{Id: "erp", Url: "https://erp.example.com/"})
			for i := range 70 {
				tx.Subscriptions().Put(sub(i))
			}
			tx.EventTypes().Put(&rivorav1.EventType{Name: "order.created", Schema: `{"type":"object"}`})
			tx.EventTypes().Put(&rivorav1.EventType{Name: "invoice.paid"})
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		v2, err := s.Update(func(tx *controlplane.DestinationTx) error {
			tx.Subscriptions().Delete(sub(3).GetId())
			s5, _ := tx.Subscriptions().Get(sub(5).GetId())
			s5.Paused = true
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		c, ok := s.ChangedSince(v1)
		if !ok || c.Version != v2 || len(c.Subscriptions) != 1 || !c.Subscriptions[0].GetPaused() || !slices.Equal(c.DeletedSubscriptions, []string{sub(3).GetId()}) || c.EventTypesChanged || len(c.Destinations) != 0 {
			t.Fatalf("%s: changed since %d: %+v, %v", st.name, v1, c, ok)
		}
		if _, err := s.Update(func(tx *controlplane.DestinationTx) error {
			et, _ := tx.EventTypes().Get("invoice.paid")
			et.Deprecated = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if c, ok := s.ChangedSince(v2); !ok || !c.EventTypesChanged || len(c.Subscriptions) != 0 {
			t.Fatalf("%s: after a catalogue change: %+v, %v", st.name, c, ok)
		}
		want := s.Contents()
		got := st.open().Contents()
		if got.Version != want.Version || len(got.Subscriptions) != 69 || len(got.EventTypes) != 2 || len(got.Destinations) != 1 {
			t.Fatalf("%s reopened: version %d (want %d), %d subscriptions, %d event types", st.name, got.Version, want.Version, len(got.Subscriptions), len(got.EventTypes))
		}
		for i := range want.Subscriptions {
			if !proto.Equal(got.Subscriptions[i], want.Subscriptions[i]) {
				t.Fatalf("%s reopened: %v, want %v", st.name, got.Subscriptions[i], want.Subscriptions[i])
			}
		}
		if et, ok := s.GetEventType("invoice.paid"); !ok || !et.GetDeprecated() {
			t.Fatalf("%s: invoice.paid = %v", st.name, et)
		}
		if only := s.Subscriptions(func(x *rivorav1.Subscription) bool { return x.GetCustomerId() == "c5" }); len(only) != 10 {
			t.Fatalf("%s: c5's subscriptions: %d, want 10", st.name, len(only))
		}
		// The per-customer count, kept by changes and counted on load:
		// c3 lost sub_3 (c3 had 10); in a change, a move counts too.
		for _, store := range []controlplane.Store{s, st.open()} {
			if _, err := store.Update(func(tx *controlplane.DestinationTx) error {
				if n := tx.CustomerSubscriptions("c3"); n != 9 {
					t.Errorf("%s: c3 has %d subscriptions, want 9", st.name, n)
				}
				moved, _ := tx.Subscriptions().Get(sub(4).GetId())
				moved.CustomerId = "c3"
				if n, m := tx.CustomerSubscriptions("c3"), tx.CustomerSubscriptions("c4"); n != 10 || m != 9 {
					t.Errorf("%s: after a move in the change, c3 %d (want 10), c4 %d (want 9)", st.name, n, m)
				}
				return errors.New("nothing to keep")
			}); err == nil {
				t.Fatal("a refused change was kept")
			}
		}
	}
	keys, _, err := client.KV().Keys(controlplane.ConsulSubscriptionsPrefix, "", nil)
	if err != nil || len(keys) != 69 {
		t.Fatalf("Consul keys under %s: %d, %v; want one per subscription", controlplane.ConsulSubscriptionsPrefix, len(keys), err)
	}
	if keys, _, _ := client.KV().Keys(controlplane.ConsulEventTypesPrefix, "", nil); len(keys) != 2 {
		t.Fatalf("Consul keys under %s: %v", controlplane.ConsulEventTypesPrefix, keys)
	}
}
