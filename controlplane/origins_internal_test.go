package controlplane

import (
	"errors"
	"net/url"
	"testing"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Two URLs that dial the same host and port have one origin, whatever
// their case, default port, trailing dot or IP spelling; another scheme
// or port is another origin.
func TestOriginNormalises(t *testing.T) {
	same := [][2]string{
		{"https://erp.example.com/a?k=1", "HTTPS://ERP.Example.com:443/b"},
		{"https://erp.example.com/", "https://erp.example.com.:0443/"},
		{"http://127.0.0.1/", "http://[::ffff:127.0.0.1]:80/"},
		{"http://[2001:db8::1]:8080/", "http://[2001:DB8:0::1]:8080/x"},
		// Dialled in their IDNA form, as net/http maps them.
		{"http://example.com/", "http://ｅｘａｍｐｌｅ.com/"},
		{"http://xn--bcher-kva.example/", "http://bücher.example/"},
	}
	for _, p := range same {
		if a, b := originOf(p[0]), originOf(p[1]); a != b {
			t.Errorf("origins of %s and %s: %q and %q; want one", p[0], p[1], a, b)
		}
	}
	other := [][2]string{
		{"https://erp.example.com/", "http://erp.example.com/"},
		{"https://erp.example.com/", "https://erp.example.com:8443/"},
		{"https://erp.example.com/", "https://erp.example.org/"},
	}
	for _, p := range other {
		if a, b := originOf(p[0]), originOf(p[1]); a == b {
			t.Errorf("origins of %s and %s are both %q; want two", p[0], p[1], a)
		}
	}
	u, _ := url.Parse("https://erp.example.com/x")
	if got := origin(u); got != "https://erp.example.com:443" {
		t.Errorf("origin(%s) = %q", u, got)
	}
}

// The origin rule holds for an update's new URL too, should the policy
// ever let a customer token update its own destination: it may not move
// onto a shared destination's origin. An operator may.
func TestUpdateKeepsACustomersDestinationOffASharedOrigin(t *testing.T) {
	cp := seededControlPlane(t, 0)
	for _, d := range []*rivorav1.CreateDestinationRequest{
		{Id: "erp", Url: "https://erp.example.com/ingest"},
		{Id: "c1-own", Url: "https://c1.example.com/hook", OwnerCustomer: "c1"},
	} {
		if _, _, err := cp.createDestination(d, systemActor, everything); err != nil {
			t.Fatal(err)
		}
	}
	customer := scope{p: &auth.Principal{Role: rivorav1.Role_ROLE_CUSTOMER, Customers: []string{"c1"}}}
	moved := "https://ERP.example.com./in/c2"
	_, _, err := cp.updateDestination(&rivorav1.UpdateDestinationRequest{Id: "c1-own", Url: &moved}, systemActor, customer)
	if !errors.Is(err, ErrDenied) {
		t.Fatalf("a customer moves its destination onto the shared origin: %v; want denied", err)
	}
	if d, _ := cp.store.Get("c1-own"); d.GetUrl() != "https://c1.example.com/hook" {
		t.Fatalf("after the refusal c1-own's URL is %q", d.GetUrl())
	}
	if _, _, err := cp.updateDestination(&rivorav1.UpdateDestinationRequest{Id: "c1-own", Url: &moved}, systemActor, everything); err != nil {
		t.Fatalf("an operator moves c1's destination onto the shared origin: %v", err)
	}
}
