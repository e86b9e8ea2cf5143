package eventid

import (
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
