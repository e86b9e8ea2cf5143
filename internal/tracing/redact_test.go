package tracing

import "testing"

func TestRedactEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:4318":                      "http://127.0.0.1:4318",
		"https://user:secret@otel.example:4318/x":    "https://otel.example:4318/x (credentials left out)",
		"https://otel.example/v1/traces?api-key=abc": "https://otel.example/v1/traces (credentials left out)",
		"http://[::1]:namedport":                     "(an endpoint that is not a URL)",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
