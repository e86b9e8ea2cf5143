package destinations_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/destinations"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

const newSecret = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="

// verify checks a signature header as a receiver holding secret would, at
// the delivery's own time.
func verify(t *testing.T, secret, sig string, ts int64) error {
	t.Helper()
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, "e1")
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(webhook.HeaderSignature, sig)
	return v.WithClock(func() time.Time { return time.Unix(ts, 0) }).Verify(h, []byte("body"))
}

// A destination in a rotation's grace signs with both secrets until the
// grace's end, then with the new one alone: the end is checked when
// signing, with no new config from the control plane.
func TestSignerDuringAndAfterARotation(t *testing.T) {
	end := time.Unix(1700003600, 0)
	d, err := destinations.FromProto(&rivorav1.Destination{
		Id: "orders", Url: "http://x", Secret: newSecret,
		PreviousSecret: secret, PreviousSecretExpiresAt: timestamppb.New(end),
	})
	if err != nil {
		t.Fatal(err)
	}
	during := end.Unix() - 1
	sig := d.Signer.Sign("e1", during, []byte("body"))
	if n := len(strings.Fields(sig)); n != 2 {
		t.Fatalf("signature during the grace = %q, want two entries", sig)
	}
	for _, s := range []string{newSecret, secret} {
		if err := verify(t, s, sig, during); err != nil {
			t.Errorf("during the grace, a receiver with %s… rejects the delivery: %v", s[:10], err)
		}
	}
	after := end.Unix()
	sig = d.Signer.Sign("e1", after, []byte("body"))
	if err := verify(t, newSecret, sig, after); err != nil {
		t.Errorf("after the grace the new secret does not verify: %v", err)
	}
	if err := verify(t, secret, sig, after); !errors.Is(err, webhook.ErrNoMatch) {
		t.Errorf("after the grace the previous secret still verifies (%v): %q", err, sig)
	}
}

// A previous secret without an end (or none) signs nothing.
func TestSignerWithoutAGrace(t *testing.T) {
	d, err := destinations.FromProto(&rivorav1.Destination{Id: "orders", Url: "http://x", Secret: newSecret, PreviousSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if sig := d.Signer.Sign("e1", 1700000000, []byte("body")); strings.Contains(sig, " ") {
		t.Fatalf("signature = %q, want one entry", sig)
	}
	if _, err := destinations.FromProto(&rivorav1.Destination{Id: "orders", Secret: newSecret, PreviousSecret: "nope", PreviousSecretExpiresAt: timestamppb.Now()}); err == nil || !strings.Contains(err.Error(), `destination "orders": previous secret`) {
		t.Fatalf("a bad previous secret: err = %v, want one naming destination and previous secret", err)
	}
}

func TestCustomHeadersReachTheEndpoint(t *testing.T) {
	r := destinations.NewRegistry()
	r.Replace(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://a", Secret: secret, Headers: []*rivorav1.Header{
		{Name: "Authorization", Value: "Bearer abc"}, {Name: "x-tenant", Value: "42, 43"},
	}}})
	ep, err := r.Endpoint("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{"Authorization": {"Bearer abc"}, "X-Tenant": {"42, 43"}}
	if len(ep.Headers) != len(want) || ep.Headers.Get("Authorization") != "Bearer abc" || ep.Headers["X-Tenant"][0] != "42, 43" {
		t.Fatalf("endpoint headers = %v, want %v", ep.Headers, want)
	}
}
