package controlplane_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/controlplane/notices"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// A URL the agents dial is stored with its host in the IDNA ASCII form
// it is dialled by (the agents' HTTP client does not map a Unicode host
// itself): a destination's URL, its OAuth2 token URL and a
// subscription's URL, as created and as updated, with the port, path and
// query kept as given. What is stored is what every answer shows, and
// what the agents are fed.
func TestUnicodeHostsAreStoredInASCII(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	ctx := context.Background()
	created := d.create(&rivorav1.CreateDestinationRequest{Id: "partner", Url: "https://ｐａｒｔｎｅｒ.example:8443/in/ü?k=Ｖ",
		Oauth2: &rivorav1.OAuth2ClientCredentials{TokenUrl: "https://ａｕｔｈ.example/token?tenant=ü", ClientId: "rivora", ClientSecret: "s"},
	}).GetDestination()
	if got, want := created.GetUrl(), "https://partner.example:8443/in/ü?k=Ｖ"; got != want {
		t.Errorf("created url %q, want %q", got, want)
	}
	if got, want := created.GetOauth2().GetTokenUrl(), "https://auth.example/token?tenant=ü"; got != want {
		t.Errorf("created oauth2 token url %q, want %q", got, want)
	}

	sub := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "partner", Types: []string{"*"}, Url: "https://ＰＡＲＴＮＥＲ.example:8443/c1?x=1#frag"})
	if sub.GetUrl() != "https://partner.example:8443/c1?x=1#frag" || sub.GetDeliveryUrl() != "https://partner.example:8443/c1?x=1" {
		t.Errorf("subscription url %q, delivery_url %q; want the host as partner.example", sub.GetUrl(), sub.GetDeliveryUrl())
	}
	// The same subscription written with the ASCII host is its twin.
	_, err := d.subs(d.AdminToken).CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "partner", Types: []string{"*"}, Url: "https://partner.example:8443/c1?x=1#frag"}))
	wantCode(t, "the same subscription with the host in ASCII", err, connect.CodeAlreadyExists)
	upd, err := d.subs(d.AdminToken).UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: sub.GetId(), Url: proto.String("https://ｐａｒｔｎｅｒ.example:8443/c2")}))
	if err != nil {
		t.Fatal(err)
	}
	if s := upd.Msg.GetSubscription(); s.GetUrl() != "https://partner.example:8443/c2" || s.GetDeliveryUrl() != "https://partner.example:8443/c2" {
		t.Errorf("updated subscription url %q, delivery_url %q; want the host as partner.example", s.GetUrl(), s.GetDeliveryUrl())
	}

	moved, err := d.update(&rivorav1.UpdateDestinationRequest{Id: "partner", Url: proto.String("https://Bücher.example/hook"),
		Oauth2: &rivorav1.OAuth2ClientCredentials{TokenUrl: "https://bücher.example/token"}})
	if err != nil {
		t.Fatal(err)
	}
	if moved.GetUrl() != "https://xn--bcher-kva.example/hook" || moved.GetOauth2().GetTokenUrl() != "https://xn--bcher-kva.example/token" {
		t.Errorf("updated url %q, token url %q; want the host as xn--bcher-kva.example", moved.GetUrl(), moved.GetOauth2().GetTokenUrl())
	}
	feed := watchOnce(t, d).GetDestinations()
	if len(feed) != 1 || feed[0].GetUrl() != moved.GetUrl() || feed[0].GetOauth2().GetTokenUrl() != moved.GetOauth2().GetTokenUrl() {
		t.Errorf("the agents are fed %v; want the ASCII URLs", feed)
	}
	subs, err := d.subs(d.AdminToken).ListSubscriptions(ctx, connect.NewRequest(&rivorav1.ListSubscriptionsRequest{DestinationId: "partner"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := subs.Msg.GetSubscriptions(); len(got) != 1 || got[0].GetDeliveryUrl() != "https://xn--bcher-kva.example/c2" {
		t.Errorf("subscriptions after the move: %v; want one, following its destination to https://xn--bcher-kva.example/c2", got)
	}
}

// A host IDNA cannot map is refused as invalid, naming the field.
func TestUnmappableHostsAreRefused(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	ctx := context.Background()
	const bad = "https://xn--ü.example/hook"
	_, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "bad", Url: bad}))
	wantCode(t, "create at "+bad, err, connect.CodeInvalidArgument, `url "`+bad, "IDNA")
	d.create(&rivorav1.CreateDestinationRequest{Id: "ok", Url: "https://partner.example/hook"})
	_, err = d.update(&rivorav1.UpdateDestinationRequest{Id: "ok", Url: proto.String(bad)})
	wantCode(t, "update to "+bad, err, connect.CodeInvalidArgument, `url "`+bad, "IDNA")
	_, err = d.update(&rivorav1.UpdateDestinationRequest{Id: "ok", Oauth2: &rivorav1.OAuth2ClientCredentials{TokenUrl: bad, ClientId: "rivora", ClientSecret: "s"}})
	wantCode(t, "token url "+bad, err, connect.CodeInvalidArgument, `oauth2 token url "`+bad, "IDNA")
	_, err = d.subs(d.AdminToken).CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "ok", Types: []string{"*"}, Url: "https://partner.example\u200d/c1"}))
	wantCode(t, "subscription url with a zero-width joiner", err, connect.CodeInvalidArgument, `url "https://partner.example`, "IDNA")
}

// The operator webhook, delivered by the agents as a destination, is
// stored in ASCII too.
func TestOperatorWebhookStoredInASCII(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // only its number is needed: nothing is delivered
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true, ControlPlane: func(c *controlplane.Config) {
		c.OperatorWebhook = "http://１２７.０.０.１:" + strconv.Itoa(port) + "/ops"
	}})
	var got string
	poll.True(t, "the operator notices destination", 10*time.Second, func() bool {
		resp, err := d.Admin.ListDestinations(context.Background(), connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, dest := range resp.Msg.GetDestinations() {
			if dest.GetId() == notices.DestinationID {
				got = dest.GetUrl()
			}
		}
		return got != ""
	})
	if want := "http://127.0.0.1:" + strconv.Itoa(port) + "/ops"; got != want {
		t.Fatalf("operator webhook stored as %q, want %q", got, want)
	}
}
