package eventid

import (
	"encoding/json"
	"os"
	"testing"
)

// TestEventIDVectors pins FromKey to testdata/eventid_vectors.json, which the
// TypeScript SDK's eventId is tested against too: a change here that is not a
// new id version breaks every client that computes ids before publishing.
func TestEventIDVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/eventid_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Destination, Customer, Key, EventID string
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range vectors {
		if got := FromKey(v.Destination, v.Customer, v.Key); got != v.EventID {
			t.Errorf("FromKey(%q, %q, %q) = %s, want %s", v.Destination, v.Customer, v.Key, got, v.EventID)
		}
	}
}

// TestSubscriptionEventIDVectors pins ForSubscription to
// testdata/subscription_eventid_vectors.json, for the same reason: a
// publisher may compute its fan-out deliveries' ids from the routes.
func TestSubscriptionEventIDVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/subscription_eventid_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Subscription, Customer, Key, EventID string
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range vectors {
		if got := ForSubscription(v.Subscription, v.Customer, v.Key); got != v.EventID {
			t.Errorf("ForSubscription(%q, %q, %q) = %s, want %s", v.Subscription, v.Customer, v.Key, got, v.EventID)
		}
	}
}
