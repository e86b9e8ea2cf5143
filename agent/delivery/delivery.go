// Package delivery makes one signed HTTP POST per attempt and says how it
// went. It owns the HTTP client (connection reuse across attempts).
package delivery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/internal/ssrf"
	"github.com/rivora/rivora/internal/tracing"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Request is one attempt.
type Request struct {
	Endpoint destinations.Endpoint
	Event    *rivorav1.Event
	Attempt  int
	Timeout  time.Duration
	// BudgetWait is how long the attempt waited for its destination's
	// budget (a span attribute when tracing).
	BudgetWait time.Duration
}

// Result is how an attempt went.
type Result struct {
	// Status is the HTTP status, 0 when no response arrived.
	Status int
	// Err is set for every non-2xx outcome, with a human-readable reason.
	Err error
	// RetryAfter is the partner's Retry-After, when it sent one.
	RetryAfter time.Duration
	Duration   time.Duration
	// NotSent marks an attempt that never reached the partner for a
	// reason of the event's own (Err says why): the SSRF guard would not
	// dial its address, or no valid HTTP request could be built from it
	// (a header value it carries). It is the event's fault and never a
	// sign of the destination's health: it uses one of the event's
	// attempts and never touches the destination's budget.
	NotSent bool
}

// OK reports a 2xx answer.
func (r Result) OK() bool { return r.Err == nil }

// DestinationFault tells failures that may be the destination's — it is
// down, unreachable, slow, throttling or failing: every 5xx (a crashed
// app behind a load balancer answers 500 to everything; CDNs answer
// 52x), 408, 409, 425, 429, timeouts and connection errors; they cost its
// budget and health — from failures that are the event's: other 4xx, and
// a request that was never sent (NotSent); those only use up the
// event's attempts.
//
// A server error may still be one payload's doing (a partner that 500s
// on one body it cannot parse): whether such a failure also uses one of
// the event's attempts is decided by what the destination did for the
// other lanes (scheduler.Observation.OtherwiseHealthy), never by the status alone.
func (r Result) DestinationFault() bool {
	if r.OK() || r.NotSent {
		return false
	}
	switch r.Status {
	case 0, 408, 409, 425, 429:
		return true
	}
	return r.Status >= 500
}

// Gone reports a 410 Gone: in Standard Webhooks the receiver's way of
// saying it wants no more webhooks. It is neither the event's fault nor a
// passing one of the destination's: the destination is disabled until an
// operator resumes it, and the attempt is not counted against the event.
func (r Result) Gone() bool { return r.Status == http.StatusGone }

// StatusClasses are the attempt outcome classes for metrics, in the
// order of ClassIndex: "error" when no response arrived, else the HTTP
// status class.
var StatusClasses = [...]string{"error", "2xx", "3xx", "4xx", "5xx"}

// StatusClass is the attempt's outcome class for metrics: "2xx", "3xx",
// "4xx", "5xx", or "error" when no response arrived.
func (r Result) StatusClass() string { return StatusClasses[r.ClassIndex()] }

// ClassIndex is the index of the attempt's StatusClass in StatusClasses.
func (r Result) ClassIndex() int {
	switch {
	case r.Status == 0:
		return 0
	case r.Status < 300:
		return 1
	case r.Status < 400:
		return 2
	case r.Status < 500:
		return 3
	default:
		return 4
	}
}

// Sender posts events. It is safe for concurrent use.
type Sender struct {
	transport *http.Transport
	userAgent string
	now       func() time.Time
}

// NewSender returns a sender whose requests carry userAgent and whose
// every connection passes guard (nil: the guard's default denials).
func NewSender(userAgent string, guard *ssrf.Guard, opts ...Option) *Sender {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         o.dialer(guard).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	return &Sender{transport: transport, userAgent: userAgent, now: time.Now}
}

// Send makes one attempt. Its request carries the event's trace context:
// the rivora.attempt span's when tracing, else the stored one as stored.
func (s *Sender) Send(ctx context.Context, req Request) Result {
	if tracing.Tracer() == nil {
		// As stored: ingest (and replay, for the archive's) checked it.
		return s.send(ctx, req, req.Event.GetTraceparent(), req.Event.GetTracestate())
	}
	return s.sendTraced(ctx, req)
}

func (s *Sender) send(ctx context.Context, req Request, traceparent, tracestate string) Result {
	ev := req.Event
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	start := s.now()
	ts := start.Unix()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, req.Endpoint.URL, bytes.NewReader(ev.GetPayload()))
	if err != nil {
		return Result{Err: fmt.Errorf("build request: %w", err), NotSent: true}
	}
	// Sized once for Rivora's headers and the destination's: growing the
	// map as it fills costs more than filling it. Canonical keys assigned
	// directly: this runs once per attempt.
	h := make(http.Header, len(ownHeaderValues{}.v)+len(req.Endpoint.Headers))
	hreq.Header = h
	setCustomHeaders(h, req.Endpoint.Headers)
	own := new(ownHeaderValues)
	own.set(h, "Content-Type", ev.GetContentType())
	own.set(h, "User-Agent", s.userAgent)
	own.set(h, "Webhook-Id", ev.GetEventId())
	// Marks the POST replayable, so the transport re-sends it on a fresh
	// connection when a pooled one turns out closed, instead of failing the
	// attempt (and cutting the destination's budget) for nothing.
	own.set(h, "Idempotency-Key", ev.GetEventId())
	own.set(h, "Webhook-Timestamp", strconv.FormatInt(ts, 10))
	own.set(h, "Webhook-Signature", req.Endpoint.Signer.Sign(ev.GetEventId(), ts, ev.GetPayload()))
	own.set(h, "Rivora-Customer", ev.GetCustomerId())
	own.set(h, "Rivora-Lane", headerSafe(ev.GetLaneKey()))
	own.set(h, "Rivora-Attempt", strconv.Itoa(req.Attempt))
	own.set(h, "Rivora-Event-Type", headerSafe(ev.GetType()))
	if ev.GetReplayed() {
		own.set(h, "Rivora-Replay", "true")
	}
	if ev.GetResent() {
		own.set(h, "Rivora-Resend", "1")
	}
	if traceparent != "" {
		own.set(h, tracing.TraceparentHeader, traceparent)
		if tracestate != "" {
			own.set(h, tracing.TracestateHeader, tracestate)
		} else {
			delete(h, tracing.TracestateHeader)
		}
	}
	if err := checkHeaders(h); err != nil {
		// The transport would refuse it before dialling, and its error
		// would read as a connection error (the destination's fault).
		return Result{Err: fmt.Errorf("build request: %w", err), NotSent: true}
	}
	// The transport directly, not an http.Client: a redirect is never
	// followed (it would re-send a signed payload to an address nobody
	// registered; a 3xx is a failed attempt), and the client's per-request
	// redirect bookkeeping is the largest cost after the HTTP exchange.
	resp, err := s.transport.RoundTrip(hreq)
	elapsed := s.now().Sub(start)
	if err != nil {
		if refused := ssrf.Refusal(err); refused != nil {
			return Result{Err: refused, NotSent: true, Duration: elapsed}
		}
		return Result{Err: describeTransportError(err, req.Timeout), Duration: elapsed}
	}
	defer resp.Body.Close()
	res := Result{Status: resp.StatusCode, Duration: elapsed}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return res
	}
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	res.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), s.now())
	msg := fmt.Sprintf("HTTP %d", resp.StatusCode)
	// One line, whatever the partner sent: it ends up in tables and logs.
	if body := strings.Join(strings.Fields(string(snippet)), " "); body != "" {
		msg += ": " + strings.ToValidUTF8(body, "?")
	}
	res.Err = errors.New(msg)
	return res
}

// ownHeaderValues holds the values of the headers Rivora sets on one
// attempt (at most 14), in one allocation instead of one per header.
type ownHeaderValues struct {
	v [14]string
	n int
}

// set gives header name (canonical) the single value v, a one-element
// window on own's array that an append cannot spill into the next one.
func (own *ownHeaderValues) set(h http.Header, name, v string) {
	own.v[own.n] = v
	h[name] = own.v[own.n : own.n+1 : own.n+1]
	own.n++
}

// headerSafe returns v unless it holds control characters, which a header
// value may not carry (lane keys and types are arbitrary UTF-8); then its
// RFC 5987 form: UTF-8” followed by the percent-encoded value.
func headerSafe(v string) string {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return "UTF-8''" + url.PathEscape(v)
		}
	}
	return v
}

// checkHeaders applies the rule the HTTP/1.1 and HTTP/2 transports apply
// before they send a request (httpguts): a name is a token, a value has no
// control character but tab. It names the header, never its value (a
// custom header may hold a credential).
func checkHeaders(h http.Header) error {
	for name, values := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			return fmt.Errorf("header name %q is not a valid HTTP token", name)
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("the %s header's value has a control character, which HTTP does not allow", name)
			}
		}
	}
	return nil
}

func describeTransportError(err error, timeout time.Duration) error {
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
		return fmt.Errorf("timeout after %s", timeout)
	}
	return fmt.Errorf("connection error: %w", err)
}

// parseRetryAfter reads seconds or an HTTP date; 0 when absent or invalid.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
