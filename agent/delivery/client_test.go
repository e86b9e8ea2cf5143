package delivery_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/delivery"
)

func send(s *delivery.Sender, t *testing.T, url string) delivery.Result {
	t.Helper()
	return s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, url), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
}

// A pooled connection the partner closed while it sat idle costs the
// attempt nothing: the request goes out again on a fresh connection, and
// the partner sees it once.
func TestSendRetriesAConnectionClosedWhileIdle(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	defer srv.Close()
	s := delivery.NewSender("ua", loopbackOnly)
	if res := send(s, t, srv.URL); !res.OK() {
		t.Fatalf("first send: %+v", res)
	}
	// The keep-alive connection is idle in the sender's pool now.
	srv.CloseClientConnections()
	for i := range 3 {
		if res := send(s, t, srv.URL); !res.OK() {
			t.Fatalf("send %d after the partner closed the idle connection: %+v, want delivered", i, res)
		}
		srv.CloseClientConnections()
	}
	if n := requests.Load(); n != 4 {
		t.Fatalf("partner got %d requests, want 4 (one per attempt)", n)
	}
}

// After a burst, the pool holds many connections; a partner that closes
// them all while they sit idle (Node's 5 s keep-alive, gunicorn's 2 s)
// costs the next attempt nothing either: every closed one is passed over,
// however many there are, before a fresh connection is dialled.
func TestSendPassesOverEveryConnectionClosedWhileIdle(t *testing.T) {
	const burst = 40
	var requests atomic.Int32
	arrived, release := make(chan struct{}, burst), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) <= burst {
			arrived <- struct{}{}
			<-release // hold the burst's requests so each has its own connection
		}
	}))
	defer srv.Close()
	s := delivery.NewSender("ua", loopbackOnly)
	results := make(chan delivery.Result, burst)
	for range burst {
		go func() { results <- send(s, t, srv.URL) }()
	}
	for range burst {
		<-arrived
	}
	close(release)
	for range burst {
		if res := <-results; !res.OK() {
			t.Fatalf("burst send: %+v", res)
		}
	}
	srv.CloseClientConnections()
	if res := send(s, t, srv.URL); !res.OK() {
		t.Fatalf("send after the partner closed %d idle connections: %+v, want delivered", burst, res)
	}
	if n := requests.Load(); n != burst+1 {
		t.Fatalf("partner got %d requests, want %d (one per attempt)", n, burst+1)
	}
}

// A partner that reads a request and hangs up without an answer fails the
// attempt with a connection error, and is not sent it again by the
// client (the scheduler decides about a retry).
func TestSendHangUpIsAFailedAttempt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var requests atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if _, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
					requests.Add(1)
				}
			}()
		}
	}()
	res := send(delivery.NewSender("ua", loopbackOnly), t, "http://"+ln.Addr().String()+"/hook")
	if res.OK() || res.Status != 0 || !res.DestinationFault() || !strings.HasPrefix(res.Err.Error(), "connection error: ") {
		t.Fatalf("send to a partner that hangs up: %+v, want a connection error", res)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("partner got %d requests, want 1", n)
	}
}

// An https destination is reached over TLS (HTTP/1.1), its certificate
// checked against the roots the sender trusts; a connection the partner
// closed while idle is replaced, as over plain HTTP.
func TestSendOverTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || r.Header.Get("Webhook-Signature") == "" || r.Header.Get("Webhook-Id") != "evt_01J7" {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	s := delivery.NewSender("ua", loopbackOnly, delivery.WithTLSConfig(&tls.Config{RootCAs: roots}))
	for i := range 3 {
		if res := send(s, t, srv.URL+"/hook"); !res.OK() {
			t.Fatalf("send %d over TLS: %+v", i, res)
		}
		// The next goes out on a connection the partner closed (its
		// close_notify, then FIN) while it sat idle.
		srv.CloseClientConnections()
	}
	if res := send(delivery.NewSender("ua", loopbackOnly), t, srv.URL+"/hook"); res.OK() || !strings.Contains(res.Err.Error(), "certificate") {
		t.Fatalf("send to an untrusted certificate: %+v, want a certificate error", res)
	}
}

// A 2xx is a delivery whatever its body: one past what is read is not
// drained, and the attempt still succeeds.
func TestSendLargeAnswerBody(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(big)) }))
	defer srv.Close()
	s := delivery.NewSender("ua", loopbackOnly)
	for i := range 2 {
		if res := send(s, t, srv.URL); !res.OK() || res.Status != http.StatusOK {
			t.Fatalf("send %d with a 1 MiB answer: %+v, want delivered", i, res)
		}
	}
}

// A pooled connection keeps the read deadline of the last request it
// carried. Connections that sat idle for longer than the timeout of that
// request (a destination without traffic for a while: its partition
// moved, or was reopened) still carry the next attempt: the check for a
// partner's close while idle is not a read, and no deadline of an old
// request applies to it. Before, each such connection failed at once
// with an i/o timeout, and three in a row failed the attempt as "timeout
// after ..." charged to a partner that answers in milliseconds.
func TestSendReusesConnectionsIdleLongerThanTheTimeout(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		name := "http"
		if overTLS {
			name = "https"
		}
		t.Run(name, func(t *testing.T) { sendOnConnectionsIdleLongerThanTheTimeout(t, overTLS) })
	}
}

func sendOnConnectionsIdleLongerThanTheTimeout(t *testing.T, overTLS bool) {
	const pooled = 4
	var requests, arrivals atomic.Int32
	arrived := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		// The first requests wait for each other, so that each has its
		// own connection and the pool holds several.
		if arrivals.Add(1) == pooled {
			close(arrived)
		}
		<-arrived
	})
	srv := httptest.NewUnstartedServer(handler)
	var opts []delivery.Option
	if overTLS {
		srv.StartTLS()
		roots := x509.NewCertPool()
		roots.AddCert(srv.Certificate())
		opts = append(opts, delivery.WithTLSConfig(&tls.Config{RootCAs: roots}))
	} else {
		srv.Start()
	}
	defer srv.Close()
	s := delivery.NewSender("ua", loopbackOnly, opts...)
	const firstTimeout = time.Second
	start := time.Now()
	results := make(chan delivery.Result, pooled)
	for range pooled {
		go func() {
			results <- s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: event(), Attempt: 1, Timeout: firstTimeout})
		}()
	}
	for range pooled {
		if res := <-results; !res.OK() {
			t.Fatalf("concurrent send: %+v", res)
		}
	}
	// The connections idle past the read deadline of the requests they
	// carried (the condition under test, not a synchronisation).
	time.Sleep(time.Until(start.Add(firstTimeout + 100*time.Millisecond)))
	for i := range pooled {
		if res := send(s, t, srv.URL); !res.OK() {
			t.Fatalf("send %d on connections idle longer than the last request's timeout: %+v, want delivered", i, res)
		}
	}
	if n := requests.Load(); n != 2*pooled {
		t.Fatalf("partner got %d requests, want %d", n, 2*pooled)
	}
}
