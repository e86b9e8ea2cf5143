package agent_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/poll"
)

// An OAuth2 token endpoint that refuses connections holds the events of
// its destinations with the failure as their last error, which the
// customer reads (events get and list): it never carries the token URL's
// query (a credential may be there); it names the URL's path on the
// customer's own destination, and only its origin on a shared one (whose
// path is the operators').
func TestTokenFetchErrorShownToCustomers(t *testing.T) {
	r := startAgent(t, t.TempDir())
	p := newPartner(t, nil)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // refuses connections from now on
	const querySecret = "QS3CRET-assertion"
	tokenURL := closed.URL + "/oauth/token?client_assertion=" + querySecret
	oauth2 := &rivorav1.OAuth2ClientCredentials{TokenUrl: tokenURL, ClientId: "rivora", ClientSecret: "client-s3cret"}
	shared := destination("erp", p.URL(), 5)
	shared.Oauth2 = oauth2
	own := destination("acme-erp", p.DestURL("acme-erp"), 5)
	own.Oauth2, own.OwnerCustomer = oauth2, "acme"
	r.create(shared, own)

	events := rivorav1connect.NewEventServiceClient(r.HTTPClient(), r.URL, r.As(r.Token(rivorav1.Role_ROLE_CUSTOMER, "acme")))
	for dest, shown := range map[string]string{"erp": closed.URL, "acme-erp": closed.URL + "/oauth/token"} {
		id := r.publish(dest, "acme", "l1")
		want := "oauth2 token endpoint: request to " + shown + " failed: "
		// Both views: events get (the attempts) and events list (the
		// last error), each once it shows the failed attempt.
		var seen []string
		if err := poll.Within(15*time.Second, func() bool {
			resp, err := events.GetEvent(context.Background(), connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
			if err != nil {
				t.Fatalf("acme gets %s: %v", id, err)
			}
			lastErr := ""
			for _, a := range resp.Msg.GetAttempts() {
				lastErr = a.GetError()
			}
			list, err := events.ListEvents(context.Background(), connect.NewRequest(&rivorav1.ListEventsRequest{DestinationId: dest, CustomerId: "acme"}))
			if err != nil {
				t.Fatalf("acme lists %s's events: %v", dest, err)
			}
			seen = []string{lastErr}
			for _, e := range list.Msg.GetEvents() {
				seen = append(seen, e.GetLastError())
			}
			return len(seen) > 1 && !slices.Contains(seen, "")
		}); err != nil {
			t.Fatalf("%s: no failed attempt in events get and list within 15s (read %q)", dest, seen)
		}
		for _, msg := range seen {
			if !strings.HasPrefix(msg, want) || strings.Contains(msg, querySecret) || strings.Contains(msg, "?") {
				t.Errorf("%s: acme reads the last error %q; want it to start %q, without the token URL's query", dest, msg, want)
			}
			if dest == "erp" && strings.Contains(msg, "/oauth/token") {
				t.Errorf("erp (shared): acme reads the last error %q, which names the operators' token URL path", msg)
			}
		}
	}
	if n := p.Count(); n != 0 {
		t.Fatalf("the partner got %d requests without a token", n)
	}
}
