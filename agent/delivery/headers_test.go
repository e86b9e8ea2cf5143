package delivery_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/sdk/webhook"
)

// Custom headers go out on the attempt; a name Rivora sets keeps Rivora's
// value even if one slipped past the control plane's validation.
func TestSendCustomHeaders(t *testing.T) {
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) {})
	ep := endpoint(t, srv.URL)
	ep.Headers = http.Header{
		"Authorization": {"Bearer abc"},
		"X-Tenant":      {"42, 43"},
		"Webhook-Id":    {"forged"},
		"Content-Type":  {"text/forged"},
	}
	res := delivery.NewSender("ua", loopbackOnly).Send(context.Background(), delivery.Request{Endpoint: ep, Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	if !res.OK() {
		t.Fatalf("Send = %+v", res)
	}
	r := <-got
	for k, v := range map[string]string{"Authorization": "Bearer abc", "X-Tenant": "42, 43", "Webhook-Id": "evt_01J7", "Content-Type": "application/cloudevents+json"} {
		if g := r.header.Values(k); len(g) != 1 || g[0] != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
}

// A rotating signer puts both signatures on the attempt; receivers with
// either secret accept it.
func TestSendDuringARotation(t *testing.T) {
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) {})
	fresh, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	s, err := webhook.NewSigner(fresh)
	if err != nil {
		t.Fatal(err)
	}
	ep := endpoint(t, srv.URL)
	if ep.Signer, err = s.WithPrevious(secret, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	res := delivery.NewSender("ua", loopbackOnly).Send(context.Background(), delivery.Request{Endpoint: ep, Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	if !res.OK() {
		t.Fatalf("Send = %+v", res)
	}
	r := <-got
	if n := len(strings.Fields(r.header.Get(webhook.HeaderSignature))); n != 2 {
		t.Fatalf("webhook-signature = %q, want two signatures", r.header.Get(webhook.HeaderSignature))
	}
	for _, sec := range []string{fresh, secret} {
		v, err := webhook.NewVerifier(sec)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(r.header, r.body); err != nil {
			t.Errorf("a receiver with one of the two secrets rejects the delivery: %v", err)
		}
	}
}
