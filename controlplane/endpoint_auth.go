package controlplane

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/url"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/controlplane/notices"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/bounds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// How a destination's partner authenticates Rivora beyond the signature:
// an mTLS client certificate (with a pinned server CA, optionally) and
// OAuth2 client credentials. The private key and the client secret are
// kept like signing secrets: stored, carried on the agents' feed, and
// replaced by fingerprints in every answer, audit entry and log line.

const (
	// maxPEM bounds a certificate chain or CA bundle as given, maxKeyPEM
	// a private key (as the API's string bounds do, before any handler).
	maxPEM    = bounds.PEM
	maxKeyPEM = bounds.KeyPEM
	// DefaultCertificateOverlap is how long a replaced client certificate
	// stays the handshake fallback when the request does not say.
	DefaultCertificateOverlap = DefaultRotationGrace
	// maxOAuth2Field bounds the OAuth2 strings (client id, secret,
	// audience, each scope).
	maxOAuth2Field = 4 << 10
	// maxOAuth2Scopes bounds the scopes.
	maxOAuth2Scopes = 32
)

// clientCertificate checks a client certificate and its key as given
// and returns them with their summary (subject, issuer, validity,
// fingerprints) filled in.
func clientCertificate(c *rivorav1.Certificate, now time.Time) (*rivorav1.Certificate, error) {
	certPEM, keyPEM := c.GetCertificatePem(), c.GetKeyPem()
	if certPEM == "" || keyPEM == "" {
		return nil, errorf(ErrInvalid, "client certificate: give both the certificate and its private key (PEM)")
	}
	if len(certPEM) > maxPEM || len(keyPEM) > maxKeyPEM {
		return nil, errorf(ErrInvalid, "client certificate: the certificate chain is at most %d KiB, the key %d KiB", maxPEM>>10, maxKeyPEM>>10)
	}
	pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		return nil, errorf(ErrInvalid, "client certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, errorf(ErrInvalid, "client certificate: %w", err)
	}
	if !now.Before(leaf.NotAfter) {
		return nil, errorf(ErrInvalid, "client certificate %s expired at %s: give a valid one", leaf.Subject, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	// It is presented from the next attempt on: one not valid yet would
	// fail every handshake until then (a clock skew of a minute is let
	// through).
	if now.Add(time.Minute).Before(leaf.NotBefore) {
		return nil, errorf(ErrInvalid, "client certificate %s is not valid before %s: it would be presented at once and refused until then; give it at that time, or one valid now", leaf.Subject, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	out := summarize509(leaf)
	out.CertificatePem, out.KeyPem = certPEM, keyPEM
	return out, nil
}

// serverCA checks a pinned CA bundle (one or more PEM certificates) and
// returns it with the first certificate's summary.
func serverCA(c *rivorav1.Certificate) (*rivorav1.Certificate, error) {
	raw := c.GetCertificatePem()
	if c.GetKeyPem() != "" {
		return nil, errorf(ErrInvalid, "server CA: give only the CA's certificate, never a private key")
	}
	if len(raw) > maxPEM {
		return nil, errorf(ErrInvalid, "server CA: at most %d KiB", maxPEM>>10)
	}
	var first *x509.Certificate
	rest := []byte(raw)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, errorf(ErrInvalid, "server CA: a %s block where a CERTIFICATE was expected", block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, errorf(ErrInvalid, "server CA: %w", err)
		}
		if first == nil {
			first = cert
		}
	}
	if first == nil {
		return nil, errorf(ErrInvalid, "server CA: no PEM certificate found")
	}
	out := summarize509(first)
	out.CertificatePem = raw
	return out, nil
}

// summarize509 is what answers show of a certificate.
func summarize509(cert *x509.Certificate) *rivorav1.Certificate {
	sum := sha256.Sum256(cert.Raw)
	return &rivorav1.Certificate{
		Subject: cert.Subject.String(), Issuer: cert.Issuer.String(),
		NotBefore: timestamppb.New(cert.NotBefore), NotAfter: timestamppb.New(cert.NotAfter),
		Fingerprint: "sha256:" + hex.EncodeToString(sum[:]),
	}
}

// describeCertificate is a certificate in an audit detail: never its key.
func describeCertificate(c *rivorav1.Certificate) string {
	return fmt.Sprintf("%s (subject %q, not after %s)", c.GetFingerprint(), c.GetSubject(), c.GetNotAfter().AsTime().UTC().Format(time.RFC3339))
}

// certificateOverlap is a request's overlap for a replaced client
// certificate: DefaultCertificateOverlap when unset, 0 to
// MaxRotationGrace otherwise.
func certificateOverlap(g *durationpb.Duration) (time.Duration, error) {
	if g == nil {
		return DefaultCertificateOverlap, nil
	}
	if err := g.CheckValid(); err != nil {
		return 0, errorf(ErrInvalid, "client certificate overlap: %w", err)
	}
	overlap := g.AsDuration()
	if overlap < 0 || overlap > MaxRotationGrace {
		return 0, errorf(ErrInvalid, "client certificate overlap %s: want 0 (the replaced certificate is dropped at once) up to %s (7 days)", overlap, MaxRotationGrace)
	}
	return overlap, nil
}

// applyEndpointAuthCreate sets a new destination's client certificate,
// server CA and OAuth2 credentials from its create request, and describes
// them for the audit detail.
func (cp *ControlPlane) applyEndpointAuthCreate(d *rivorav1.Destination, m *rivorav1.CreateDestinationRequest) (string, error) {
	var detail []string
	if c := m.GetClientCertificate(); c != nil {
		cert, err := clientCertificate(c, cp.now())
		if err != nil {
			return "", err
		}
		d.ClientCertificate = cert
		detail = append(detail, "client certificate "+describeCertificate(cert))
	}
	if c := m.GetServerCa(); c != nil {
		ca, err := serverCA(c)
		if err != nil {
			return "", err
		}
		d.ServerCa = ca
		detail = append(detail, "server CA "+describeCertificate(ca))
	}
	if o := m.GetOauth2(); o != nil {
		merged, err := cp.oauth2Credentials(nil, o)
		if err != nil {
			return "", err
		}
		d.Oauth2 = merged
		detail = append(detail, describeOAuth2(merged))
	}
	if err := tlsNeedsHTTPS(d); err != nil {
		return "", err
	}
	if len(detail) == 0 {
		return "", nil
	}
	return ", " + strings.Join(detail, ", "), nil
}

// tlsNeedsHTTPS refuses a client certificate or a pinned server CA on a
// destination whose URL is plain http: neither would ever be used, and
// the settings would read as a protection the deliveries do not have.
func tlsNeedsHTTPS(d *rivorav1.Destination) error {
	if d.GetClientCertificate() == nil && d.GetServerCa() == nil {
		return nil
	}
	if u, err := url.Parse(d.GetUrl()); err == nil && u.Scheme == "https" {
		return nil
	}
	return errorf(ErrInvalid, "a client certificate or a pinned server CA applies to https URLs only, and destination %q's URL %q is not https: use the partner's https address, or drop them (--remove-client-cert, --remove-server-ca)", d.GetId(), d.GetUrl())
}

// updateEndpointAuth applies an update's client certificate, server CA
// and OAuth2 changes to d and describes them.
func (cp *ControlPlane) updateEndpointAuth(d *rivorav1.Destination, m *rivorav1.UpdateDestinationRequest) ([]string, error) {
	var changes []string
	certChange, err := cp.updateClientCertificate(d, m)
	if err != nil {
		return nil, err
	}
	changes = append(changes, certChange...)
	switch {
	case m.GetServerCa() != nil && m.GetRemoveServerCa():
		return nil, errorf(ErrInvalid, "set the server CA or remove it, not both")
	case m.GetServerCa() != nil:
		ca, err := serverCA(m.GetServerCa())
		if err != nil {
			return nil, err
		}
		d.ServerCa = ca
		changes = append(changes, "server CA "+describeCertificate(ca))
	case m.GetRemoveServerCa():
		if d.GetServerCa() == nil {
			return nil, errorf(ErrInvalid, "destination %q pins no server CA", d.GetId())
		}
		d.ServerCa = nil
		changes = append(changes, "server CA unpinned")
	}
	switch {
	case m.GetOauth2() != nil && m.GetRemoveOauth2():
		return nil, errorf(ErrInvalid, "set OAuth2 credentials or remove them, not both")
	case m.GetOauth2() != nil:
		merged, err := cp.oauth2Credentials(d.GetOauth2(), m.GetOauth2())
		if err != nil {
			return nil, err
		}
		d.Oauth2 = merged
		changes = append(changes, describeOAuth2(merged))
	case m.GetRemoveOauth2():
		if d.GetOauth2() == nil {
			return nil, errorf(ErrInvalid, "destination %q has no OAuth2 credentials", d.GetId())
		}
		d.Oauth2 = nil
		changes = append(changes, "OAuth2 removed")
	}
	// Checked when the URL or the TLS settings change: a destination made
	// before the check keeps working for unrelated changes.
	if m.Url != nil || m.GetClientCertificate() != nil || m.GetServerCa() != nil {
		if err := tlsNeedsHTTPS(d); err != nil {
			return nil, err
		}
	}
	return changes, nil
}

// updateClientCertificate replaces (keeping the old one as the handshake
// fallback for the overlap) or removes d's client certificate.
func (cp *ControlPlane) updateClientCertificate(d *rivorav1.Destination, m *rivorav1.UpdateDestinationRequest) ([]string, error) {
	now := cp.now()
	switch {
	case m.GetClientCertificate() != nil && m.GetRemoveClientCertificate():
		return nil, errorf(ErrInvalid, "set a client certificate or remove it, not both")
	case m.GetRemoveClientCertificate():
		if d.GetClientCertificate() == nil {
			return nil, errorf(ErrInvalid, "destination %q has no client certificate", d.GetId())
		}
		d.ClientCertificate, d.PreviousClientCertificate = nil, nil
		return []string{"client certificate removed"}, nil
	case m.GetClientCertificate() == nil:
		if m.GetClientCertificateOverlap() == nil {
			return nil, nil
		}
		return cp.changeCertificateOverlap(d, m.GetClientCertificateOverlap())
	}
	overlap, err := certificateOverlap(m.GetClientCertificateOverlap())
	if err != nil {
		return nil, err
	}
	cert, err := clientCertificate(m.GetClientCertificate(), now)
	if err != nil {
		return nil, err
	}
	old := d.GetClientCertificate()
	if old.GetFingerprint() == cert.GetFingerprint() && old.GetKeyPem() == cert.GetKeyPem() {
		return nil, errorf(ErrInvalid, "client certificate: that is destination %q's current certificate and key", d.GetId())
	}
	d.ClientCertificate, d.PreviousClientCertificate = cert, nil
	change := "client certificate " + describeCertificate(cert)
	if old != nil && overlap > 0 {
		prev := proto.Clone(old).(*rivorav1.Certificate)
		prev.OverlapUntil = timestamppb.New(now.Add(overlap))
		d.PreviousClientCertificate = prev
		change += fmt.Sprintf("; previous %s stays the handshake fallback until %s", old.GetFingerprint(), now.Add(overlap).UTC().Format(time.RFC3339))
	} else if old != nil {
		change += fmt.Sprintf("; previous %s dropped (no overlap)", old.GetFingerprint())
	}
	return []string{change}, nil
}

// changeCertificateOverlap ends the overlap of d's replaced client
// certificate (0), or sets it to end overlap from now: an operator who
// learns that the partner refuses the new certificate keeps the old one
// longer, and one who wants the new one proven ends the fallback at once.
func (cp *ControlPlane) changeCertificateOverlap(d *rivorav1.Destination, g *durationpb.Duration) ([]string, error) {
	prev := d.GetPreviousClientCertificate()
	now := cp.now()
	if prev == nil || (prev.GetOverlapUntil() != nil && !now.Before(prev.GetOverlapUntil().AsTime())) {
		// An overlap that ended is not revived: the replaced certificate
		// may have been replaced because it leaked.
		return nil, errorf(ErrInvalid, "client certificate overlap: destination %q has no replaced certificate in its overlap; the overlap goes with a new --client-cert and --client-key", d.GetId())
	}
	overlap, err := certificateOverlap(g)
	if err != nil {
		return nil, err
	}
	if overlap == 0 {
		d.PreviousClientCertificate = nil
		return []string{fmt.Sprintf("previous client certificate %s dropped: its overlap ended early", prev.GetFingerprint())}, nil
	}
	until := now.Add(overlap)
	if na := prev.GetNotAfter(); na != nil && na.AsTime().Before(until) {
		until = na.AsTime() // no fallback past its own expiry
	}
	prev.OverlapUntil = timestamppb.New(until)
	return []string{fmt.Sprintf("previous client certificate %s stays the handshake fallback until %s", prev.GetFingerprint(), until.UTC().Format(time.RFC3339))}, nil
}

// oauth2Credentials merges set over stored (nil: none yet) and checks
// the result.
func (cp *ControlPlane) oauth2Credentials(stored, set *rivorav1.OAuth2ClientCredentials) (*rivorav1.OAuth2ClientCredentials, error) {
	out := &rivorav1.OAuth2ClientCredentials{}
	if stored != nil {
		out = proto.Clone(stored).(*rivorav1.OAuth2ClientCredentials)
	}
	if set.GetTokenUrl() != "" {
		out.TokenUrl = set.GetTokenUrl()
	}
	if set.GetClientId() != "" {
		out.ClientId = set.GetClientId()
	}
	if set.GetClientSecret() != "" {
		out.ClientSecret = set.GetClientSecret()
	}
	if len(set.GetScopes()) > 0 {
		out.Scopes = set.GetScopes()
	}
	if set.GetAudience() != "" {
		out.Audience = set.GetAudience()
	}
	out.ClientSecretFingerprint = ""
	if out.TokenUrl == "" || out.ClientId == "" || out.ClientSecret == "" {
		return nil, errorf(ErrInvalid, "oauth2: give the token URL, client id and client secret (--oauth2-token-url, --oauth2-client-id, --oauth2-client-secret)")
	}
	if u, err := url.Parse(out.TokenUrl); err == nil && u.User != nil {
		// The client credentials go in HTTP Basic, from the client id and
		// secret: not in the URL, where every answer would show them.
		return nil, errorf(ErrInvalid, "oauth2 token url carries credentials (user:password@): give the URL without them; the client id and secret (--oauth2-client-id, --oauth2-client-secret) are what the token request authenticates with")
	}
	if err := validateURL(out.TokenUrl); err != nil {
		return nil, fmt.Errorf("oauth2 token %w", err)
	}
	tokenURL, err := cp.guardURL(out.TokenUrl)
	if err != nil {
		return nil, fmt.Errorf("oauth2 token %w", err)
	}
	out.TokenUrl = tokenURL
	if len(out.Scopes) > maxOAuth2Scopes {
		return nil, errorf(ErrInvalid, "oauth2: at most %d scopes", maxOAuth2Scopes)
	}
	fields := append([]string{out.ClientId, out.ClientSecret, out.Audience}, out.Scopes...)
	for _, f := range fields {
		if len(f) > maxOAuth2Field || strings.ContainsAny(f, "\x00\r\n") {
			return nil, errorf(ErrInvalid, "oauth2: client id, secret, audience and scopes are at most %d KiB each, without CR, LF or NUL", maxOAuth2Field>>10)
		}
	}
	for _, s := range out.Scopes {
		if s == "" || strings.ContainsAny(s, " \t") {
			return nil, errorf(ErrInvalid, "oauth2: scope %q: one scope per flag, without spaces", s)
		}
	}
	return out, nil
}

// describeOAuth2 is OAuth2 credentials in an audit detail: the secret as
// its fingerprint.
func describeOAuth2(o *rivorav1.OAuth2ClientCredentials) string {
	s := fmt.Sprintf("OAuth2 token URL %s, client id %s, client secret %s", o.GetTokenUrl(), o.GetClientId(), auth.Fingerprint(o.GetClientSecret()))
	if len(o.GetScopes()) > 0 {
		s += ", scopes " + strings.Join(o.GetScopes(), " ")
	}
	if o.GetAudience() != "" {
		s += ", audience " + o.GetAudience()
	}
	return s
}

// withoutEndpointAuthSecrets replaces d's client keys and OAuth2 client
// secret by their fingerprints, for answers.
func withoutEndpointAuthSecrets(d *rivorav1.Destination) {
	for _, c := range []*rivorav1.Certificate{d.GetClientCertificate(), d.GetPreviousClientCertificate()} {
		if c != nil {
			c.KeyFingerprint = auth.Fingerprint(c.GetKeyPem())
			c.KeyPem = ""
		}
	}
	if o := d.GetOauth2(); o != nil {
		o.ClientSecretFingerprint = auth.Fingerprint(o.GetClientSecret())
		o.ClientSecret = ""
	}
}

// certExpiryWarning is Config.CertExpiryWarning or its default.
func (cp *ControlPlane) certExpiryWarning() time.Duration {
	if cp.cfg.CertExpiryWarning > 0 {
		return cp.cfg.CertExpiryWarning
	}
	return notices.DefaultCertExpiryWarning
}

// certificateExpiring reports a certificate that expires within warning
// of now (or has expired).
func certificateExpiring(c *rivorav1.Certificate, now time.Time, warning time.Duration) bool {
	return c.GetNotAfter() != nil && !now.Add(warning).Before(c.GetNotAfter().AsTime())
}

// certificateHealth adds d's client certificate expiry to its health, and
// the end of the fallback the partner's refusals of the new certificate
// (as the owner saw them) fall back on; a refusal without a fallback
// left is dropped: the attempts' own errors say it from then on.
func (cp *ControlPlane) certificateHealth(h *rivorav1.DestinationHealth, d *rivorav1.Destination) {
	refused := h.GetClientCertificateRefusedAt()
	h.ClientCertificateRefusedAt = nil
	c := d.GetClientCertificate()
	if c == nil {
		return
	}
	now := cp.now()
	h.ClientCertificateNotAfter = c.GetNotAfter()
	h.ClientCertificateExpiring = certificateExpiring(c, now, cp.certExpiryWarning())
	if until := d.GetPreviousClientCertificate().GetOverlapUntil(); refused != nil && until != nil && until.AsTime().After(now) {
		h.ClientCertificateRefusedAt, h.ClientCertificateFallbackUntil = refused, until
	}
}
