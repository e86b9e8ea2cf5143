package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/poll"
)

// /healthz answers 503 with the reason while the component is unhealthy.
func TestHealthzReason(t *testing.T) {
	healthy := errors.New("1 partition(s) broken: partition 3 (locked): open failed")
	mux := baseMux(func() error { return healthy }, false, "")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "partition 3") {
		t.Fatalf("unhealthy: %d %q, want 503 naming partition 3", rec.Code, rec.Body.String())
	}
	healthy = nil
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("healthy: %d %q, want 200", rec.Code, rec.Body.String())
	}
}

// startServer serves h as newServer does (HTTP/1.1 and h2c), with
// bodyTimeout d and at most maxConns connections.
func startServer(t *testing.T, d time.Duration, maxConns int, h http.Handler) string {
	t.Helper()
	srv := newServer(http.NewServeMux())
	srv.Handler, srv.ReadTimeout = h, d
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(capConns(srv, ln, maxConns, slog.New(slog.DiscardHandler))) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// A body that trickles is cut after the body timeout; a request whose
// body arrived in time may stream its answer for much longer (as Watch
// does), over HTTP/1.1 and over h2c.
func TestBodyTimeoutSparesStreams(t *testing.T) {
	const d = 300 * time.Millisecond
	addr := startServer(t, d, 100, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusRequestTimeout)
			return
		}
		for i := range 6 { // 6 × d/3: twice the body timeout
			if r.Context().Err() != nil {
				return // the stream was cut
			}
			fmt.Fprintf(w, "tick %d\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(d / 3) // the stream's pace, not synchronisation
		}
	}))
	for _, proto := range []string{"http/1.1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			tr := &http.Transport{Protocols: new(http.Protocols)}
			if proto == "h2c" {
				tr.Protocols.SetUnencryptedHTTP2(true)
			} else {
				tr.Protocols.SetHTTP1(true)
			}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			resp, err := client.Post("http://"+addr+"/stream", "text/plain", strings.NewReader("hello"))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || strings.Count(string(body), "tick") != 6 {
				t.Fatalf("stream after a prompt body: %q, %v; want 6 ticks", body, err)
			}

			// A body that stops arriving.
			pr, pw := io.Pipe()
			defer pw.Close()
			go func() { _, _ = pw.Write([]byte("partial")) }()
			start := time.Now()
			resp, err = client.Post("http://"+addr+"/stream", "text/plain", pr)
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusRequestTimeout {
					t.Fatalf("stalled body: %d %q, want 408", resp.StatusCode, body)
				}
			}
			if took := time.Since(start); took > 10*d {
				t.Fatalf("stalled body answered after %v; want about %v", took, d)
			}
		})
	}
}

// At the cap, a new client is served by closing the connection idle
// longest; with every connection busy, it waits for one to end.
func TestConnectionCap(t *testing.T) {
	release := make(chan struct{})
	var blocked atomic.Int32
	addr := startServer(t, time.Minute, 3, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			blocked.Add(1)
			<-release
		}
		fmt.Fprintln(w, "ok")
	}))
	var idle []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	get := func(client *http.Client, path string) error {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	// Three idle connections hold the cap; a real client is still served
	// (once they have been idle a second), and one of them was closed.
	if err := get(&http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}, "/"); err != nil {
		t.Fatalf("new client at the cap, 3 idle connections: %v", err)
	}
	closed := 0
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := bufio.NewReader(c).ReadByte(); errors.Is(err, io.EOF) {
			closed++
		}
	}
	if closed == 0 {
		t.Fatalf("no idle connection was closed to make room")
	}

	// Three busy requests: a fourth waits until one ends.
	for _, c := range idle {
		c.Close()
	}
	busy := make(chan error, 3)
	for range 3 {
		go func() { busy <- get(&http.Client{Transport: &http.Transport{}}, "/block") }()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fourth := make(chan error, 1)
	poll.True(t, "3 requests in flight", 10*time.Second, func() bool { return blocked.Load() == 3 })
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		fourth <- err
	}()
	select {
	case err := <-fourth:
		t.Fatalf("a fourth request was served with 3 busy at a cap of 3: %v", err)
	case <-time.After(evictIdleAfter + 500*time.Millisecond): // long enough to evict, were busy connections evictable
	}
	close(release)
	if err := <-fourth; err != nil {
		t.Fatalf("fourth request after the busy ones ended: %v", err)
	}
	for range 3 {
		if err := <-busy; err != nil {
			t.Fatalf("busy request: %v", err)
		}
	}
}

// A control plane's Watch stream outlives the body timeout by far, over
// HTTP/1.1 and h2c: the timeout covers the request's body only, which a
// Watch sends at once.
func TestWatchOutlivesTheBodyTimeout(t *testing.T) {
	const d = 200 * time.Millisecond
	log := slog.New(slog.DiscardHandler)
	cp, cell, adminToken := newControlPlane(t, log)
	mux := http.NewServeMux()
	cp.Handle(mux)
	addr := startServer(t, d, 100, mux)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = cp.Run(ctx) }()
	url := "http://" + addr
	for i, proto := range []string{"http/1.1", "h2c"} {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		if proto == "h2c" {
			tr.Protocols.SetUnencryptedHTTP2(true)
		} else {
			tr.Protocols.SetHTTP1(true)
		}
		client := &http.Client{Transport: tr}
		agents := rivorav1connect.NewAgentServiceClient(client, url, connect.WithInterceptors(auth.Bearer(cell.String())))
		admin := rivorav1connect.NewAdminServiceClient(client, url, connect.WithInterceptors(auth.Bearer(strings.TrimSpace(string(adminToken)))))
		stream, err := agents.Watch(ctx, connect.NewRequest(&rivorav1.WatchRequest{AgentName: "a" + strconv.Itoa(i), Address: "http://127.0.0.1:1"}))
		if err != nil {
			t.Fatalf("%s: Watch: %v", proto, err)
		}
		if !stream.Receive() {
			t.Fatalf("%s: Watch's first message: %v", proto, stream.Err())
		}
		// Five body timeouts later, a change still reaches the stream.
		time.Sleep(5 * d) // the duration under test, not a wait for an event
		created := make(chan error, 1)
		go func() {
			_, err := admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "d" + strconv.Itoa(i), Url: "https://hooks.example.com/hook"})) // never dialled
			created <- err
		}()
		if !stream.Receive() {
			t.Fatalf("%s: Watch ended %v after it began: %v", proto, 5*d, stream.Err())
		}
		if err := <-created; err != nil {
			t.Fatalf("%s: create a destination: %v", proto, err)
		}
		stream.Close()
	}
}

// newControlPlane is a control plane on a temporary state directory, its
// cell token, and the admin token it wrote there.
func newControlPlane(t *testing.T, log *slog.Logger) (*controlplane.ControlPlane, auth.CellToken, []byte) {
	t.Helper()
	cell, err := auth.NewCellToken()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	cp, err := controlplane.New(controlplane.Config{StateDir: state, Keys: auth.NewKeys(cell), AdminTokenPath: filepath.Join(state, "admin.token")}, log)
	if err != nil {
		t.Fatal(err)
	}
	adminToken, err := os.ReadFile(filepath.Join(state, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return cp, cell, adminToken
}
