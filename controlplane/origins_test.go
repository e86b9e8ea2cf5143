package controlplane_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A customer token may not make its own destination on the origin of a
// shared one: there it would set the paths and headers a customer may
// not set on the shared destination, and its own rate limit, at the
// partner the operators' destination protects. The refusal names neither
// the shared destination nor its URL. Another origin (scheme or port) is
// the customer's to use, and operators are not restricted. An operator
// making a shared destination on an origin customers already own is
// warned in the audit.
func TestACustomerCannotOwnASharedDestinationsOrigin(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "partner-x", Url: "https://erp.example.com:443/ingest?api_key=SECRET"})
	c1 := d.adminAs(d.Token(rivorav1.Role_ROLE_CUSTOMER, "c1"))
	own := func(id, u string) error {
		_, err := c1.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: id, Url: u, OwnerCustomer: "c1"}))
		return err
	}
	for _, u := range []string{
		"https://erp.example.com/in/c2",
		"https://ERP.Example.COM/in/c2",
		"HTTPS://erp.example.com:443/",
		"https://erp.example.com./in/c2",
		"https://erp.example.com:0443/in/c2",
	} {
		err := own("c1-erp", u)
		wantCode(t, "c1 owns a destination at "+u, err, connect.CodePermissionDenied, "served by a destination your operators manage", "subscribe to", "ask an operator")
		if err != nil && (strings.Contains(err.Error(), "partner-x") || strings.Contains(err.Error(), "ingest") || strings.Contains(err.Error(), "SECRET")) {
			t.Errorf("the refusal %q names the shared destination or its URL", err)
		}
	}
	for _, u := range []string{"http://erp.example.com/in/c1", "https://erp.example.com:8443/in/c1", "https://c1.example.com/hook"} {
		if err := own("c1-"+strings.NewReplacer(":", "", "/", "", ".", "").Replace(u)[:12], u); err != nil {
			t.Errorf("c1 owns a destination at %s, another origin: %v", u, err)
		}
	}
	if _, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c1-by-ops", Url: "https://erp.example.com/in/c1", OwnerCustomer: "c1"})); err != nil {
		t.Fatalf("an admin gives c1 a destination on the shared origin: %v", err)
	}

	// The reverse order: c1 was there first; the operators are told.
	if _, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c1-partner", Url: "https://c1.example.com/shared"})); err != nil {
		t.Fatalf("an admin makes a shared destination on c1's origin: %v", err)
	}
	audit, err := d.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "c1-partner"}))
	if err != nil || len(audit.Msg.GetEntries()) != 1 {
		t.Fatalf("c1-partner's audit: %v, %v", audit.Msg.GetEntries(), err)
	}
	if detail := audit.Msg.GetEntries()[0].GetDetail(); !strings.Contains(detail, "warning") || !strings.Contains(detail, "c1-httpsc1exa") {
		t.Errorf("c1-partner's creation is audited as %q; want a warning naming c1's own destination on its origin", detail)
	}
}

// A customer token may not point its own destination's OAuth2 token URL
// at a shared destination's origin either: Rivora would POST
// client-credentials requests, with the customer's chosen credentials,
// scopes and path, to the operators' partner. The refusal names neither
// the shared destination nor its URL. Another origin is the customer's,
// and operators are not restricted.
func TestACustomersOAuth2TokenURLCannotBeOnASharedOrigin(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "partner-x", Url: "https://erp.example.com:443/ingest?api_key=SECRET"})
	c1 := d.adminAs(d.Token(rivorav1.Role_ROLE_CUSTOMER, "c1"))
	withToken := func(id, tokenURL string) *rivorav1.CreateDestinationRequest {
		return &rivorav1.CreateDestinationRequest{Id: id, Url: "https://c1.example.com/hook", OwnerCustomer: "c1",
			Oauth2: &rivorav1.OAuth2ClientCredentials{TokenUrl: tokenURL, ClientId: "c1", ClientSecret: "s3cret", Scopes: []string{"admin"}}}
	}
	for _, u := range []string{"https://erp.example.com/oauth/token", "HTTPS://ERP.example.com.:0443/t"} {
		_, err := c1.CreateDestination(ctx, connect.NewRequest(withToken("c1-tok", u)))
		wantCode(t, "c1's token URL "+u, err, connect.CodePermissionDenied, "oauth2 token url", "served by a destination your operators manage", "ask an operator")
		if err != nil && (strings.Contains(err.Error(), "partner-x") || strings.Contains(err.Error(), "ingest") || strings.Contains(err.Error(), "SECRET")) {
			t.Errorf("the refusal %q names the shared destination or its URL", err)
		}
	}
	if _, err := c1.CreateDestination(ctx, connect.NewRequest(withToken("c1-tok", "https://auth.c1.example.com/token"))); err != nil {
		t.Fatalf("c1's token URL on its own origin: %v", err)
	}
	if _, err := d.Admin.CreateDestination(ctx, connect.NewRequest(withToken("c1-by-ops", "https://erp.example.com/oauth/token"))); err != nil {
		t.Errorf("an admin sets c1's token URL on the shared origin: %v", err)
	}

	// The reverse order: c1's token URL was there first; the operators
	// are told.
	d.create(&rivorav1.CreateDestinationRequest{Id: "c1-auth", Url: "https://auth.c1.example.com/hooks"})
	audit, err := d.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "c1-auth"}))
	if err != nil || len(audit.Msg.GetEntries()) != 1 {
		t.Fatalf("c1-auth's audit: %v, %v", audit.Msg.GetEntries(), err)
	}
	if detail := audit.Msg.GetEntries()[0].GetDetail(); !strings.Contains(detail, "warning") || !strings.Contains(detail, "c1-tok") {
		t.Errorf("c1-auth's creation is audited as %q; want a warning naming c1-tok, whose token URL is on its origin", detail)
	}
}

// A customer token is shown of a shared destination's URL only its origin
// (the operators' path and query may hold a credential), plus its
// subscription's own path; operators see the full URL, and a customer
// its own destination's.
func TestACustomerSeesOnlyASharedDestinationsOrigin(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	startFakeAgent(t, d) // get counts pending events through the agents
	ctx := context.Background()
	const shared = "https://erp.example.com:8443/hooks/T0/B1/xoxb-SECRET?api_key=SECRET"
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: shared})
	tok := d.Token(rivorav1.Role_ROLE_CUSTOMER, "c1")
	if _, err := d.adminAs(tok).CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c1-own", Url: "https://c1.example.com/hook?key=mine", OwnerCustomer: "c1"})); err != nil {
		t.Fatal(err)
	}
	c1 := d.subs(tok)
	created, err := c1.CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"*"}, GenerateSecret: true}))
	if err != nil {
		t.Fatal(err)
	}
	plain := created.Msg.GetSubscription()
	// A path the operators set on a shared destination is theirs (it may
	// hold a credential too).
	routed := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"*"}, Path: "/in/c1?token=OPERATORS"})
	mine := d.subscribe(tok, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "c1-own", Types: []string{"*"}})
	want := map[string]string{
		plain.GetId():  "https://erp.example.com:8443",
		routed.GetId(): "https://erp.example.com:8443",
		mine.GetId():   "https://c1.example.com/hook?key=mine",
	}
	check := func(what string, s *rivorav1.Subscription) {
		t.Helper()
		if got := s.GetDeliveryUrl(); got != want[s.GetId()] {
			t.Errorf("%s: c1 is shown delivery_url %q for %s; want %q", what, got, s.GetId(), want[s.GetId()])
		}
		if s.GetDestinationId() == "erp" && (s.GetPath() != "" || s.GetUrl() != "") {
			t.Errorf("%s: c1 is shown path %q, url %q of its subscription %s to a shared destination; want none", what, s.GetPath(), s.GetUrl(), s.GetId())
		}
	}
	check("create", plain)
	rotated, err := c1.RotateSubscriptionSecret(ctx, connect.NewRequest(&rivorav1.RotateSubscriptionSecretRequest{Id: plain.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	check("rotate", rotated.Msg.GetSubscription())
	got, err := c1.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: plain.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	check("get", got.Msg.GetSubscription())
	updated, err := c1.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: plain.GetId(), Description: new("orders")}))
	if err != nil {
		t.Fatal(err)
	}
	check("update", updated.Msg.GetSubscription())
	paused, err := c1.PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: plain.GetId(), Reason: "x"}))
	if err != nil {
		t.Fatal(err)
	}
	check("pause", paused.Msg.GetSubscription())
	resumed, err := c1.ResumeSubscription(ctx, connect.NewRequest(&rivorav1.ResumeSubscriptionRequest{Id: plain.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	check("resume", resumed.Msg.GetSubscription())
	list, err := c1.ListSubscriptions(ctx, connect.NewRequest(&rivorav1.ListSubscriptionsRequest{}))
	if err != nil || len(list.Msg.GetSubscriptions()) != 3 {
		t.Fatalf("c1 lists its subscriptions: %v, %v", list.Msg.GetSubscriptions(), err)
	}
	for _, s := range list.Msg.GetSubscriptions() {
		check("list", s)
	}
	all, err := d.subs(d.AdminToken).ListSubscriptions(ctx, connect.NewRequest(&rivorav1.ListSubscriptionsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all.Msg.GetSubscriptions() {
		if s.GetId() == plain.GetId() && s.GetDeliveryUrl() != shared {
			t.Errorf("the admin is shown delivery_url %q; want the full URL %q", s.GetDeliveryUrl(), shared)
		}
		if s.GetId() == routed.GetId() && (s.GetPath() != "/in/c1?token=OPERATORS" || s.GetDeliveryUrl() != "https://erp.example.com:8443/in/c1?token=OPERATORS") {
			t.Errorf("the admin is shown path %q, delivery_url %q of the routed subscription; want its own", s.GetPath(), s.GetDeliveryUrl())
		}
	}
}
