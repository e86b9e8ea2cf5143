package delivery

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/rivora/rivora/agent/destinations"
)

// Destinations with their own TLS settings (an mTLS client certificate,
// a pinned CA) get their own https client, one per settings key: a
// connection made with one certificate is never reused with another, and
// a rotation's new certificate is used from the next attempt on. A
// destination keeps at most two (its current certificate and its
// fallback); a replaced client's idle connections close after
// idleTimeout.

// tlsClients holds the clients of destinations with their own TLS.
type tlsClients struct {
	dialer *egressDialer
	base   *tls.Config

	mu sync.Mutex
	// byDest holds, per destination id, the clients of its current
	// settings and of its fallback, each with its key.
	byDest map[string]*[2]keyedClient
}

type keyedClient struct {
	key    string
	client *fasthttp.Client
}

func newTLSClients(dialer *egressDialer, base *tls.Config) *tlsClients {
	return &tlsClients{dialer: dialer, base: base, byDest: map[string]*[2]keyedClient{}}
}

// client returns the https client of c, slot 0 for a destination's
// current settings, 1 for its fallback.
func (t *tlsClients) client(c *destinations.ClientTLS, slot int) keyedClient {
	t.mu.Lock()
	defer t.mu.Unlock()
	pair := t.byDest[c.DestinationID]
	if pair == nil {
		pair = &[2]keyedClient{}
		t.byDest[c.DestinationID] = pair
	}
	if pair[slot].client == nil || pair[slot].key != c.Key {
		pair[slot] = keyedClient{key: c.Key, client: newClient(t.dialer, c.Config(t.base), true)}
	}
	return pair[slot]
}

// tlsRefusals are the TLS alerts partners sent on connections that had
// completed their handshake. fasthttp reports a connection the partner
// closed before answering as such, whatever the reason; with TLS 1.3 a
// refused client certificate is exactly that (the alert comes on the
// first read), so the attempt's error is the alert its own connection
// read. An alert during the handshake is the dial's error already.
type tlsRefusals = connNotes[error]

// forget drops a destination's clients (their idle connections close
// after idleTimeout).
func (t *tlsClients) forget(destination string) {
	t.mu.Lock()
	delete(t.byDest, destination)
	t.mu.Unlock()
}

// refusedHandshake reports a TLS alert from the partner: it refused the
// handshake (with TLS 1.3 the alert for a refused client certificate
// arrives on the first read, after the client's side of the handshake
// completed).
func refusedHandshake(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return true
	}
	return err != nil && strings.Contains(err.Error(), "remote error: tls:")
}
