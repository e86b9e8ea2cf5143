package delivery_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/internal/ssrf"
)

// dnsServer is a real DNS server on 127.0.0.1 (UDP) answering A and AAAA
// queries from a fixed zone, NXDOMAIN for other names; resolver returns a
// Go resolver that asks only it.
type dnsServer struct {
	conn net.PacketConn
	zone map[string][]netip.Addr // FQDN (with the final dot) → addresses
}

func startDNS(t *testing.T, zone map[string][]netip.Addr) *dnsServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{conn: conn, zone: zone}
	done := make(chan struct{})
	go func() { defer close(done); s.serve() }()
	t.Cleanup(func() { conn.Close(); <-done })
	return s
}

func (s *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if out, err := s.answer(buf[:n]); err == nil {
			s.conn.WriteTo(out, from)
		}
	}
}

func (s *dnsServer) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	addrs, known := s.zone[strings.ToLower(q.Name.String())]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
		switch {
		case a.Is4() && q.Type == dnsmessage.TypeA:
			err = b.AResource(rr, dnsmessage.AResource{A: a.As4()})
		case a.Is6() && q.Type == dnsmessage.TypeAAAA:
			err = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

func (s *dnsServer) resolver() *net.Resolver {
	addr := s.conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

// TestSendRefusesNamesResolvingToDeniedAddresses: the guard acts on what
// a name resolves to, when the agent dials, whatever the URL says: a name
// resolving to a private or loopback address is refused without a packet
// sent to it (the Control hook runs before connect), with the guard's
// reason as the attempt's error, and charged to the event, not the
// destination; an allowed range opens it.
func TestSendRefusesNamesResolvingToDeniedAddresses(t *testing.T) {
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	port := strings.TrimPrefix(srv.URL, "http://127.0.0.1:")
	dns := startDNS(t, map[string][]netip.Addr{
		"internal.rivora.test.": {netip.MustParseAddr("10.0.0.5")},
		"loop.rivora.test.":     {netip.MustParseAddr("127.0.0.1")},
		"meta.rivora.test.":     {netip.MustParseAddr("fd00:ec2::254")},
		// One denied address and one allowed: Happy Eyeballs tries both,
		// and only the allowed one may connect.
		"mixed.rivora.test.": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("fd00:ec2::254")},
	})
	send := func(s *delivery.Sender, host string) delivery.Result {
		t.Helper()
		u := "http://" + host + ":" + port + "/hook"
		return s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, u), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	}
	refused := func(res delivery.Result, want string) {
		t.Helper()
		if res.OK() || !res.NotSent || res.Status != 0 {
			t.Fatalf("result %+v, want a refusal by the guard", res)
		}
		if res.Err.Error() != want {
			t.Fatalf("error %q, want %q", res.Err, want)
		}
		if res.DestinationFault() {
			t.Fatal("a guard refusal counted as the destination's fault; it is the event's")
		}
	}

	deny := delivery.NewSender("ua", nil, delivery.WithResolver(dns.resolver()))
	refused(send(deny, "loop.rivora.test"), "refused by SSRF guard: 127.0.0.1 is in 127.0.0.0/8 (loopback); an operator may allow it with --allow-destination-cidr")
	refused(send(deny, "internal.rivora.test"), "refused by SSRF guard: 10.0.0.5 is in 10.0.0.0/8 (private, RFC 1918); an operator may allow it with --allow-destination-cidr")
	refused(send(deny, "meta.rivora.test"), "refused by SSRF guard: fd00:ec2::254 is in fc00::/7 (unique local (RFC 4193), where AWS's IPv6 metadata service answers on fd00:ec2::254); an operator may allow it with --allow-destination-cidr")
	refused(send(deny, "127.0.0.1"), "refused by SSRF guard: 127.0.0.1 is in 127.0.0.0/8 (loopback); an operator may allow it with --allow-destination-cidr")
	select {
	case r := <-got:
		t.Fatalf("the partner got a request through the guard: %v", r.header)
	default:
	}

	loopback := delivery.NewSender("ua", ssrf.New(ssrf.Loopback), delivery.WithResolver(dns.resolver()))
	for _, host := range []string{"loop.rivora.test", "mixed.rivora.test"} {
		if res := send(loopback, host); !res.OK() {
			t.Fatalf("%s with loopback allowed: %+v, want delivered", host, res)
		}
		<-got
	}
	refused(send(loopback, "internal.rivora.test"), "refused by SSRF guard: 10.0.0.5 is in 10.0.0.0/8 (private, RFC 1918); an operator may allow it with --allow-destination-cidr")
}

// TestSendRefusesDeniedLiterals: a URL naming a denied address outright
// (as a destination created before the guard, or given by the operator
// webhook) is refused at dial time too.
func TestSendRefusesDeniedLiterals(t *testing.T) {
	s := delivery.NewSender("ua", nil)
	for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/", "http://[fe80::1%25lo]:80/", "http://0.0.0.0:9/"} {
		res := s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, u), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
		if !res.NotSent || !strings.HasPrefix(res.Err.Error(), "refused by SSRF guard: ") {
			t.Errorf("%s: %+v, want refused by the guard", u, res)
		}
	}
}

// TestSendUnresolvableName: a name that does not resolve is a connection
// error, the destination's fault (the guard judges addresses, and there is
// none).
func TestSendUnresolvableName(t *testing.T) {
	dns := startDNS(t, map[string][]netip.Addr{})
	s := delivery.NewSender("ua", nil, delivery.WithResolver(dns.resolver()))
	res := s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, "http://nowhere.rivora.test/"), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	var dnsErr *net.DNSError
	if res.NotSent || !res.DestinationFault() || !errors.As(res.Err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("%+v, want a not-found DNS error counted against the destination", res)
	}
}

// TestSendDialsUnicodeHostsInASCII: a URL with a Unicode or fullwidth
// host (as stored before the control plane mapped hosts) is sent to, and
// named in its Host header, by the IDNA form net/http would dial:
// bücher.rivora.test is looked up as xn--bcher-kva.rivora.test, and
// １２７.０.０.１ is 127.0.0.1. fasthttp alone sends the name as written,
// which no resolver knows. A host IDNA cannot map is not sent.
func TestSendDialsUnicodeHostsInASCII(t *testing.T) {
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	port := strings.TrimPrefix(srv.URL, "http://127.0.0.1:")
	dns := startDNS(t, map[string][]netip.Addr{"xn--bcher-kva.rivora.test.": {netip.MustParseAddr("127.0.0.1")}})
	s := delivery.NewSender("ua", ssrf.New(ssrf.Loopback), delivery.WithResolver(dns.resolver()))
	for host, want := range map[string]string{
		"bücher.rivora.test":       "xn--bcher-kva.rivora.test",
		"ＢＵ\u0308CHER.rivora.test": "xn--bcher-kva.rivora.test",
		"１２７.０.０.１":                "127.0.0.1",
	} {
		u := "http://" + host + ":" + port + "/in/ü?k=1"
		res := s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, u), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
		if !res.OK() {
			t.Fatalf("%s: %+v, want delivered to %s", u, res, want)
		}
		if r := <-got; r.host != want+":"+port {
			t.Errorf("%s: the partner got Host %q, want %q", u, r.host, want+":"+port)
		}
	}
	res := s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, "http://xn--ü.rivora.test:"+port+"/"), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	if res.OK() || !res.NotSent || !strings.Contains(res.Err.Error(), "IDNA") {
		t.Fatalf("a host IDNA cannot map: %+v, want not sent, the IDNA refusal its error", res)
	}
}
