package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// With --metrics-token-file, /metrics and /debug/pprof/ need the token;
// /healthz stays open. Without it, /metrics is open.
func TestMetricsToken(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		token, path, bearer string
		want                int
	}{
		{token, "/metrics", "", http.StatusUnauthorized},
		{token, "/metrics", "wrong-token-0123456789", http.StatusUnauthorized},
		{token, "/metrics", token, http.StatusOK},
		{token, "/debug/pprof/", "", http.StatusUnauthorized},
		{token, "/debug/pprof/", token, http.StatusOK},
		{token, "/healthz", "", http.StatusOK},
		{"", "/metrics", "", http.StatusOK},
	} {
		mux := baseMux(func() error { return nil }, true, tc.token)
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+tc.bearer)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("GET %s (metrics token %q, bearer %q): %d, want %d", tc.path, tc.token, tc.bearer, rec.Code, tc.want)
		}
	}
}
