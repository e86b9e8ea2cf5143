package controlplane

import (
	"bytes"
	"errors"
	"log/slog"
	"net/url"
	"strings"
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
	cp, customer := sharedERPAndC1sOwn(t)
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

// An update's OAuth2 token URL follows the same rule, should the policy
// ever let a customer token update its own destination: not on a shared
// destination's origin. An operator may.
func TestUpdateKeepsACustomersTokenURLOffASharedOrigin(t *testing.T) {
	cp, customer := sharedERPAndC1sOwn(t)
	set := &rivorav1.UpdateDestinationRequest{Id: "c1-own", Oauth2: &rivorav1.OAuth2ClientCredentials{TokenUrl: "https://erp.example.com/oauth/token", ClientId: "c1", ClientSecret: "s"}}
	_, _, err := cp.updateDestination(set, systemActor, customer)
	if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "oauth2 token url") || strings.Contains(err.Error(), "ingest") {
		t.Fatalf("a customer sets its token URL on the shared origin: %v; want denied, naming neither the shared destination nor its URL", err)
	}
	if d, _ := cp.store.Get("c1-own"); d.GetOauth2() != nil {
		t.Fatalf("after the refusal c1-own's OAuth2 is %v", d.GetOauth2())
	}
	if _, _, err := cp.updateDestination(set, systemActor, everything); err != nil {
		t.Fatalf("an operator sets c1's token URL on the shared origin: %v", err)
	}
}

// A control plane that starts with customers' own destinations on a
// shared destination's origin (made before that was refused) warns of
// each such shared destination, naming the customers' destinations.
func TestStartWarnsOfCustomersOnASharedOrigin(t *testing.T) {
	dir := t.TempDir()
	cell, err := auth.NewCellToken()
	if err != nil {
		t.Fatal(err)
	}
	first, err := New(Config{StateDir: dir, Keys: auth.NewKeys(cell)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.store.Update(func(tx *DestinationTx) error {
		for _, d := range []*rivorav1.Destination{
			{Id: "erp", Url: "https://erp.example.com/ingest"},
			{Id: "c1-old", Url: "https://ERP.example.com./c1", OwnerCustomer: "c1"},
			{Id: "c2-elsewhere", Url: "https://c2.example.com/hook", OwnerCustomer: "c2"},
			{Id: "quiet", Url: "https://quiet.example.com/in"},
		} {
			d.Secret, d.Configured = "whsec_seed", &rivorav1.Limits{}
			tx.Put(d)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	if _, err := New(Config{StateDir: dir, Keys: auth.NewKeys(cell)}, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	for _, line := range strings.Split(logged.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "shared destination on the origin") {
			warnings = append(warnings, line)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "destination=erp") || !strings.Contains(warnings[0], "c1-old") || strings.Contains(warnings[0], "c2-elsewhere") {
		t.Fatalf("warnings at start: %q; want one, of erp, naming c1-old only", warnings)
	}
}

// A subscription stored before URLs were kept with an IDNA host (its
// URL in Unicode) is the twin of a new one at the same URL in ASCII: the
// partner would get each event twice.
func TestASubscriptionStoredInUnicodeIsTheTwinOfItsASCIIForm(t *testing.T) {
	cp := seededControlPlane(t, 0)
	if _, _, err := cp.createDestination(&rivorav1.CreateDestinationRequest{Id: "books", Url: "https://xn--bcher-kva.example/in", OwnerCustomer: "c1"}, systemActor, everything); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.store.Update(func(tx *DestinationTx) error {
		tx.Subscriptions().Put(&rivorav1.Subscription{Id: "sub_old", CustomerId: "c1", DestinationId: "books", Types: []string{"*"}, Url: "https://bücher.example/c1"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, _, err := cp.createSubscription(&rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "books", Types: []string{"*"}, Url: "https://xn--bcher-kva.example/c1"}, systemActor, everything)
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "sub_old") {
		t.Fatalf("a subscription at the ASCII form of a stored Unicode URL: %v; want already_exists naming sub_old", err)
	}
}

// sharedERPAndC1sOwn is a control plane with a shared destination erp
// and customer c1's own c1-own on another origin, and c1's scope.
func sharedERPAndC1sOwn(t *testing.T) (*ControlPlane, scope) {
	t.Helper()
	cp := seededControlPlane(t, 0)
	for _, d := range []*rivorav1.CreateDestinationRequest{
		{Id: "erp", Url: "https://erp.example.com/ingest"},
		{Id: "c1-own", Url: "https://c1.example.com/hook", OwnerCustomer: "c1"},
	} {
		if _, _, err := cp.createDestination(d, systemActor, everything); err != nil {
			t.Fatal(err)
		}
	}
	return cp, scope{p: &auth.Principal{Role: rivorav1.Role_ROLE_CUSTOMER, Customers: []string{"c1"}}}
}
