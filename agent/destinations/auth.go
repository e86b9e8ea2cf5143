package destinations

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// ClientTLS is how the agent's TLS connections to a destination differ
// from the defaults: the client certificate it presents (mTLS), the
// previous one kept as the handshake fallback while a rotation's overlap
// lasts, and the partner's pinned CA.
type ClientTLS struct {
	// Key names this configuration: the delivery client keeps one
	// connection pool per key, so connections made with a replaced
	// certificate are never reused.
	Key string
	// DestinationID is the destination's id.
	DestinationID string
	// Certificate is presented when the partner asks (nil: none).
	Certificate *tls.Certificate
	// Roots pins the partner's CA (nil: the system's roots); RootPEM is
	// that CA's PEM.
	Roots   *x509.CertPool
	RootPEM []byte
	// Previous is the fallback: used for the same attempt when the partner
	// refuses Certificate in the handshake, until PreviousUntil.
	Previous      *ClientTLS
	PreviousUntil time.Time
}

// Config is the TLS configuration of c over base (nil: the defaults).
func (c *ClientTLS) Config(base *tls.Config) *tls.Config {
	cfg := base.Clone()
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if c.Certificate != nil {
		cfg.Certificates = []tls.Certificate{*c.Certificate}
	}
	if c.Roots != nil {
		cfg.RootCAs = c.Roots
	}
	return cfg
}

// TokenConfig is the TLS configuration of requests to the destination's
// OAuth2 token endpoint over base: the client certificate presented when
// the endpoint asks (RFC 8705 client authentication), and the pinned CA
// trusted beside the system's roots, not instead of them (the token
// endpoint is often an identity provider with a public certificate, the
// partner's own address one its private CA signed).
func (c *ClientTLS) TokenConfig(base *tls.Config) (*tls.Config, error) {
	cfg := base.Clone()
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if c.Certificate != nil {
		cfg.Certificates = []tls.Certificate{*c.Certificate}
	}
	if len(c.RootPEM) > 0 {
		pool := cfg.RootCAs
		if pool == nil {
			system, err := x509.SystemCertPool()
			if err != nil {
				return nil, fmt.Errorf("system roots: %w", err)
			}
			pool = system
		} else {
			pool = pool.Clone()
		}
		if !pool.AppendCertsFromPEM(c.RootPEM) {
			return nil, errors.New("server CA: no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// FallbackAt is the previous certificate's configuration while the
// overlap lasts at now (nil after it, or without a previous one).
func (c *ClientTLS) FallbackAt(now time.Time) *ClientTLS {
	if c == nil || c.Previous == nil || !now.Before(c.PreviousUntil) {
		return nil
	}
	return c.Previous
}

// OAuth2 are a destination's client credentials: the agent sends
// `Authorization: Bearer` with a token it fetched from TokenURL.
type OAuth2 struct {
	// Key names these settings (destination and every field, the secret
	// by its fingerprint): cached tokens are kept per key, so changed
	// credentials fetch a new token at once.
	Key string
	// DestinationID labels the token fetches' metric.
	DestinationID string
	TokenURL      string
	// Shared is set on a destination no customer owns: its token URL is
	// the operators', and errors that customers read (an attempt's last
	// error) name only its origin.
	Shared       bool
	ClientID     string
	ClientSecret string
	Scopes       []string
	Audience     string
}

// clientTLSFromProto is a destination's TLS settings (nil when it has
// none).
func clientTLSFromProto(pb *rivorav1.Destination) (*ClientTLS, error) {
	cert, ca := pb.GetClientCertificate(), pb.GetServerCa()
	if cert == nil && ca == nil {
		return nil, nil
	}
	var roots *x509.CertPool
	if ca != nil {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM([]byte(ca.GetCertificatePem())) {
			return nil, errors.New("server CA: no PEM certificate")
		}
	}
	current, err := certificateTLS(pb.GetId(), cert, ca, roots)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	if ca != nil {
		current.RootPEM = []byte(ca.GetCertificatePem())
	}
	if prev := pb.GetPreviousClientCertificate(); prev != nil && cert != nil && prev.GetOverlapUntil() != nil {
		if current.Previous, err = certificateTLS(pb.GetId(), prev, ca, roots); err != nil {
			return nil, fmt.Errorf("previous client certificate: %w", err)
		}
		current.PreviousUntil = prev.GetOverlapUntil().AsTime()
	}
	return current, nil
}

// certificateTLS is one client certificate (nil: none) with the pinned
// roots.
func certificateTLS(id string, cert, ca *rivorav1.Certificate, roots *x509.CertPool) (*ClientTLS, error) {
	c := &ClientTLS{DestinationID: id, Roots: roots, Key: strings.Join([]string{id, cert.GetFingerprint(), auth.Fingerprint(cert.GetKeyPem()), ca.GetFingerprint()}, "|")}
	if cert == nil {
		return c, nil
	}
	pair, err := tls.X509KeyPair([]byte(cert.GetCertificatePem()), []byte(cert.GetKeyPem()))
	if err != nil {
		return nil, err
	}
	c.Certificate = &pair
	return c, nil
}

// oauth2FromProto is a destination's OAuth2 settings (nil when none).
func oauth2FromProto(pb *rivorav1.Destination) *OAuth2 {
	o := pb.GetOauth2()
	if o == nil {
		return nil
	}
	shared := pb.GetOwnerCustomer() == ""
	key := strings.Join(append([]string{pb.GetId(), o.GetTokenUrl(), strconv.FormatBool(shared), o.GetClientId(), auth.Fingerprint(o.GetClientSecret()), o.GetAudience()}, o.GetScopes()...), "|")
	return &OAuth2{
		Key: key, DestinationID: pb.GetId(), TokenURL: o.GetTokenUrl(), Shared: shared, ClientID: o.GetClientId(), ClientSecret: o.GetClientSecret(),
		Scopes: o.GetScopes(), Audience: o.GetAudience(),
	}
}
