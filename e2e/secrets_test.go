package e2e

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// publishDelivered publishes one event to dest with rivoractl and returns
// the partner's record of its delivery.
func publishDelivered(t *testing.T, d *devProc, p *partner.Partner, dest string) partner.Request {
	t.Helper()
	out := rivoractl(t, d, "publish", "--destination", dest, "--customer", "c1", "--lane", "l1", "--type", "t", "--data", `{"n":1}`)
	id := eventIDPattern.FindString(out)
	if id == "" {
		t.Fatalf("publish printed no event id: %q", out)
	}
	p.WaitDelivered(t, []string{id}, 30*time.Second)
	for _, r := range p.Requests() {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("the partner has no record of %s", id)
	return partner.Request{}
}

// verifiesWith says whether a receiver holding secret accepts r.
func verifiesWith(t *testing.T, secret string, r partner.Request) error {
	t.Helper()
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	return v.Verify(r.Header, r.Payload)
}

func rotateJSON(t *testing.T, d *devProc, args ...string) *rivorav1.Destination {
	t.Helper()
	out := rivoractl(t, d, append([]string{"destinations", "rotate-secret", "-o", "json", "--wait"}, args...)...)
	dst := &rivorav1.Destination{}
	if err := protojson.Unmarshal([]byte(out), dst); err != nil {
		t.Fatalf("rotate-secret -o json is not a Destination: %v\n%s", err, out)
	}
	return dst
}

// After `rotate-secret --grace 1h` a delivery verifies with the old and
// with the new secret; after a grace has ended only with the new one. The
// grace's end needs no push: the agent checks it when it signs.
func TestRotateSecret(t *testing.T) {
	d := startDev(t, devOptions{})
	p := newPartner(t)
	created := &rivorav1.Destination{}
	if out := rivoractl(t, d, "destinations", "create", "r1", "--url", p.URL(), "-o", "json", "--wait"); protojson.Unmarshal([]byte(out), created) != nil {
		t.Fatalf("destinations create -o json is not a Destination:\n%s", out)
	}
	old := created.GetSecret()
	if err := p.SetSecret(old); err != nil {
		t.Fatal(err)
	}

	rotated := rotateJSON(t, d, "r1", "--grace", "1h")
	fresh := rotated.GetSecret()
	if _, err := webhook.Key(fresh); err != nil || fresh == old {
		t.Fatalf("rotate-secret answered secret %q (%v), want a new one", fresh, err)
	}
	if rotated.GetPreviousSecret() != "" || rotated.GetPreviousSecretFingerprint() != auth.Fingerprint(old) {
		t.Fatalf("rotate-secret shows previous secret %q, fingerprint %q", rotated.GetPreviousSecret(), rotated.GetPreviousSecretFingerprint())
	}
	r := publishDelivered(t, d, p, "r1")
	if sigs := strings.Fields(r.Header.Get(webhook.HeaderSignature)); len(sigs) != 2 {
		t.Fatalf("during the grace webhook-signature = %q, want v1,<new> v1,<old>", r.Header.Get(webhook.HeaderSignature))
	}
	for name, s := range map[string]string{"old": old, "new": fresh} {
		if err := verifiesWith(t, s, r); err != nil {
			t.Errorf("during the grace the %s secret does not verify the delivery: %v", name, err)
		}
	}
	got := getDestination(t, d, "r1")
	if got.GetSecret() != "" || got.GetPreviousSecret() != "" || got.GetSecretFingerprint() != auth.Fingerprint(fresh) || got.GetPreviousSecretFingerprint() != auth.Fingerprint(old) {
		t.Fatalf("destinations get shows %v, want fingerprints only", got)
	}

	// A grace of 2 seconds: deliveries carry both until it ends, then the
	// newest secret alone.
	newest := rotateJSON(t, d, "r1", "--grace", "2s").GetSecret()
	if err := p.SetSecret(newest); err != nil {
		t.Fatal(err)
	}
	if poll.Within(30*time.Second, func() bool {
		r = publishDelivered(t, d, p, "r1")
		return !strings.Contains(r.Header.Get(webhook.HeaderSignature), " ")
	}) != nil {
		t.Fatalf("30s after a 2s grace deliveries still carry two signatures: %q", r.Header.Get(webhook.HeaderSignature))
	}
	if err := verifiesWith(t, newest, r); err != nil {
		t.Fatalf("after the grace the newest secret does not verify: %v", err)
	}
	if err := verifiesWith(t, fresh, r); !errors.Is(err, webhook.ErrNoMatch) {
		t.Fatalf("after the grace the replaced secret still verifies (err %v)", err)
	}

	// Audited with the token as author, never with a secret.
	out := rivoractl(t, d, "audit", "--destination", "r1", "-o", "json")
	if n := strings.Count(out, `"destination.rotate_secret"`); n != 2 {
		t.Errorf("audit has %d destination.rotate_secret entries, want 2:\n%s", n, out)
	}
	for _, s := range []string{old, fresh, newest} {
		if strings.Contains(out, strings.TrimPrefix(s, "whsec_")) {
			t.Fatalf("the audit log holds a secret:\n%s", out)
		}
	}
	var entries []struct{ Action, Author string }
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("audit -o json: %v\n%s", err, out)
	}
	for _, e := range entries {
		if e.Action == "destination.rotate_secret" && (e.Author == "" || e.Author == "unknown") {
			t.Errorf("rotation audited with author %q, want the token's name", e.Author)
		}
	}

	// Bad input is refused and changes nothing.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"destinations", "rotate-secret", "r1", "--grace", "200h"}, "168h"},
		{[]string{"destinations", "rotate-secret", "r1", "--secret", newest}, "current secret"},
		{[]string{"destinations", "rotate-secret", "nope"}, "nope"},
	} {
		if _, errOut, err := runRivoractl(d, c.args...); err == nil || !strings.Contains(errOut, c.want) {
			t.Errorf("rivoractl %s: err %v, stderr %q; want a failure mentioning %q", strings.Join(c.args, " "), err, errOut, c.want)
		}
	}
}

// A custom header reaches the partner on every attempt; `webhook-id` as a
// custom header is refused; `destinations get` shows the header masked.
func TestCustomHeaders(t *testing.T) {
	d := startDev(t, devOptions{})
	p := newPartner(t)
	created := &rivorav1.Destination{}
	out := rivoractl(t, d, "destinations", "create", "h1", "--url", p.URL(), "--header", "Authorization: Bearer gw-s3cret", "--header", "X-Tenant: a, b", "-o", "json", "--wait")
	if err := protojson.Unmarshal([]byte(out), created); err != nil {
		t.Fatalf("destinations create -o json is not a Destination: %v\n%s", err, out)
	}
	if strings.Contains(out, "gw-s3cret") {
		t.Fatalf("create shows a header value:\n%s", out)
	}
	if err := p.SetSecret(created.GetSecret()); err != nil {
		t.Fatal(err)
	}

	r := publishDelivered(t, d, p, "h1")
	if r.Header.Get("Authorization") != "Bearer gw-s3cret" || r.Header.Get("X-Tenant") != "a, b" {
		t.Fatalf("the partner got Authorization %q, X-Tenant %q", r.Header.Get("Authorization"), r.Header.Get("X-Tenant"))
	}

	_, errOut, err := runRivoractl(d, "destinations", "create", "h2", "--url", p.URL(), "--header", "webhook-id: forged")
	if err == nil || !strings.Contains(errOut, `header "webhook-id" is reserved`) || !strings.Contains(errOut, "invalid") {
		t.Fatalf("create with a webhook-id header: err %v, stderr %q; want InvalidArgument naming the reserved header", err, errOut)
	}
	_, errOut, err = runRivoractl(d, "destinations", "update", "h1", "--header", "Content-Type: text/plain")
	if err == nil || !strings.Contains(errOut, "reserved") {
		t.Fatalf("update with a content-type header: err %v, stderr %q", err, errOut)
	}

	table := rivoractl(t, d, "destinations", "get", "h1")
	if !strings.Contains(table, "Authorization: "+auth.Fingerprint("Bearer gw-s3cret")) || strings.Contains(table, "gw-s3cret") {
		t.Fatalf("destinations get does not show the header masked:\n%s", table)
	}
	js := rivoractl(t, d, "destinations", "get", "h1", "-o", "json")
	if strings.Contains(js, "gw-s3cret") || !strings.Contains(js, auth.Fingerprint("Bearer gw-s3cret")) {
		t.Fatalf("destinations get -o json does not show the header masked:\n%s", js)
	}

	// Removed: the next delivery goes without it.
	rivoractl(t, d, "destinations", "update", "h1", "--remove-header", "authorization", "--wait")
	r = publishDelivered(t, d, p, "h1")
	if r.Header.Get("Authorization") != "" || r.Header.Get("X-Tenant") != "a, b" {
		t.Fatalf("after --remove-header the partner got Authorization %q, X-Tenant %q", r.Header.Get("Authorization"), r.Header.Get("X-Tenant"))
	}
}
