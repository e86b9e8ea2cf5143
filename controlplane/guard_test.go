package controlplane_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/ssrf"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/rig"
)

// deniedURLs are destination URLs the guard refuses at create time, each
// with the rule its error must name.
var deniedURLs = map[string]string{
	"http://169.254.169.254/latest/meta-data/":            "169.254.169.254 is in 169.254.0.0/16 (link-local",
	"http://[fd00:ec2::254]/latest/meta-data/":            "fd00:ec2::254 is in fc00::/7 (unique local",
	"http://10.0.0.5:8080/hook":                           "10.0.0.5 is in 10.0.0.0/8 (private, RFC 1918)",
	"https://172.16.4.2/hook":                             "172.16.0.0/12 (private, RFC 1918)",
	"http://192.168.1.1/hook":                             "192.168.0.0/16 (private, RFC 1918)",
	"http://100.64.0.1/hook":                              "100.64.0.0/10 (shared address space, carrier-grade NAT",
	"http://0.0.0.0:9000/hook":                            "0.0.0.0/8 (unspecified",
	"http://255.255.255.255/hook":                         "255.255.255.255/32 (broadcast)",
	"http://224.0.0.251/hook":                             "224.0.0.0/4 (multicast)",
	"http://[::]/hook":                                    ":: is in ::/128 (unspecified)",
	"http://[fe80::1%25eth0]/hook":                        "fe80::/10 (link-local)",
	"http://[fc00::5]/hook":                               "fc00::/7",
	"http://[ff02::1]/hook":                               "ff00::/8 (multicast)",
	"http://[::ffff:10.0.0.5]/hook":                       "::ffff:10.0.0.5 is the IPv4-mapped IPv6 form of 10.0.0.5, which is in 10.0.0.0/8",
	"http://[::ffff:a9fe:a9fe]/hook":                      "IPv4-mapped IPv6 form of 169.254.169.254",
	"http://[::192.168.0.1]/hook":                         "IPv4-compatible IPv6 form of 192.168.0.1",
	"http://[64:ff9b::169.254.169.254]/hook":              "NAT64 (RFC 6052) form of 169.254.169.254",
	"http://[2002:a9fe:a9fe::1]/hook":                     "6to4 (RFC 3056) form of 169.254.169.254",
	"http://metadata.google.internal/computeMetadata/v1/": "metadata.google.internal is the Google Cloud metadata service (169.254.169.254)",
	"http://metadata/computeMetadata/v1/":                 "the Google Cloud metadata service's short name",
	"http://instance-data/latest/":                        "the AWS EC2 instance metadata service",
	// Non-canonical IPv4: refused even where loopback is allowed.
	"http://0x7f000001:9000/hook": "0x7f000001 is 127.0.0.1 written in a form other than a.b.c.d",
	"http://2130706433/hook":      "2130706433 is 127.0.0.1 written",
	"http://0177.0.0.1/hook":      "0177.0.0.1 is 127.0.0.1 written",
	"http://127.1/hook":           "127.1 is 127.0.0.1 written",
	"http://0xa9fea9fe/":          "is 169.254.169.254 written",
	// Forms IDNA maps to a denied address, as the agent's HTTP client
	// does before dialling (issue 22).
	"http://１６９．２５４．１６９．２５４/latest/meta-data/": "(read as 169.254.169.254) is in 169.254.0.0/16 (link-local",
	"http://１０。０。０。５/hook":                     "(read as 10.0.0.5) is in 10.0.0.0/8 (private, RFC 1918)",
	"http://ｍｅｔａｄａｔａ.google.internal/":         "(read as metadata.google.internal) is the Google Cloud metadata service",
}

// TestCreateRefusesDeniedDestinations: creating or updating a destination
// whose literal address or host name the guard denies is InvalidArgument
// naming the rule and the flag that opens it; nothing is created; the
// allowed loopback (the rig's guard) still works.
func TestCreateRefusesDeniedDestinations(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true})
	ctx := context.Background()
	okURL := sink(t).URL
	d.Create(&rivorav1.CreateDestinationRequest{Id: "ok", Url: okURL})
	for u, rule := range deniedURLs {
		_, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "bad", Url: u}))
		wantCode(t, "create "+u, err, connect.CodeInvalidArgument, "refused by SSRF guard: ", rule)
		if !strings.Contains(rule, "written") && !strings.Contains(err.Error(), "an operator may allow it with --allow-destination-cidr") {
			t.Errorf("create %s: %q does not say how to allow it", u, err)
		}
		_, err = d.Admin.UpdateDestination(ctx, connect.NewRequest(&rivorav1.UpdateDestinationRequest{Id: "ok", Url: proto.String(u)}))
		wantCode(t, "update to "+u, err, connect.CodeInvalidArgument, "refused by SSRF guard: ", rule)
	}
	list, err := d.Admin.ListDestinations(ctx, connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ds := list.Msg.GetDestinations(); len(ds) != 1 || ds[0].GetUrl() != okURL {
		t.Fatalf("destinations after the refusals: %v, want only the loopback one, unchanged", ds)
	}
}

// TestGuardConfig: a control plane with no Guard denies loopback too (the
// secure default of the library); an allowed CIDR opens exactly its range.
func TestGuardConfig(t *testing.T) {
	ctx := context.Background()
	strict := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true, ControlPlane: func(c *controlplane.Config) { c.Guard = nil }})
	_, err := strict.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "local", Url: "http://127.0.0.1:9000/hook"}))
	wantCode(t, "create on loopback with no guard configured", err, connect.CodeInvalidArgument, "refused by SSRF guard: 127.0.0.1 is in 127.0.0.0/8 (loopback); an operator may allow it with --allow-destination-cidr")
	_, err = strict.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "local", Url: "http://localhost:9000/hook"}))
	wantCode(t, "create on localhost with no guard configured", err, connect.CodeInvalidArgument, "localhost is a loopback name")
	for _, u := range []string{"http://１２７.０.０.１/", "http://127。0。0。1/", "http://１２７．０．０．１:9000/hook"} {
		_, err = strict.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "local", Url: u}))
		wantCode(t, "create on "+u+" with no guard configured", err, connect.CodeInvalidArgument, "(read as 127.0.0.1) is in 127.0.0.0/8 (loopback); an operator may allow it with --allow-destination-cidr")
	}

	open := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true, ControlPlane: func(c *controlplane.Config) {
		c.Guard = ssrf.New([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("169.254.169.254/32")})
	}})
	for i, u := range []string{"http://10.0.0.5/hook", "http://[::ffff:10.1.2.3]/hook", "http://169.254.169.254/", "http://metadata.google.internal/"} {
		open.Create(&rivorav1.CreateDestinationRequest{Id: fmt.Sprintf("d%d", i), Url: u})
	}
	for u, rule := range map[string]string{"http://172.16.0.1/": "172.16.0.0/12", "http://127.0.0.1/": "127.0.0.0/8", "http://0x0a000005/": "is 10.0.0.5 written"} {
		_, err := open.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "no", Url: u}))
		wantCode(t, "create "+u+" with 10.0.0.0/8 allowed", err, connect.CodeInvalidArgument, rule)
	}
}

// TestOperatorWebhookGuarded: a control plane refuses to start with an
// operator webhook the guard denies, naming the rule.
func TestOperatorWebhookGuarded(t *testing.T) {
	dir := t.TempDir()
	_, err := controlplane.New(controlplane.Config{
		StateDir: dir, Keys: auth.NewKeys(auth.CellToken{}), AdminTokenPath: filepath.Join(dir, "admin.token"),
		OperatorWebhook: "http://169.254.169.254/ops", OperatorSecretPath: filepath.Join(dir, "op.secret"),
	}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "operator webhook") || !strings.Contains(err.Error(), "refused by SSRF guard: 169.254.169.254 is in 169.254.0.0/16") {
		t.Fatalf("controlplane.New with a metadata operator webhook: %v, want a refusal naming the rule", err)
	}
}
