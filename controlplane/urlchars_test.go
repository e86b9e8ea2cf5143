package controlplane_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A URL the agents would send with a byte an HTTP request line cannot
// carry (a space, above all) is refused where it comes in, for a
// destination and for a subscription's URL or path, saying to
// percent-encode it; a URL valid before (percent-encoded, a Unicode host
// or path, a query, a port) is still stored as given.
func TestURLsMustBeSendable(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	ctx := context.Background()
	for id, raw := range map[string]string{
		"encoded": "http://127.0.0.1:9000/a%20b?x=1%202&y=%7C",
		"unicode": "https://partner.example/in/ü?k=v",
		"query":   "https://example.com/hook?a=1&b=two#frag",
		"port":    "https://example.com:8443/",
		"raw":     "https://example.com/a|b?f={x}",
	} {
		got := d.create(&rivorav1.CreateDestinationRequest{Id: id, Url: raw}).GetDestination().GetUrl()
		if got != raw {
			t.Errorf("destination %s stored url %q, want %q as given", id, got, raw)
		}
	}

	_, err := d.subs(d.AdminToken).CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{
		CustomerId: "c1", DestinationId: "port", Types: []string{"*"}, Url: "https://example.com:8443/c 1"}))
	wantCode(t, "subscription url with a space", err, connect.CodeInvalidArgument, "a space", "percent-encode", "%20")
	_, err = d.subs(d.AdminToken).CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{
		CustomerId: "c1", DestinationId: "port", Types: []string{"*"}, Path: "/in/c 1"}))
	wantCode(t, "subscription path with a space", err, connect.CodeInvalidArgument, `path has a space after "/in/c"`, "%20")
	sub := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{
		CustomerId: "c1", DestinationId: "port", Types: []string{"*"}, Path: "/in/c%201?src=a%7Cb"})
	if got, want := sub.GetDeliveryUrl(), "https://example.com:8443/in/c%201?src=a%7Cb"; got != want {
		t.Errorf("subscription with an encoded path delivers to %q, want %q", got, want)
	}
}
