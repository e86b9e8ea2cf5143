package controlplane_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk/webhook"
)

const rotated = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="

func (d *dev) rotate(req *rivorav1.RotateDestinationSecretRequest) (*rivorav1.RotateDestinationSecretResponse, error) {
	resp, err := d.Admin.RotateDestinationSecret(context.Background(), connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// watchOnce is the snapshot an agent's Watch starts with.
func watchOnce(t *testing.T, d *dev) *rivorav1.WatchResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := d.Agents.Watch(ctx, connect.NewRequest(&rivorav1.WatchRequest{AgentName: "a1", Address: "http://127.0.0.1:1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no snapshot: %v", stream.Err())
	}
	return stream.Msg()
}

// A rotation shows the new secret once, keeps the previous one (on the
// agents' feed only) until the grace ends, and is audited without either.
func TestRotateSecret(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL, Secret: secret})

	before := time.Now()
	got, err := d.rotate(&rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Secret: rotated, Grace: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatalf("RotateDestinationSecret: %v", err)
	}
	a := got.GetDestination()
	if a.GetSecret() != rotated || a.GetSecretFingerprint() != auth.Fingerprint(rotated) {
		t.Fatalf("answer secret %q fingerprint %q, want the new secret shown once", a.GetSecret(), a.GetSecretFingerprint())
	}
	if a.GetPreviousSecret() != "" || a.GetPreviousSecretFingerprint() != auth.Fingerprint(secret) {
		t.Fatalf("answer previous secret %q fingerprint %q, want only the fingerprint of the old one", a.GetPreviousSecret(), a.GetPreviousSecretFingerprint())
	}
	if until := a.GetPreviousSecretExpiresAt().AsTime(); until.Before(before.Add(time.Hour)) || until.After(time.Now().Add(time.Hour)) {
		t.Fatalf("previous secret expires at %v, want an hour after the rotation", until)
	}

	l, err := d.Admin.ListDestinations(context.Background(), connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ld := l.Msg.GetDestinations()[0]; ld.GetSecret() != "" || ld.GetPreviousSecret() != "" || ld.GetPreviousSecretFingerprint() != auth.Fingerprint(secret) || ld.GetPreviousSecretExpiresAt() == nil {
		t.Fatalf("list shows secret %q previous %q (fingerprint %q, until %v); want fingerprints and the end only", ld.GetSecret(), ld.GetPreviousSecret(), ld.GetPreviousSecretFingerprint(), ld.GetPreviousSecretExpiresAt())
	}

	feed := watchOnce(t, d).GetDestinations()
	if len(feed) != 1 || feed[0].GetSecret() != rotated || feed[0].GetPreviousSecret() != secret || !feed[0].GetPreviousSecretExpiresAt().AsTime().Equal(a.GetPreviousSecretExpiresAt().AsTime()) {
		t.Fatalf("the feed carries %v, want the new secret and the previous one with its end", feed)
	}

	audit, err := d.Admin.ListAudit(context.Background(), connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	entries := audit.Msg.GetEntries()
	last := entries[len(entries)-1]
	if last.GetAction() != "destination.rotate_secret" || last.GetAuthor() != "bootstrap" || last.GetTokenId() == "" {
		t.Fatalf("audit entry %v, want destination.rotate_secret by the bootstrap token", last)
	}
	if !strings.Contains(last.GetDetail(), auth.Fingerprint(rotated)) || !strings.Contains(last.GetDetail(), "until") {
		t.Errorf("audit detail %q, want the new fingerprint and the grace's end", last.GetDetail())
	}
	for _, e := range entries {
		for _, s := range []string{secret, rotated, strings.TrimPrefix(secret, "whsec_"), strings.TrimPrefix(rotated, "whsec_")} {
			if strings.Contains(e.String(), s) {
				t.Fatalf("audit entry %v holds a secret", e)
			}
		}
	}

	// A second rotation with no grace: the previous secret is gone at
	// once, and a generated secret is answered.
	got, err = d.rotate(&rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Grace: durationpb.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	generated := got.GetDestination().GetSecret()
	if _, err := webhook.Key(generated); err != nil || generated == rotated {
		t.Fatalf("generated secret %q: %v", generated, err)
	}
	if fd := watchOnce(t, d).GetDestinations()[0]; fd.GetSecret() != generated || fd.GetPreviousSecret() != "" || fd.GetPreviousSecretExpiresAt() != nil {
		t.Fatalf("after a rotation without grace the feed carries %v, want the new secret alone", fd)
	}
}

func TestRotateSecretDefaultsTo24h(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL, Secret: secret})
	before := time.Now()
	got, err := d.rotate(&rivorav1.RotateDestinationSecretRequest{DestinationId: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	until := got.GetDestination().GetPreviousSecretExpiresAt().AsTime()
	if until.Before(before.Add(controlplane.DefaultRotationGrace)) || until.After(time.Now().Add(controlplane.DefaultRotationGrace)) || controlplane.DefaultRotationGrace != 24*time.Hour {
		t.Fatalf("previous secret signs until %v, want 24h after the rotation", until)
	}
	// A secret set with update replaces the old one at once: no grace.
	if _, err := d.Admin.UpdateDestination(context.Background(), connect.NewRequest(&rivorav1.UpdateDestinationRequest{Id: "orders", Secret: &[]string{secret}[0]})); err != nil {
		t.Fatal(err)
	}
	if fd := watchOnce(t, d).GetDestinations()[0]; fd.GetSecret() != secret || fd.GetPreviousSecret() != "" {
		t.Fatalf("after update --secret the feed carries %v, want the set secret alone", fd)
	}
}

func TestRotateSecretValidation(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL, Secret: secret})
	for _, c := range []struct {
		name     string
		req      *rivorav1.RotateDestinationSecretRequest
		code     connect.Code
		mentions []string
	}{
		{"bad secret", &rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Secret: "hunter2"}, connect.CodeInvalidArgument, []string{"secret", "whsec_"}},
		{"short secret", &rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Secret: "whsec_c2hvcnQ="}, connect.CodeInvalidArgument, []string{"at least 16"}},
		{"same secret", &rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Secret: secret}, connect.CodeInvalidArgument, []string{"current secret"}},
		{"negative grace", &rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Grace: durationpb.New(-time.Second)}, connect.CodeInvalidArgument, []string{"grace -1s", "7 days"}},
		{"grace over a week", &rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Grace: durationpb.New(8 * 24 * time.Hour)}, connect.CodeInvalidArgument, []string{"grace 192h", "168h"}},
		{"invalid duration", &rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Grace: &durationpb.Duration{Seconds: 1, Nanos: -1}}, connect.CodeInvalidArgument, []string{"grace"}},
		{"unknown destination", &rivorav1.RotateDestinationSecretRequest{DestinationId: "nope"}, connect.CodeNotFound, []string{`"nope"`}},
		{"operator notices", &rivorav1.RotateDestinationSecretRequest{DestinationId: "rivora-operator"}, connect.CodeInvalidArgument, []string{"reserved"}},
	} {
		_, err := d.rotate(c.req)
		wantCode(t, c.name, err, c.code, c.mentions...)
	}
	if fd := watchOnce(t, d).GetDestinations()[0]; fd.GetSecret() != secret || fd.GetPreviousSecret() != "" {
		t.Fatalf("refused rotations changed the destination: %v", fd)
	}
}

// Rotation is an admin's, like UpdateDestination.
func TestRotateSecretIsAdminOnly(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL, Secret: secret})
	for _, role := range []rivorav1.Role{rivorav1.Role_ROLE_OPERATOR, rivorav1.Role_ROLE_VIEWER} {
		c := rivorav1connect.NewAdminServiceClient(d.HTTPClient(), d.URL, d.As(d.Token(role)))
		_, err := c.RotateDestinationSecret(context.Background(), connect.NewRequest(&rivorav1.RotateDestinationSecretRequest{DestinationId: "orders"}))
		wantCode(t, "rotate as "+auth.RoleName(role), err, connect.CodePermissionDenied)
	}
}

// In process, with the agent: during a rotation's grace a delivery
// verifies with the old and with the new secret; after a rotation without
// grace only with the new one.
func TestDeliveriesDuringARotation(t *testing.T) {
	t.Parallel()
	got := make(chan *http.Request, 16)
	bodies := make(chan []byte, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
	}))
	t.Cleanup(srv.Close)
	d := startDev(t, t.TempDir(), true)
	d.Create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: srv.URL, Secret: secret})

	deliver := func() (http.Header, []byte) {
		t.Helper()
		if _, err := d.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "u", Type: "t", Payload: []byte(`{"n":1}`)})); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			return r.Header, <-bodies
		case <-time.After(20 * time.Second):
			t.Fatal("no delivery within 20s")
			return nil, nil
		}
	}
	verifies := func(secret string, h http.Header, body []byte) error {
		v, err := webhook.NewVerifier(secret)
		if err != nil {
			t.Fatal(err)
		}
		return v.Verify(h, body)
	}

	r, err := d.rotate(&rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Secret: rotated, Grace: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	d.WaitApplied(r.GetVersion())
	g, err := d.Admin.GetDestination(context.Background(), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	if gd := g.Msg.GetDestination(); gd.GetSecret() != "" || gd.GetPreviousSecret() != "" || gd.GetPreviousSecretFingerprint() != auth.Fingerprint(secret) {
		t.Fatalf("get shows secret %q previous %q (fingerprint %q); want fingerprints only", gd.GetSecret(), gd.GetPreviousSecret(), gd.GetPreviousSecretFingerprint())
	}
	h, body := deliver()
	if n := len(strings.Fields(h.Get(webhook.HeaderSignature))); n != 2 {
		t.Fatalf("during the grace webhook-signature = %q, want two", h.Get(webhook.HeaderSignature))
	}
	for _, s := range []string{secret, rotated} {
		if err := verifies(s, h, body); err != nil {
			t.Errorf("during the grace a receiver with one of the secrets rejects the delivery: %v", err)
		}
	}

	r, err = d.rotate(&rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Secret: secret, Grace: durationpb.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	d.WaitApplied(r.GetVersion())
	h, body = deliver()
	if err := verifies(secret, h, body); err != nil {
		t.Fatalf("after the rotation the new secret does not verify: %v", err)
	}
	if err := verifies(rotated, h, body); err == nil {
		t.Fatalf("after a rotation without grace the replaced secret still verifies: %q", h.Get(webhook.HeaderSignature))
	}
}

// Whitespace around a given secret or signing key (pasted, or read from a
// file) is not kept: the destination's secret, its fingerprint and its
// public key are the trimmed key's, on create, update, rotation and a
// subscription's own secret.
func TestGivenSecretsAreTrimmed(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	signing, public, err := webhook.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	created := d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL, Secret: " " + secret + "\n",
		SignatureScheme: webhook.SchemeBoth, SigningKey: "\t" + signing + "\r\n"}).GetDestination()
	if created.GetSecret() != secret || created.GetSecretFingerprint() != auth.Fingerprint(secret) {
		t.Errorf("created with secret %q (fingerprint %q), want %q", created.GetSecret(), created.GetSecretFingerprint(), secret)
	}
	if created.GetPublicKey() != public || created.GetSigningKeyFingerprint() != auth.Fingerprint(signing) {
		t.Errorf("created with public key %q, signing key fingerprint %q; want %q and the trimmed key's", created.GetPublicKey(), created.GetSigningKeyFingerprint(), public)
	}
	padded := rotated + " "
	updated, err := d.update(&rivorav1.UpdateDestinationRequest{Id: "orders", Secret: &padded})
	if err != nil {
		t.Fatal(err)
	}
	if updated.GetSecretFingerprint() != auth.Fingerprint(rotated) {
		t.Errorf("updated secret fingerprint %q, want the trimmed secret's", updated.GetSecretFingerprint())
	}
	// The same secret with a newline is the current one, not a new one.
	if _, err := d.rotate(&rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Secret: rotated + "\n"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("rotating to the current secret with a newline: %v, want invalid_argument", err)
	}
	got, err := d.rotate(&rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Secret: " " + secret})
	if err != nil {
		t.Fatal(err)
	}
	if a := got.GetDestination(); a.GetSecret() != secret || a.GetSecretFingerprint() != auth.Fingerprint(secret) {
		t.Errorf("rotated to secret %q (fingerprint %q), want %q", a.GetSecret(), a.GetSecretFingerprint(), secret)
	}
	sub := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "orders", Types: []string{"*"}, Secret: rotated + "\n"})
	if sub.GetSecretFingerprint() != auth.Fingerprint(rotated) {
		t.Errorf("subscription secret fingerprint %q, want the trimmed secret's", sub.GetSecretFingerprint())
	}
}
