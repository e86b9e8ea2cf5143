package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// RotateDestinationSecret as the control plane does it, on the fake's
// state: the grace (24h unless given) runs from now.
func (f *fakeRivora) RotateDestinationSecret(_ context.Context, req *connect.Request[rivorav1.RotateDestinationSecretRequest]) (*connect.Response[rivorav1.RotateDestinationSecretResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := req.Msg
	d, ok := f.dests[m.GetDestinationId()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("destination %q not found", m.GetDestinationId()))
	}
	secret := m.GetSecret()
	if secret == "" {
		var err error
		if secret, err = webhook.NewSecret(); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	}
	grace := 24 * time.Hour
	if m.GetGrace() != nil {
		grace = m.GetGrace().AsDuration()
	}
	d.PreviousSecret, d.PreviousSecretExpiresAt, d.Secret = d.GetSecret(), timestamppb.New(time.Now().Add(grace)), secret
	out := withoutSecret(d)
	out.Secret = secret
	out.PreviousSecretFingerprint, out.PreviousSecret = auth.Fingerprint(d.GetPreviousSecret()), ""
	return connect.NewResponse(&rivorav1.RotateDestinationSecretResponse{Destination: out, Version: 7}), nil
}

func TestRotateSecret(t *testing.T) {
	f, url := startFake(t)
	const old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://example.com/hooks", "--secret", old))

	r := mustSucceed(t, run(t, url, "", "destinations", "rotate-secret", "orders", "--grace", "1h"))
	f.mu.Lock()
	d := proto.Clone(f.dests["orders"]).(*rivorav1.Destination)
	f.mu.Unlock()
	if until := time.Until(d.GetPreviousSecretExpiresAt().AsTime()); d.GetSecret() == old || d.GetPreviousSecret() != old || until < 59*time.Minute || until > time.Hour {
		t.Fatalf("after rotate-secret --grace 1h the destination is %v", d)
	}
	for _, want := range []string{"SECRET      " + d.GetSecret(), "OLD SECRET  " + auth.Fingerprint(old) + " signs too until " + fmtTime(d.GetPreviousSecretExpiresAt()), "shown only this once"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("rotate-secret output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, old) {
		t.Fatalf("rotate-secret shows the old secret:\n%s", r.stdout)
	}

	// --secret, no --grace (the server's 24h), -o json.
	const next = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
	r = mustSucceed(t, run(t, url, "", "-o", "json", "destinations", "rotate-secret", "orders", "--secret", next))
	var js struct {
		Secret, PreviousSecretFingerprint string
		PreviousSecretExpiresAt           time.Time
	}
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil {
		t.Fatalf("rotate-secret -o json: %v\n%s", err, r.stdout)
	}
	if until := time.Until(js.PreviousSecretExpiresAt); js.Secret != next || js.PreviousSecretFingerprint != auth.Fingerprint(d.GetSecret()) || until < 23*time.Hour || until > 24*time.Hour {
		t.Fatalf("rotate-secret -o json = %+v", js)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"destinations", "rotate-secret"}, "one destination ID"},
		{[]string{"destinations", "rotate-secret", "orders", "--secret", "hunter2"}, "--secret"},
		{[]string{"destinations", "rotate-secret", "orders", "--grace", "-1s"}, "--grace -1s"},
		{[]string{"destinations", "rotate-secret", "orders", "--grace", "soon"}, "grace"},
	} {
		assertFailure(t, run(t, url, "", c.args...), exitUsage, c.want)
	}
	assertFailure(t, run(t, url, "", "destinations", "rotate-secret", "nope"), exitError, "not found")
}

func TestHeaderFlags(t *testing.T) {
	f, url := startFake(t)
	mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://example.com/hooks",
		"--header", "Authorization: Bearer a, b", "--header", "X-Tenant:42"))
	want := []*rivorav1.Header{{Name: "Authorization", Value: "Bearer a, b"}, {Name: "X-Tenant", Value: "42"}}
	f.mu.Lock()
	got := f.creates[0].GetHeaders()
	f.mu.Unlock()
	if len(got) != len(want) || !proto.Equal(got[0], want[0]) || !proto.Equal(got[1], want[1]) {
		t.Fatalf("create --header sent %v, want %v (commas kept)", got, want)
	}

	mustSucceed(t, run(t, url, "", "destinations", "update", "orders", "--header", "X-Region: eu", "--remove-header", "Authorization", "--remove-header", "X-Tenant"))
	f.mu.Lock()
	u := f.updates[0]
	f.mu.Unlock()
	if len(u.GetSetHeaders()) != 1 || u.GetSetHeaders()[0].GetName() != "X-Region" || u.GetSetHeaders()[0].GetValue() != "eu" || strings.Join(u.GetRemoveHeaders(), ",") != "Authorization,X-Tenant" {
		t.Fatalf("update sent set %v remove %v", u.GetSetHeaders(), u.GetRemoveHeaders())
	}

	for _, bad := range []string{"Authorization", ": value", "  : x"} {
		assertFailure(t, run(t, url, "", "destinations", "create", "billing", "--url", "https://example.com/hooks", "--header", bad), exitUsage, "want 'Name: value'")
	}

	// get shows names and value fingerprints, as the server answers them.
	f.mu.Lock()
	f.dests["orders"].Headers = []*rivorav1.Header{{Name: "Authorization", ValueFingerprint: auth.Fingerprint("Bearer a, b")}}
	f.mu.Unlock()
	r := mustSucceed(t, run(t, url, "", "destinations", "get", "orders"))
	if !strings.Contains(r.stdout, "HEADERS  ") || !strings.Contains(r.stdout, "Authorization: "+auth.Fingerprint("Bearer a, b")) || strings.Contains(r.stdout, "Bearer") {
		t.Fatalf("get output:\n%s", r.stdout)
	}
}
