package controlplane

import (
	"testing"

	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rivora/rivora/e2e/consultest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A change committed but not applied (a leader that crashed while moving
// it out of pending/) holds subscriptions and event types too: a reader
// overlays them, by kind, on the stored records.
func TestConsulStoreStagedSubscriptionsAndTypes(t *testing.T) {
	client, err := newConsulClient(consultest.Start(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	s := openConsulStoreT(t, client)
	if _, err := s.Update(func(tx *DestinationTx) error {
		tx.Subscriptions().Put(&rivorav1.Subscription{Id: "sub_a", CustomerId: "c1", DestinationId: "d"})
		tx.Subscriptions().Put(&rivorav1.Subscription{Id: "sub_b", CustomerId: "c1", DestinationId: "d"})
		tx.EventTypes().Put(&rivorav1.EventType{Name: "order.created"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	set := func(key string, value []byte) {
		t.Helper()
		if _, err := client.KV().Put(&api.KVPair{Key: key, Value: value}, nil); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(m interface{}) []byte {
		var b []byte
		var err error
		switch m := m.(type) {
		case *rivorav1.Subscription:
			b, err = protojson.Marshal(m)
		case *rivorav1.EventType:
			b, err = protojson.Marshal(m)
		}
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	set(recordRef{kindSubscription, "sub_a"}.stagedKey(2), raw(&rivorav1.Subscription{Id: "sub_a", CustomerId: "c1", DestinationId: "d", Paused: true}))
	set(recordRef{kindSubscription, "sub_b"}.stagedKey(2), nil)
	set(recordRef{kindEventType, "invoice.paid"}.stagedKey(2), raw(&rivorav1.EventType{Name: "invoice.paid"}))
	meta, err := encodeMeta(state{version: 2}, 2)
	if err != nil {
		t.Fatal(err)
	}
	set(ConsulStateMetaKey, meta)

	r := openConsulStoreT(t, client)
	c := r.Contents()
	if c.Version != 2 || len(c.Subscriptions) != 1 || c.Subscriptions[0].GetId() != "sub_a" || !c.Subscriptions[0].GetPaused() || len(c.EventTypes) != 2 {
		t.Fatalf("a reader of the committed change: %+v", c)
	}
	// Its next write finishes the change first.
	if _, err := r.Update(func(tx *DestinationTx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if keys, _, _ := client.KV().Keys(consulPendingPrefix, "", nil); len(keys) != 0 {
		t.Fatalf("staged keys left: %v", keys)
	}
	if pair, _, _ := client.KV().Get(recordRef{kindSubscription, "sub_b"}.key(), nil); pair != nil {
		t.Fatalf("sub_b, deleted by the committed change, still has its key")
	}
	if got := openConsulStoreT(t, client).Contents(); len(got.Subscriptions) != 1 || !got.Subscriptions[0].GetPaused() || len(got.EventTypes) != 2 {
		t.Fatalf("after the change was finished: %+v", got)
	}
}
