package delivery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
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

// A token the partner refused (a 401) is replaced by the first attempt
// from tokenRejectedSpacing after it was fetched, without waiting for
// another 401; a refusal of a token already replaced changes nothing.
func TestTokenSourceReplacesARefusedToken(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"Bearer","expires_in":3600}`, requests.Add(1))
	}))
	t.Cleanup(srv.Close)
	start := time.Now()
	now := start
	src := newTokenSource(&destinations.OAuth2{Key: "k", DestinationID: "erp", TokenURL: srv.URL, ClientID: "id", ClientSecret: "s"}, srv.Client(), func() time.Time { return now })
	token := func(want string) {
		t.Helper()
		if got, err := src.Token(context.Background()); err != nil || got != want {
			t.Fatalf("at +%s Token = %q, %v; want %q", now.Sub(start), got, err, want)
		}
	}
	token("tok-1")
	now = start.Add(2 * time.Second)
	if why := src.Rejected("tok-1"); !strings.Contains(why, "a new one is fetched") {
		t.Errorf("Rejected says %q", why)
	}
	now = start.Add(9 * time.Second)
	token("tok-1") // fresh: kept until the spacing is over
	now = start.Add(tokenRejectedSpacing)
	token("tok-2")
	now = start.Add(30 * time.Second)
	if why := src.Rejected("tok-1"); !strings.Contains(why, "already replaced") {
		t.Errorf("Rejected of a replaced token says %q", why)
	}
	token("tok-2")
	// Refused long after it was fetched: the very next attempt replaces it.
	now = start.Add(time.Minute)
	src.Rejected("tok-2")
	token("tok-3")
	if n := requests.Load(); n != 3 {
		t.Fatalf("%d token requests, want 3", n)
	}
}

// A token endpoint answering an expiry already past (a negative
// expires_in) or a very short one does not get a token request per
// attempt: a past one is taken as no expiry given, a short one is
// replaced by its lifetime (a fifth of it ahead), never used past it.
func TestTokenSourceOddExpiresIn(t *testing.T) {
	for _, c := range []struct {
		expiresIn string
		step      time.Duration // between attempts
		want      int64         // token requests for 30 attempts
	}{
		{"-5", time.Second, 1},
		{"-3600", time.Minute, 1},
		{"1", 100 * time.Millisecond, 4}, // at 0, 0.8, 1.6 and 2.4 s: by its lifetime, not per attempt
	} {
		var requests atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"Bearer","expires_in":%s}`, requests.Add(1), c.expiresIn)
		}))
		start := time.Now()
		now := start
		src := newTokenSource(&destinations.OAuth2{Key: "k", DestinationID: "erp", TokenURL: srv.URL, ClientID: "id", ClientSecret: "s"}, srv.Client(), func() time.Time { return now })
		for i := range 30 {
			now = start.Add(time.Duration(i) * c.step)
			if tok, err := src.Token(context.Background()); err != nil || tok == "" {
				t.Fatalf("expires_in %s: attempt %d: Token = %q, %v", c.expiresIn, i, tok, err)
			}
		}
		srv.Close()
		if n := requests.Load(); n != c.want {
			t.Errorf("expires_in %s, an attempt every %s: %d token requests for 30 attempts; want %d", c.expiresIn, c.step, n, c.want)
		}
	}
}

// A token endpoint's refusal reaches tables and logs in its own words,
// but never with a control or format character in them: a terminal
// escape sequence, a line break or U+202E (which reverses what follows
// it on screen) in the error code, its description or the body.
func TestTokenErrorIsPrintable(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"error":"invalid_client\u001b]0;PWN\u0007","error_description":"no\r\nX-Forged: 1 \u202eusd"}`,
			"oauth2 token endpoint: 401 invalid_client?]0;PWN? (no X-Forged: 1 ?usd)"},
		{"<h1>denied\x1b[2J</h1>\n<p>\u2066again\u2069</p>", "oauth2 token endpoint: 401: <h1>denied?[2J</h1> <p>?again?</p>"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(c.body, "{") {
				w.Header().Set("Content-Type", "application/json")
			}
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, c.body)
		}))
		src := newTokenSource(&destinations.OAuth2{Key: "k", DestinationID: "erp", TokenURL: srv.URL, ClientID: "id", ClientSecret: "s"}, srv.Client(), time.Now)
		_, err := src.Token(context.Background())
		srv.Close()
		if err == nil || err.Error() != c.want {
			t.Errorf("token endpoint answering %q: error %q, want %q", c.body, fmt.Sprint(err), c.want)
		}
	}
}

// A token request's error names its URL as tokenEndpoint says, whatever
// wraps the *url.Error that names it whole: unwrapped, or cut from the
// text of an error that only quotes it.
func TestTokenErrorWithoutTheURL(t *testing.T) {
	const tokenURL = "https://user:pw@auth.example:8443/t/token?assertion=S3CRET&x=%2F#frag"
	refused := errors.New("dial tcp 192.0.2.1:8443: connect: connection refused")
	for _, shared := range []bool{false, true} {
		endpoint := tokenEndpoint(&destinations.OAuth2{TokenURL: tokenURL, Shared: shared})
		wantEndpoint := map[bool]string{false: "https://auth.example:8443/t/token", true: "https://auth.example:8443"}[shared]
		if endpoint != wantEndpoint {
			t.Fatalf("shared %v: tokenEndpoint = %q, want %q", shared, endpoint, wantEndpoint)
		}
		failed := "oauth2 token endpoint: request to " + endpoint + " failed: "
		for err, want := range map[error]string{
			&url.Error{Op: "Post", URL: tokenURL, Err: refused}: failed + "dial tcp 192.0.2.1:8443: connect: connection refused",
			fmt.Errorf("oauth2: %w", &url.Error{Op: "Post", URL: tokenURL, Err: fmt.Errorf("read %s: %w", "https://auth.example:8443/t/token?assertion=S3CRET&x=%2F", refused)}): failed + "read " + endpoint + ": dial tcp 192.0.2.1:8443: connect: connection refused",
			// Quoted, not wrapped: cut from the text.
			fmt.Errorf("oauth2: cannot fetch token: %v", &url.Error{Op: "Post", URL: tokenURL, Err: refused}): "oauth2 token endpoint: oauth2: cannot fetch token: Post \"" + endpoint + "\": dial tcp 192.0.2.1:8443: connect: connection refused",
		} {
			msg := describeTokenError(err, tokenURL, endpoint).Error()
			if msg != want {
				t.Errorf("shared %v: %q is said as %q, want %q", shared, err, msg, want)
			}
			for _, secret := range []string{"S3CRET", "user", "pw@", "frag", "%2F"} {
				if strings.Contains(msg, secret) {
					t.Errorf("shared %v: %q is said as %q, which names %q", shared, err, msg, secret)
				}
			}
			if shared && strings.Contains(msg, "/t/token") {
				t.Errorf("shared: %q names the token URL's path", msg)
			}
		}
	}
}
