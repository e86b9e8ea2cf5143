package delivery

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/destinations"
)

// A token is reused until a fifth of its lifetime before it expires, then
// fetched again; a failing endpoint is asked again only after a pause
// that doubles, while the cached token serves until it expires.
func TestTokenSourceRefreshAndPacing(t *testing.T) {
	var requests atomic.Int64
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":"temporarily_unavailable"}`)
			return
		}
		fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"Bearer","expires_in":100}`, n)
	}))
	t.Cleanup(srv.Close)
	start := time.Now()
	now := start
	src := newTokenSource(&destinations.OAuth2{Key: "k", DestinationID: "erp", TokenURL: srv.URL, ClientID: "id", ClientSecret: "s"}, srv.Client(), func() time.Time { return now })
	token := func(want string) {
		t.Helper()
		got, err := src.Token(context.Background())
		if want == "" && err == nil {
			t.Fatalf("at +%s Token = %q, want an error", now.Sub(start), got)
		}
		if want != "" && (err != nil || got != want) {
			t.Fatalf("at +%s Token = %q, %v; want %q", now.Sub(start), got, err, want)
		}
	}
	token("tok-1")
	now = start.Add(79 * time.Second)
	token("tok-1")
	now = start.Add(81 * time.Second) // refresh: expires in 19s, a fifth of 100s is 20s
	token("tok-2")
	if n := requests.Load(); n != 2 {
		t.Fatalf("%d token requests, want 2", n)
	}

	failing.Store(true)
	now = start.Add(81*time.Second + 81*time.Second)
	token("tok-2") // refresh failed; tok-2 has not expired (it does at 181s)
	now = now.Add(500 * time.Millisecond)
	token("tok-2") // within the pause: no request
	if n := requests.Load(); n != 3 {
		t.Fatalf("%d token requests, want 3 (one failed refresh, then a pause)", n)
	}
	now = start.Add(185 * time.Second) // expired; the 1s pause is over
	token("")
	now = now.Add(1500 * time.Millisecond) // the pause doubled to 2s
	token("")
	if n := requests.Load(); n != 4 {
		t.Fatalf("%d token requests, want 4 (the pause doubles)", n)
	}
	failing.Store(false)
	now = now.Add(time.Second)
	token("tok-5")
}
