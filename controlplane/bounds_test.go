package controlplane_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/rig"
)

// A huge URL, reason or token name is refused with a message naming the
// field and its limit, nothing of it is stored, and ListAudit keeps
// answering (a stored 5 MB URL used to break it for good).
func TestOversizedStringsAreRefused(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true})
	ctx := context.Background()
	if _, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "ok", Url: "http://127.0.0.1:9/hook"})); err != nil {
		t.Fatalf("create a destination: %v", err)
	}
	long := "http://127.0.0.1:9/" + strings.Repeat("a", 4096-19)
	for _, tc := range []struct {
		what string
		call func() error
		want string
	}{
		{"create with a 4 KiB url", func() error {
			_, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "big", Url: long}))
			return err
		}, "url is 4096 bytes; the limit is 2048"},
		{"update to a 4 KiB url", func() error {
			_, err := d.Admin.UpdateDestination(ctx, connect.NewRequest(&rivorav1.UpdateDestinationRequest{Id: "ok", Url: &long}))
			return err
		}, "url is 4096 bytes; the limit is 2048"},
		{"pause with a 2 KiB reason", func() error {
			_, err := d.Admin.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "ok", Reason: strings.Repeat("r", 2048)}))
			return err
		}, "reason is 2048 bytes; the limit is 1024"},
		{"override with a 2 KiB reason", func() error {
			_, err := d.Admin.SetLimitsOverride(ctx, connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{DestinationId: "ok", Reason: strings.Repeat("r", 2048)}))
			return err
		}, "reason is 2048 bytes; the limit is 1024"},
		{"token with a 1 KiB name", func() error {
			_, err := d.Tokens.CreateToken(ctx, connect.NewRequest(&rivorav1.CreateTokenRequest{Name: strings.Repeat("n", 1024), Role: rivorav1.Role_ROLE_VIEWER}))
			return err
		}, "name is 1024 bytes; the limit is 256"},
	} {
		err := tc.call()
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want InvalidArgument %q", tc.what, err, tc.want)
		}
	}

	// 5 MB: over the request bound itself, refused before it is decoded.
	huge := "http://127.0.0.1:9/" + strings.Repeat("a", 5<<20)
	_, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "huge", Url: huge}))
	if code := connect.CodeOf(err); code != connect.CodeResourceExhausted && code != connect.CodeInvalidArgument {
		t.Fatalf("create with a 5 MB url: %v; want it refused", err)
	}
	// Gzipped it is 5 KB on the wire; still refused, after decompressing
	// no more than the bound.
	gz := rivorav1connect.NewAdminServiceClient(d.HTTPClient(), d.URL, d.As(d.AdminToken), connect.WithSendGzip())
	_, err = gz.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "huge", Url: huge}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("create with a 5 MB url, gzipped: %v; want ResourceExhausted", err)
	}

	audit, err := d.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{}))
	if err != nil {
		t.Fatalf("ListAudit after the refusals: %v", err)
	}
	for _, e := range audit.Msg.GetEntries() {
		if e.GetDestinationId() == "big" || e.GetDestinationId() == "huge" {
			t.Errorf("a refused destination was audited: %v", e)
		}
	}
	if _, err := d.Admin.GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "big"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("refused destination: %v; want NotFound", err)
	}
}

// A raw body past the bound is cut on the wire (JSON, not compressed).
func TestOversizedBodyIsCut(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true})
	body := `{"id":"x","url":"http://h/` + strings.Repeat("a", 6<<20) + `"}`
	req, _ := http.NewRequest(http.MethodPost, d.URL+rivorav1connect.AdminServiceCreateDestinationProcedure, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+d.AdminToken)
	resp, err := d.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	if resp.StatusCode < 400 || !strings.Contains(out.String(), "resource_exhausted") {
		t.Fatalf("6 MB JSON body: %d %s; want resource_exhausted", resp.StatusCode, out.String())
	}
}
