package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// The certificate and OAuth2 flags read the PEM files into the request
// and refuse what cannot work before calling the server (usage errors,
// exit 2).
func TestEndpointAuthFlags(t *testing.T) {
	f, url := startFake(t)
	dir := t.TempDir()
	certFile, keyFile, notPEM := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), filepath.Join(dir, "x.txt")
	const certPEM, keyPEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
	for path, data := range map[string]string{certFile: certPEM, keyFile: keyPEM, notPEM: "hello"} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mustSucceed(t, run(t, url, "", "destinations", "create", "bank", "--url", "https://example.com/h", "--client-cert", certFile, "--client-key", keyFile, "--server-ca", certFile,
		"--oauth2-token-url", "https://auth.example.com/token", "--oauth2-client-id", "rivora", "--oauth2-client-secret", "s", "--oauth2-scope", "a", "--oauth2-scope", "b"))
	f.mu.Lock()
	c := f.creates[len(f.creates)-1]
	f.mu.Unlock()
	if c.GetClientCertificate().GetCertificatePem() != certPEM || c.GetClientCertificate().GetKeyPem() != keyPEM || c.GetServerCa().GetCertificatePem() != certPEM ||
		c.GetOauth2().GetClientSecret() != "s" || len(c.GetOauth2().GetScopes()) != 2 {
		t.Fatalf("create sent %v", c)
	}

	if r := mustSucceed(t, run(t, url, "", "destinations", "update", "bank", "--oauth2-token-url", "http://auth.example.com/token")); !strings.Contains(r.stderr, "warning: --oauth2-token-url is http://") {
		t.Fatalf("an http token URL: stderr %q; want a warning that the client secret goes unencrypted", r.stderr)
	}
	if r := run(t, url, "", "destinations", "update", "bank", "--oauth2-token-url", "https://auth.example.com/token"); strings.Contains(r.stderr, "warning") {
		t.Fatalf("an https token URL: stderr %q; want no warning", r.stderr)
	}
	mustSucceed(t, run(t, url, "", "destinations", "update", "bank", "--client-cert", certFile, "--client-key", keyFile, "--client-cert-overlap", "2h"))
	f.mu.Lock()
	u := f.updates[len(f.updates)-1]
	f.mu.Unlock()
	if u.GetClientCertificateOverlap().AsDuration() != 2*time.Hour || u.GetClientCertificate().GetKeyPem() != keyPEM {
		t.Fatalf("update sent %v", u)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"destinations", "create", "b2", "--url", "https://example.com/h", "--client-cert", certFile}, "go together"},
		{[]string{"destinations", "create", "b2", "--url", "https://example.com/h", "--client-cert", notPEM, "--client-key", keyFile}, "not a PEM file"},
		{[]string{"destinations", "create", "b2", "--url", "https://example.com/h", "--client-cert", filepath.Join(dir, "missing"), "--client-key", keyFile}, "--client-cert"},
		{[]string{"destinations", "create", "b2", "--url", "https://example.com/h", "--oauth2-token-url", "https://auth.example.com/token"}, "--oauth2-client-id"},
		{[]string{"destinations", "create", "b2", "--url", "https://example.com/h", "--oauth2-token-url", "ftp://auth.example.com/t", "--oauth2-client-id", "a", "--oauth2-client-secret", "s"}, `--oauth2-token-url "ftp://auth.example.com/t": want an absolute http or https URL`},
	} {
		assertFailure(t, run(t, url, "", c.args...), 2, c.want)
	}
}

// RIVORA_OAUTH2_CLIENT_SECRET gives create's secret when OAuth2 flags are
// given without one, and nothing else: an update (where a secret not
// given means unchanged) or a create without OAuth2 never takes it. "-"
// reads the secret from stdin, on create and update.
func TestOAuth2SecretFromTheEnvironmentOnlyOnCreate(t *testing.T) {
	f, url := startFake(t)
	t.Setenv(oauth2SecretEnv, "from-env\n")
	last := func() (*rivorav1.CreateDestinationRequest, *rivorav1.UpdateDestinationRequest) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var c *rivorav1.CreateDestinationRequest
		var u *rivorav1.UpdateDestinationRequest
		if len(f.creates) > 0 {
			c = f.creates[len(f.creates)-1]
		}
		if len(f.updates) > 0 {
			u = f.updates[len(f.updates)-1]
		}
		return c, u
	}
	mustSucceed(t, run(t, url, "", "destinations", "create", "erp", "--url", "https://example.com/h", "--oauth2-token-url", "https://auth.example.com/token", "--oauth2-client-id", "rivora"))
	if c, _ := last(); c.GetOauth2().GetClientSecret() != "from-env" {
		t.Fatalf("create with OAuth2 flags sent secret %q, want the environment's", c.GetOauth2().GetClientSecret())
	}
	mustSucceed(t, run(t, url, "", "destinations", "create", "plain", "--url", "https://example.com/p"))
	if c, _ := last(); c.GetOauth2() != nil {
		t.Fatalf("create without OAuth2 flags sent OAuth2 settings %v", c.GetOauth2())
	}
	mustSucceed(t, run(t, url, "", "destinations", "update", "plain", "--max-attempts", "3"))
	if _, u := last(); u.GetOauth2() != nil {
		t.Fatalf("an unrelated update sent OAuth2 settings %v", u.GetOauth2())
	}
	mustSucceed(t, run(t, url, "", "destinations", "update", "erp", "--oauth2-client-id", "other"))
	if _, u := last(); u.GetOauth2().GetClientSecret() != "" {
		t.Fatalf("an update of the client id sent secret %q, want none (unchanged)", u.GetOauth2().GetClientSecret())
	}
	mustSucceed(t, run(t, url, "rotated-secret\n", "destinations", "update", "erp", "--oauth2-client-secret", "-"))
	if _, u := last(); u.GetOauth2().GetClientSecret() != "rotated-secret" {
		t.Fatalf("--oauth2-client-secret - sent %q, want stdin's first line", u.GetOauth2().GetClientSecret())
	}
	assertFailure(t, run(t, url, "", "destinations", "update", "erp", "--oauth2-client-secret", "-"), 2, "stdin is empty")
}
