package delivery_test

import (
	"errors"
	"testing"

	"github.com/rivora/rivora/agent/delivery"
)

func failed(status int) delivery.Result {
	return delivery.Result{Status: status, Err: errors.New("failed")}
}

// The destination's failures (down, unreachable, slow, throttling) are
// told from the event's (a payload the partner cannot handle).
func TestResultDestinationFault(t *testing.T) {
	cases := []struct {
		name string
		res  delivery.Result
		want bool
	}{
		{"2xx", delivery.Result{Status: 200}, false},
		{"204", delivery.Result{Status: 204}, false},
		{"no response", failed(0), true},
		{"408 request timeout", failed(408), true},
		{"409 conflict", failed(409), true},
		{"425 too early", failed(425), true},
		{"429 throttled", failed(429), true},
		{"502 bad gateway", failed(502), true},
		{"503 unavailable", failed(503), true},
		{"504 gateway timeout", failed(504), true},
		{"3xx redirect", failed(302), false},
		{"400 bad request", failed(400), false},
		{"404 not found", failed(404), false},
		{"410 gone", failed(410), false},
		// A partner whose app crashed answers 500 to everything, a CDN
		// 52x: whether one payload is to blame is for OtherwiseHealthy.
		{"500 internal error", failed(500), true},
		{"501 not implemented", failed(501), true},
		{"520 (a CDN's)", failed(520), true},
		{"599", failed(599), true},
		// A request never sent is the event's, whatever its error.
		{"not sent", delivery.Result{Err: errors.New("build request"), NotSent: true}, false},
	}
	for _, c := range cases {
		if got := c.res.DestinationFault(); got != c.want {
			t.Errorf("%s: DestinationFault() = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestResultStatusClass(t *testing.T) {
	cases := []struct {
		status int
		want   string
	}{
		{0, "error"}, {200, "2xx"}, {299, "2xx"}, {301, "3xx"}, {399, "3xx"},
		{400, "4xx"}, {429, "4xx"}, {499, "4xx"}, {500, "5xx"}, {503, "5xx"}, {599, "5xx"},
	}
	for _, c := range cases {
		if got := failed(c.status).StatusClass(); got != c.want {
			t.Errorf("status %d: StatusClass() = %q, want %q", c.status, got, c.want)
		}
	}
}

// Only a 410 says the receiver wants no more webhooks; it is neither a
// success nor a passing fault of the destination (it must not throttle
// the budget), and no other 4xx is mistaken for it.
func TestResultGone(t *testing.T) {
	for _, status := range []int{0, 200, 204, 301, 400, 404, 409, 429, 500, 503} {
		res := failed(status)
		if status < 300 && status > 0 {
			res = delivery.Result{Status: status}
		}
		if res.Gone() {
			t.Errorf("status %d: Gone() = true", status)
		}
	}
	gone := failed(410)
	if !gone.Gone() || gone.OK() || gone.DestinationFault() {
		t.Errorf("410: Gone() = %v, OK() = %v, DestinationFault() = %v; want true, false, false", gone.Gone(), gone.OK(), gone.DestinationFault())
	}
}
