package delivery_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/internal/ssrf"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// loopbackOnly lets a sender reach the test partners on 127.0.0.1.
var loopbackOnly = ssrf.New(ssrf.Loopback)

type received struct {
	header http.Header
	body   []byte
	method string
	host   string // the Host header
}

// partner is a real HTTP endpoint on 127.0.0.1 that records what it got
// and answers with handler.
func partner(t *testing.T, handler func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("partner read body: %v", err)
		}
		got <- received{header: r.Header.Clone(), body: body, method: r.Method, host: r.Host}
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func endpoint(t *testing.T, url string) destinations.Endpoint {
	t.Helper()
	s, err := webhook.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	return destinations.Endpoint{URL: url, Signer: s}
}

func event() *rivorav1.Event {
	return &rivorav1.Event{
		EventId: "evt_01J7", DestinationId: "orders", CustomerId: "acme", LaneKey: "user é/42",
		Type: "order.created", Payload: []byte("{\"a\":1}\n\x00\xff binary tail"), ContentType: "application/cloudevents+json",
	}
}

func TestSendSignedRequest(t *testing.T) {
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	ev := event()
	s := delivery.NewSender("rivora/test (agent-1)", loopbackOnly)
	res := s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL+"/hooks"), Event: ev, Attempt: 3, Timeout: 5 * time.Second})
	if !res.OK() || res.Status != http.StatusNoContent || res.Err != nil {
		t.Fatalf("Send = %+v, want 204 and no error", res)
	}
	if res.Duration <= 0 {
		t.Fatalf("duration = %v, want > 0", res.Duration)
	}
	r := <-got
	if r.method != http.MethodPost {
		t.Fatalf("method = %s, want POST", r.method)
	}
	if string(r.body) != string(ev.GetPayload()) {
		t.Fatalf("body = %q, want exactly %q", r.body, ev.GetPayload())
	}
	want := map[string]string{
		"Content-Type":      "application/cloudevents+json",
		"User-Agent":        "rivora/test (agent-1)",
		"Webhook-Id":        "evt_01J7",
		"Rivora-Customer":   "acme",
		"Rivora-Lane":       "user é/42",
		"Rivora-Attempt":    "3",
		"Rivora-Event-Type": "order.created",
	}
	for k, v := range want {
		if g := r.header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	if r.header.Get("Rivora-Replay") != "" {
		t.Errorf("rivora-replay set on an event that was not replayed")
	}
	if r.header.Get("Rivora-Resend") != "" {
		t.Errorf("rivora-resend set on an event that was not resent")
	}
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(r.header, r.body); err != nil {
		t.Fatalf("signature does not verify: %v (headers %v)", err, r.header)
	}
	// The signature covers the body: a receiver seeing other bytes rejects it.
	if err := v.Verify(r.header, append([]byte{}, r.body[1:]...)); err == nil {
		t.Fatal("signature verifies a different body")
	}
	other, _ := webhook.NewVerifier("whsec_" + strings.Repeat("A", 44))
	if err := other.Verify(r.header, r.body); err == nil {
		t.Fatal("signature verifies under another secret")
	}
	ts := r.header.Get(webhook.HeaderTimestamp)
	if ts == "" {
		t.Fatal("no webhook-timestamp")
	}
}

func TestSendReplayedMark(t *testing.T) {
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) {})
	ev := event()
	ev.Replayed = true
	res := delivery.NewSender("ua", loopbackOnly).Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: ev, Attempt: 1, Timeout: 5 * time.Second})
	if !res.OK() || res.Status != 200 {
		t.Fatalf("Send = %+v", res)
	}
	if r := <-got; r.header.Get("Rivora-Replay") != "true" || r.header.Get("Rivora-Replay-Of") != "" {
		t.Fatalf("rivora-replay = %q, rivora-replay-of %q; want true and none", r.header.Get("Rivora-Replay"), r.header.Get("Rivora-Replay-Of"))
	}

	// An idempotency conflict's copy, replayed under an id of its own,
	// names the id it died under.
	ev.ReplayOf = "0190d3c2-0000-7000-8000-000000000001"
	if res := delivery.NewSender("ua", loopbackOnly).Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: ev, Attempt: 1, Timeout: 5 * time.Second}); !res.OK() {
		t.Fatalf("Send = %+v", res)
	}
	if r := <-got; r.header.Get("Rivora-Replay-Of") != ev.ReplayOf {
		t.Fatalf("rivora-replay-of = %q, want %s", r.header.Get("Rivora-Replay-Of"), ev.ReplayOf)
	}
}

func TestSendResentMark(t *testing.T) {
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) {})
	ev := event()
	ev.Resent = true
	res := delivery.NewSender("ua", loopbackOnly).Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: ev, Attempt: 1, Timeout: 5 * time.Second})
	if !res.OK() {
		t.Fatalf("Send = %+v", res)
	}
	r := <-got
	if r.header.Get("Rivora-Resend") != "1" || r.header.Get("Webhook-Id") != ev.GetEventId() {
		t.Fatalf("rivora-resend = %q, webhook-id = %q; want 1 and the event's own id %s", r.header.Get("Rivora-Resend"), r.header.Get("Webhook-Id"), ev.GetEventId())
	}
}

func TestSendNon2xx(t *testing.T) {
	cases := []struct {
		name    string
		status  int
		body    string
		wantErr string
	}{
		{"503 with body", 503, "  overloaded, try later \n", "HTTP 503: overloaded, try later"},
		{"500 without body", 500, "", "HTTP 500"},
		{"404", 404, "no such hook", "HTTP 404: no such hook"},
		{"long body is cut", 500, strings.Repeat("x", 1000), "HTTP 500: " + strings.Repeat("x", 256)},
		{"invalid UTF-8 is replaced", 502, "bad \xff\xfe gateway", "HTTP 502: bad ? gateway"},
		{"control characters are replaced", 500, "\x1b[31mred\x1b[0m \x00end", "HTTP 500: ?[31mred?[0m ?end"},
		{"format characters are replaced", 500, "pay \u202eusd\u200b now\u2028\u2066x", "HTTP 500: pay ?usd? now ?x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := partner(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			res := delivery.NewSender("ua", loopbackOnly).Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
			if res.OK() || res.Status != tc.status || res.Err == nil {
				t.Fatalf("Send = %+v, want status %d and an error", res, tc.status)
			}
			if res.Err.Error() != tc.wantErr {
				t.Fatalf("Err = %q, want %q", res.Err, tc.wantErr)
			}
			if res.RetryAfter != 0 {
				t.Fatalf("RetryAfter = %v without the header", res.RetryAfter)
			}
		})
	}
}

func TestSendRetryAfter(t *testing.T) {
	at := time.Now().Add(90 * time.Second).UTC()
	cases := []struct {
		name     string
		header   string
		min, max time.Duration
	}{
		{"seconds", "120", 120 * time.Second, 120 * time.Second},
		{"seconds with spaces", " 7 ", 7 * time.Second, 7 * time.Second},
		{"HTTP date", at.Format(http.TimeFormat), 85 * time.Second, 90 * time.Second},
		{"date in the past", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0, 0},
		{"zero", "0", 0, 0},
		{"negative", "-5", 0, 0},
		{"garbage", "soon", 0, 0},
		// A day is held to MaxRetryAfter (an hour), in either form.
		{"a day in seconds", "86400", delivery.MaxRetryAfter, delivery.MaxRetryAfter},
		{"beyond int64 seconds", "99999999999999999999", delivery.MaxRetryAfter, delivery.MaxRetryAfter},
		{"far below int64 seconds", "-99999999999999999999", 0, 0},
		{"a huge number of seconds", "9223372036854775807", delivery.MaxRetryAfter, delivery.MaxRetryAfter},
		{"a date a day away", time.Now().Add(24 * time.Hour).UTC().Format(http.TimeFormat), delivery.MaxRetryAfter, delivery.MaxRetryAfter},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := partner(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", tc.header)
				w.WriteHeader(http.StatusTooManyRequests)
			})
			res := delivery.NewSender("ua", loopbackOnly).Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
			if res.Status != 429 || res.OK() {
				t.Fatalf("Send = %+v, want 429", res)
			}
			if res.RetryAfter < tc.min || res.RetryAfter > tc.max {
				t.Fatalf("RetryAfter = %v for %q, want in [%v, %v]", res.RetryAfter, tc.header, tc.min, tc.max)
			}
		})
	}
}

func TestSendTimeout(t *testing.T) {
	release := make(chan struct{})
	srv, _ := partner(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	res := delivery.NewSender("ua", loopbackOnly).Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: event(), Attempt: 1, Timeout: 150 * time.Millisecond})
	if res.OK() || res.Status != 0 {
		t.Fatalf("Send = %+v, want no status and an error", res)
	}
	if res.Err.Error() != "timeout after 150ms" {
		t.Fatalf("Err = %q, want %q", res.Err, "timeout after 150ms")
	}
	if res.Duration < 150*time.Millisecond {
		t.Fatalf("Duration = %v, shorter than the timeout", res.Duration)
	}
}

func TestSendConnectionError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	res := delivery.NewSender("ua", loopbackOnly).Send(context.Background(), delivery.Request{Endpoint: endpoint(t, url), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	if res.OK() || res.Status != 0 || !strings.HasPrefix(res.Err.Error(), "connection error: ") {
		t.Fatalf("Send to a closed port = %+v, want status 0 and a connection error", res)
	}
}

func TestSendBadURL(t *testing.T) {
	res := delivery.NewSender("ua", loopbackOnly).Send(context.Background(), delivery.Request{Endpoint: endpoint(t, "http://bad host/"), Event: event(), Attempt: 1, Timeout: time.Second})
	if res.OK() || res.Err == nil {
		t.Fatalf("Send to a malformed URL = %+v, want an error", res)
	}
}

// A redirect would re-send a signed payload to an address nobody
// registered: it is a failed attempt, and the target never sees a request.
func TestSendDoesNotFollowRedirects(t *testing.T) {
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(target.Close)
	for _, status := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		srv, _ := partner(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/elsewhere", status)
		})
		res := delivery.NewSender("ua", loopbackOnly).Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
		if res.OK() || res.Status != status || !strings.HasPrefix(res.Err.Error(), fmt.Sprintf("HTTP %d", status)) {
			t.Fatalf("redirect %d: Send = %+v, want a failure with status %d", status, res, status)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("redirect target got %d requests, want 0", n)
	}
}

// TestSendUnsendableEventIsTheEventsFault: an event whose values cannot
// go on the wire (a control character in its content type, from an
// archive written before ingest refused it) is never sent, and the
// failure is the event's: it must not read as a connection error, which
// would cut its destination's budget for every customer. Values a
// header can carry once escaped (lane, type) are sent.
func TestSendUnsendableEventIsTheEventsFault(t *testing.T) {
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s := delivery.NewSender("ua", loopbackOnly)
	for _, ct := range []string{"application/json; x=\"\x01\"", "application/json; x=\"\x7f\"", "text/plain\x1b"} {
		ev := event()
		ev.ContentType = ct
		res := s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL+"/hook"), Event: ev, Attempt: 1, Timeout: 5 * time.Second})
		if res.OK() || !res.NotSent || res.DestinationFault() || res.Status != 0 {
			t.Fatalf("content type %q: %+v (destination fault %v), want not sent and the event's fault", ct, res, res.DestinationFault())
		}
		if !strings.Contains(res.Err.Error(), "Content-Type") {
			t.Fatalf("content type %q: error %q does not name the header", ct, res.Err)
		}
	}
	if len(got) != 0 {
		t.Fatalf("the partner got %d requests, want none", len(got))
	}
	ev := event()
	ev.LaneKey, ev.Type = "user\x01\x7f", "order.\x00created"
	res := s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL+"/hook"), Event: ev, Attempt: 1, Timeout: 5 * time.Second})
	if !res.OK() {
		t.Fatalf("controls in lane and type: %+v, want sent (escaped)", res)
	}
	if r := <-got; r.header.Get("Rivora-Lane") != "UTF-8''user%01%7F" || r.header.Get("Rivora-Event-Type") != "UTF-8''order.%00created" {
		t.Fatalf("lane %q, type %q: want their RFC 5987 forms", r.header.Get("Rivora-Lane"), r.header.Get("Rivora-Event-Type"))
	}
}
