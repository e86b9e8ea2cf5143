package bounds_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/bounds"
)

// paceServer serves, over HTTP/1.1 and h2c, a handler that reads its body
// at pace p and answers 200 with the bytes read, or 408 with why the body
// was cut; after reading it waits linger before answering (a stream that
// outlives its request).
func paceServer(t *testing.T, p bounds.Pace, linger time.Duration) string {
	t.Helper()
	srv := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Apply(w, r)
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusRequestTimeout)
			return
		}
		time.Sleep(linger) // the answer's pace, not synchronisation
		fmt.Fprintf(w, "%d", len(body))
	})}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// send posts chunks, one every gap, and returns the status and answer.
func send(t *testing.T, client *http.Client, url string, chunks [][]byte, gap time.Duration, stallAfter bool) (int, string) {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		for _, c := range chunks {
			if _, err := pw.Write(c); err != nil {
				return
			}
			time.Sleep(gap) // the client's pace
		}
		if !stallAfter {
			pw.Close()
		}
	}()
	defer pw.Close()
	resp, err := client.Post(url, "application/octet-stream", pr)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A body that never starts, or trickles below the minimum rate, is cut
// long before the request's whole-time bound; a body that keeps pace
// arrives whole even when it takes many times the grace; and a request
// whose body has ended may take as long as it likes to answer.
func TestBodyPace(t *testing.T) {
	p := bounds.Pace{Grace: 300 * time.Millisecond, MinRate: 1000, Max: time.Hour}
	url := paceServer(t, p, 3*p.Grace)
	kib := bytes.Repeat([]byte("x"), 1000)
	for _, proto := range []string{"http/1.1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			tr := &http.Transport{Protocols: new(http.Protocols)}
			if proto == "h2c" {
				tr.Protocols.SetUnencryptedHTTP2(true)
			} else {
				tr.Protocols.SetHTTP1(true)
			}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 20 * time.Second}

			if code, body := send(t, client, url, nil, 0, true); code != http.StatusRequestTimeout {
				t.Errorf("a body that never starts: %d %q, want 408", code, body)
			}
			trickle := make([][]byte, 40)
			for i := range trickle {
				trickle[i] = []byte("x")
			}
			if code, body := send(t, client, url, trickle, 50*time.Millisecond, false); code != http.StatusRequestTimeout {
				t.Errorf("a body trickling 20 B/s: %d %q, want 408", code, body)
			}
			// 10 KB at ~5 KB/s: twice the grace and more, at five times the
			// minimum rate.
			steady := [][]byte{kib, kib, kib, kib, kib, kib, kib, kib, kib, kib}
			if code, body := send(t, client, url, steady, 200*time.Millisecond, false); code != http.StatusOK || body != "10000" {
				t.Errorf("a body keeping pace: %d %q, want 200 10000", code, body)
			}
		})
	}
}

// Behind Handler, a body cut for its pace is answered deadline_exceeded
// with why, in the caller's protocol.
func TestSlowBodyIsDeadlineExceeded(t *testing.T) {
	p := bounds.Pace{Grace: 200 * time.Millisecond, MinRate: 1000, Max: time.Hour}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Apply(w, r)
		_, err := io.ReadAll(r.Body)
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeDeadlineExceeded || !strings.Contains(ce.Message(), "arrived too slowly") {
			http.Error(w, fmt.Sprintf("read: %v", err), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusGatewayTimeout)
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	if code, body := send(t, srv.Client(), srv.URL, nil, 0, true); code != http.StatusGatewayTimeout {
		t.Fatalf("a stalled body: %d %q, want the read to fail deadline_exceeded", code, body)
	}
}
