package console_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rivora/rivora/console"
)

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func mux() http.Handler {
	m := http.NewServeMux()
	m.Handle(console.Prefix, console.Handler())
	return m
}

func TestServesIndexWithHeaders(t *testing.T) {
	rec := get(t, mux(), "/console/")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /console/: %d", rec.Code)
	}
	if !strings.Contains(rec.Body.String(), `<div id="app">`) {
		t.Fatalf("GET /console/ is not the app's index.html:\n%s", rec.Body.String())
	}
	want := map[string]string{
		"Cache-Control":          "no-cache",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
		"Content-Type":           "text/html; charset=utf-8",
	}
	for k, v := range want {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	csp := rec.Header().Get("Content-Security-Policy")
	for _, d := range []string{"default-src 'self'", "connect-src 'self'", "style-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, d) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, d)
		}
	}
}

func TestUnknownPathFallsBackToIndex(t *testing.T) {
	for _, p := range []string{"/console/destinations", "/console/destination/orders", "/console/index.html"} {
		rec := get(t, mux(), p)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `<div id="app">`) {
			t.Errorf("GET %s: %d, not index.html", p, rec.Code)
		}
	}
}

func TestAssetsAreImmutable(t *testing.T) {
	rec := get(t, mux(), "/console/")
	body := rec.Body.String()
	i := strings.Index(body, "/console/assets/")
	if i < 0 {
		t.Fatalf("index.html names no asset:\n%s", body)
	}
	asset := body[i:]
	asset = asset[:strings.IndexAny(asset, `"'`)]
	rec = get(t, mux(), asset)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d", asset, rec.Code)
	}
	if got := rec.Header().Get("Cache-Control"); got != "public, max-age=31536000, immutable" {
		t.Errorf("GET %s: Cache-Control %q", asset, got)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.Contains(ct, "javascript") && !strings.Contains(ct, "css") {
		t.Errorf("GET %s: Content-Type %q", asset, ct)
	}
}

func TestMissingAssetIs404(t *testing.T) {
	for _, p := range []string{"/console/assets/index-00000000.js", "/console/favicon.ico", "/console/assets/x"} {
		if rec := get(t, mux(), p); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, rec.Code)
		}
	}
}

func TestRedirectsBareConsole(t *testing.T) {
	// ServeMux redirects a subtree's root itself (307).
	rec := get(t, mux(), "/console")
	if rec.Code/100 != 3 || rec.Header().Get("Location") != "/console/" {
		t.Fatalf("GET /console: %d Location %q", rec.Code, rec.Header().Get("Location"))
	}
	// The handler on its own redirects too (mounted at /console).
	rec = get(t, console.Handler(), "/console")
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/console/" {
		t.Fatalf("Handler GET /console: %d Location %q", rec.Code, rec.Header().Get("Location"))
	}
}

func TestRefusesWrites(t *testing.T) {
	rec := httptest.NewRecorder()
	mux().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/console/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /console/: %d", rec.Code)
	}
}
