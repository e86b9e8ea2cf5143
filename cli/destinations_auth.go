package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// How a destination authenticates Rivora to its partner beyond the
// signature: --client-cert/--client-key (mTLS), --server-ca (a pinned
// CA), --oauth2-* (client credentials). rivoractl reads the PEM files and
// passes them on; the server checks them. The private key and the client
// secret are kept like signing secrets: answers show fingerprints.

// endpointAuthFlags are create's and update's flags (update adds the
// overlap and the --remove-* flags).
func endpointAuthFlags(update bool) []ucli.Flag {
	flags := []ucli.Flag{
		&ucli.StringFlag{Name: "client-cert", Usage: "mTLS client certificate `FILE` (PEM, leaf first, at most 64 KiB) presented to the partner on https; needs --client-key"},
		&ucli.StringFlag{Name: "client-key", Usage: "private key `FILE` (PEM, at most 16 KiB) of --client-cert; kept like a secret: answers show only a fingerprint"},
		&ucli.StringFlag{Name: "server-ca", Usage: "CA certificate `FILE` (PEM, one or more, at most 64 KiB) the partner's server certificate must chain to, instead of the system's roots"},
		&ucli.StringFlag{Name: "oauth2-token-url", Usage: "the partner's OAuth2 token endpoint `URL` (client-credentials grant); Rivora sends Authorization: Bearer with the token"},
		&ucli.StringFlag{Name: "oauth2-client-id", Usage: "OAuth2 client `ID`"},
		&ucli.StringFlag{Name: "oauth2-client-secret", Usage: "OAuth2 client `SECRET`; - reads it from stdin, which keeps it out of process lists (so does $" + oauth2SecretEnv + " on create); answers show only a fingerprint"},
		&ucli.StringSliceFlag{Name: "oauth2-scope", Usage: "OAuth2 `SCOPE` to ask for (repeat for several)"},
		&ucli.StringFlag{Name: "oauth2-audience", Usage: "OAuth2 `AUDIENCE` parameter (Auth0 and others want it)"},
	}
	if update {
		flags = append(flags,
			durationFlagOf("client-cert-overlap", "with a new --client-cert: how long the replaced certificate stays the fallback when the partner refuses the new one in a handshake (0: none; at most 168h); alone: end the current overlap that long from now (0: at once)", 0, "24h"),
			&ucli.BoolFlag{Name: "remove-client-cert", Usage: "stop presenting a client certificate"},
			&ucli.BoolFlag{Name: "remove-server-ca", Usage: "stop pinning the partner's CA (use the system's roots)"},
			&ucli.BoolFlag{Name: "remove-oauth2", Usage: "stop sending an OAuth2 bearer token"},
		)
	}
	return flags
}

// endpointAuthHelp explains the flags in create's and update's help.
const endpointAuthHelp = `--client-cert FILE --client-key FILE makes Rivora present that client
certificate to the partner (mTLS, https URLs only). On update, the replaced
certificate stays a fallback for --client-cert-overlap (default 24h): when the
partner refuses the new one in the handshake, the attempt is made again at once
with the old one (--client-cert-overlap alone moves the end of that overlap;
0 ends it now). --server-ca FILE pins the partner's CA. --oauth2-token-url,
--oauth2-client-id and --oauth2-client-secret make Rivora fetch a token
(client-credentials grant, cached until shortly before it expires) and send
Authorization: Bearer TOKEN. A refused handshake or a failing token endpoint is
the destination's fault: its events are held, as in an outage, and its health
and the events' last error say why.`

// readPEMFlag reads the PEM file a flag names ("" when not set).
func readPEMFlag(c *ucli.Context, name string) (string, error) {
	path := c.String(name)
	if path == "" {
		return "", nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", usagef("--%s: %v", name, err)
	}
	if !strings.Contains(string(data), "-----BEGIN ") {
		return "", usagef("--%s %s: not a PEM file (want -----BEGIN …-----)", name, path)
	}
	return string(data), nil
}

// certificateFlags reads --client-cert/--client-key and --server-ca.
func certificateFlags(c *ucli.Context) (client, ca *rivorav1.Certificate, err error) {
	if c.IsSet("client-cert") != c.IsSet("client-key") {
		return nil, nil, usagef("--client-cert and --client-key go together: give the certificate and its private key")
	}
	if c.IsSet("client-cert") {
		client = &rivorav1.Certificate{}
		if client.CertificatePem, err = readPEMFlag(c, "client-cert"); err != nil {
			return nil, nil, err
		}
		if client.KeyPem, err = readPEMFlag(c, "client-key"); err != nil {
			return nil, nil, err
		}
	}
	if c.IsSet("server-ca") {
		ca = &rivorav1.Certificate{}
		if ca.CertificatePem, err = readPEMFlag(c, "server-ca"); err != nil {
			return nil, nil, err
		}
	}
	return client, ca, nil
}

// oauth2SecretEnv is where create takes the OAuth2 client secret from
// when OAuth2 flags are given without --oauth2-client-secret. Only
// create: on update, a secret not given means "unchanged", and one taken
// from the environment would silently replace another destination's.
const oauth2SecretEnv = "RIVORA_OAUTH2_CLIENT_SECRET"

// oauth2Flags reads the --oauth2-* flags (nil when none is set). create
// needs the URL, id and secret; update may change any of them.
func (e *env) oauth2Flags(c *ucli.Context, create bool) (*rivorav1.OAuth2ClientCredentials, error) {
	names := []string{"oauth2-token-url", "oauth2-client-id", "oauth2-client-secret", "oauth2-scope", "oauth2-audience"}
	given := false
	for _, n := range names {
		given = given || c.IsSet(n)
	}
	if !given {
		return nil, nil
	}
	o := &rivorav1.OAuth2ClientCredentials{
		TokenUrl: c.String("oauth2-token-url"), ClientId: c.String("oauth2-client-id"), ClientSecret: c.String("oauth2-client-secret"),
		Scopes: c.StringSlice("oauth2-scope"), Audience: c.String("oauth2-audience"),
	}
	switch {
	case o.ClientSecret == "-":
		secret, err := readSecretLine(e.in)
		if err != nil {
			return nil, usagef("--oauth2-client-secret -: %v", err)
		}
		o.ClientSecret = secret
	case create && !c.IsSet("oauth2-client-secret"):
		o.ClientSecret = strings.TrimSpace(os.Getenv(oauth2SecretEnv))
	}
	if create && (o.TokenUrl == "" || o.ClientId == "" || o.ClientSecret == "") {
		return nil, usagef("OAuth2 needs --oauth2-token-url, --oauth2-client-id and --oauth2-client-secret together")
	}
	if o.TokenUrl != "" {
		if err := checkURLFlag("oauth2-token-url", o.TokenUrl); err != nil {
			return nil, err
		}
		if strings.HasPrefix(strings.ToLower(o.TokenUrl), "http://") {
			fmt.Fprintln(e.errOut, "warning: --oauth2-token-url is http://: the client secret goes to it unencrypted, in HTTP Basic (OAuth2 requires TLS for the token endpoint); use https unless the endpoint is on a network you trust")
		}
	}
	return o, nil
}

// updateEndpointAuthFlags fills an update request from the flags and
// reports whether any was set.
func (e *env) updateEndpointAuthFlags(c *ucli.Context, req *rivorav1.UpdateDestinationRequest) (bool, error) {
	var err error
	if req.ClientCertificate, req.ServerCa, err = certificateFlags(c); err != nil {
		return false, err
	}
	if req.Oauth2, err = e.oauth2Flags(c, false); err != nil {
		return false, err
	}
	if c.IsSet("client-cert-overlap") {
		req.ClientCertificateOverlap = durationpb.New(flagDuration(c, "client-cert-overlap"))
	}
	req.RemoveClientCertificate, req.RemoveServerCa, req.RemoveOauth2 = c.Bool("remove-client-cert"), c.Bool("remove-server-ca"), c.Bool("remove-oauth2")
	return req.ClientCertificate != nil || req.ClientCertificateOverlap != nil || req.ServerCa != nil || req.Oauth2 != nil ||
		req.RemoveClientCertificate || req.RemoveServerCa || req.RemoveOauth2, nil
}

// endpointAuthFields are the lines `destinations get` shows for a
// destination's client certificate, pinned CA and OAuth2 settings.
func endpointAuthFields(d *rivorav1.Destination) []string {
	var kv []string
	if c := d.GetClientCertificate(); c != nil {
		kv = append(kv, "CLIENT CERT", certificateText(c), "CLIENT KEY", dash(c.GetKeyFingerprint())+" (fingerprint)")
	}
	if c := d.GetPreviousClientCertificate(); c != nil {
		kv = append(kv, "PREVIOUS CERT", fmt.Sprintf("%s, fallback until %s", certificateText(c), fmtTime(c.GetOverlapUntil())))
	}
	if c := d.GetServerCa(); c != nil {
		kv = append(kv, "SERVER CA", certificateText(c))
	}
	if o := d.GetOauth2(); o != nil {
		text := fmt.Sprintf("token URL %s, client id %s, secret %s (fingerprint)", o.GetTokenUrl(), o.GetClientId(), dash(o.GetClientSecretFingerprint()))
		if len(o.GetScopes()) > 0 {
			text += ", scopes " + strings.Join(o.GetScopes(), " ")
		}
		if o.GetAudience() != "" {
			text += ", audience " + o.GetAudience()
		}
		kv = append(kv, "OAUTH2", text)
	}
	return kv
}

// certificateText is a certificate's summary on one line.
func certificateText(c *rivorav1.Certificate) string {
	return fmt.Sprintf("subject %q, issuer %q, not after %s, %s", c.GetSubject(), c.GetIssuer(), c.GetNotAfter().AsTime().UTC().Format(time.RFC3339), c.GetFingerprint())
}

// readSecretLine reads a secret given on stdin: its first line, without
// the line's end or surrounding spaces.
func readSecretLine(in io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(in, 64<<10)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read stdin: %w", err)
	}
	if line = strings.TrimSpace(line); line == "" {
		return "", errors.New("stdin is empty; pipe the secret in (e.g. < secret.txt)")
	}
	return line, nil
}
