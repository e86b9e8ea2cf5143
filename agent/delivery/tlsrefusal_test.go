package delivery_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/delivery"
)

// refusingTLSServer answers every ClientHello with a handshake_failure
// alert, as a partner that takes no client of ours does.
func refusingTLSServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				// The ClientHello's record: its header, then its body.
				var header [5]byte
				if _, err := io.ReadFull(conn, header[:]); err != nil {
					return
				}
				if _, err := io.CopyN(io.Discard, conn, int64(header[3])<<8|int64(header[4])); err != nil {
					return
				}
				// alert record, TLS 1.2, length 2: fatal (2) handshake_failure (40).
				conn.Write([]byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28})
			}()
		}
	}()
	return ln.Addr().String()
}

// hangingTLSServer accepts connections and never says a word: a TLS
// handshake with it never completes. accepted gets one value per
// connection.
func hangingTLSServer(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 16)
	t.Cleanup(func() {
		ln.Close()
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	got := make(chan struct{}, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- conn
			got <- struct{}{}
		}
	}()
	return ln.Addr().String(), got
}

// One partner's TLS alert is its own attempt's error, never another's:
// while a partner refuses every handshake, another customer's destination
// whose partner never completes one times out, and a third's 2xx with a
// body past what is read stays a 2xx. The alert was kept for every
// destination without TLS settings of its own, and an attempt that failed
// took whatever alert had come since it began as its error.
func TestTLSRefusalIsOnlyItsOwnAttempts(t *testing.T) {
	refusing := refusingTLSServer(t)
	hanging, accepted := hangingTLSServer(t)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	answering := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(strings.Repeat("x", 128<<10))) // past the 64 KiB read of an answer
	}))
	defer answering.Close()
	defer close(release) // before the server's Close waits for its handler
	roots := x509.NewCertPool()
	roots.AddCert(answering.Certificate())
	s := delivery.NewSender("ua", loopbackOnly, delivery.WithTLSConfig(&tls.Config{RootCAs: roots}))
	sendTo := func(url string, timeout time.Duration) delivery.Result {
		return s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, url), Event: event(), Attempt: 1, Timeout: timeout})
	}

	hung := make(chan delivery.Result, 1)
	go func() { hung <- sendTo("https://"+hanging, time.Second) }()
	<-accepted
	answered := make(chan delivery.Result, 1)
	go func() { answered <- sendTo(answering.URL, 5*time.Second) }()
	<-arrived
	// Both attempts are out: now the refusal.
	res := sendTo("https://"+refusing, 5*time.Second)
	if res.OK() || !strings.Contains(res.Err.Error(), "TLS handshake refused by the partner") {
		t.Fatalf("the refusing partner: %+v, want its TLS handshake refused", res)
	}
	release <- struct{}{}

	if res := <-answered; !res.OK() || res.Status != http.StatusOK {
		t.Errorf("a partner answering 200 with a long body while another refused a handshake: %+v, want delivered", res)
	}
	res = <-hung
	if res.OK() || !strings.Contains(res.Err.Error(), "timeout") || strings.Contains(res.Err.Error(), "refused") {
		t.Errorf("a partner that never completes the handshake, while another refused one: %+v, want a timeout", res)
	}
}
