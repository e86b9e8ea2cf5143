package eventid

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestEventIDScopedAndStable(t *testing.T) {
	a := FromKey("orders", "acme", "order-1")
	if a != FromKey("orders", "acme", "order-1") {
		t.Fatal("the same key in the same scope gave two ids")
	}
	seen := map[string]string{a: "orders/acme/order-1"}
	for _, other := range [][3]string{
		{"orders", "globex", "order-1"}, // another customer
		{"billing", "acme", "order-1"},  // another destination
		{"orders", "acme", "order-2"},   // another key
		{"orders", "acmeo", "rder-1"},   // the same bytes, split elsewhere
	} {
		id := FromKey(other[0], other[1], other[2])
		if prev, dup := seen[id]; dup {
			t.Fatalf("%v and %s share the id %s", other, prev, id)
		}
		seen[id] = other[0] + "/" + other[1] + "/" + other[2]
	}
	u := uuid.MustParse(a)
	if u.Version() != 8 || u.Variant() != uuid.RFC4122 {
		t.Fatalf("id of a plain key: version %d variant %v, want 8 RFC4122", u.Version(), u.Variant())
	}
}

func TestEventIDOfUUIDv7KeyKeepsItsTime(t *testing.T) {
	key := uuid.Must(uuid.NewV7())
	id := uuid.MustParse(FromKey("orders", "acme", key.String()))
	if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
		t.Fatalf("id of a UUIDv7 key: version %d, want 7", id.Version())
	}
	if id.Time() != key.Time() {
		t.Fatalf("id time %v, key time %v: want the key's", id.Time(), key.Time())
	}
	if id == key {
		t.Fatal("the id is the key itself: it must depend on the scope")
	}
}

// A UUIDv7 key in any form uuid.Parse reads (not only the usual one an
// SDK sends) keeps its time in the id, as it always did: ids of keys
// already used must not change.
func TestEventIDOfUUIDv7KeyInEveryParsedForm(t *testing.T) {
	key := uuid.Must(uuid.NewV7())
	plain := key.String()
	hex := strings.ReplaceAll(plain, "-", "")
	for _, form := range []string{plain, "urn:uuid:" + plain, "{" + plain + "}", hex} {
		id := uuid.MustParse(FromKey("orders", "acme", form))
		if id.Version() != 7 || id.Time() != key.Time() {
			t.Fatalf("key %q: id version %d time %v, want 7 and the key's time %v", form, id.Version(), id.Time(), key.Time())
		}
	}
	if id := uuid.MustParse(FromKey("orders", "acme", plain+"x")); id.Version() != 8 {
		t.Fatalf("a key one byte longer than a UUID: id version %d, want 8", id.Version())
	}
}

// A subscription's delivery never takes the id of an event published to a
// destination by name, even when the two share an id; and it is scoped
// like FromKey.
func TestForSubscriptionIsDomainSeparated(t *testing.T) {
	for _, scope := range []string{"orders", "sub_0123456789abcdef"} {
		if ForSubscription(scope, "acme", "order-1") == FromKey(scope, "acme", "order-1") {
			t.Fatalf("scope %q: ForSubscription and FromKey give the same id", scope)
		}
	}
	a := ForSubscription("sub_a", "acme", "order-1")
	if a != ForSubscription("sub_a", "acme", "order-1") {
		t.Fatal("the same key for the same subscription gave two ids")
	}
	for _, other := range [][3]string{{"sub_b", "acme", "order-1"}, {"sub_a", "globex", "order-1"}, {"sub_a", "acme", "order-2"}, {"sub_a", "acmeo", "rder-1"}} {
		if ForSubscription(other[0], other[1], other[2]) == a {
			t.Fatalf("%v shares the id of sub_a/acme/order-1", other)
		}
	}
	key := uuid.Must(uuid.NewV7())
	id := uuid.MustParse(ForSubscription("sub_a", "acme", key.String()))
	if id.Version() != 7 || id.Time() != key.Time() {
		t.Fatalf("id of a UUIDv7 key: version %d time %v, want 7 with the key's time %v", id.Version(), id.Time(), key.Time())
	}
}
