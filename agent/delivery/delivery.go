// Package delivery makes one signed HTTP POST per attempt and says how it
// went. It owns the HTTP client (connection reuse across attempts).
package delivery

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/valyala/fasthttp"
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
	// AnswerUnread marks a timeout whose partner's answer was waiting,
	// unread, when this agent noticed — late — that its deadline had
	// passed, and again at the end of the one grace such an answer gets:
	// the agent was not running (stopped, or starved of CPU), so the
	// failure is its own and never a sign of the destination's health. It
	// uses one of the event's attempts (the partner may have acted on the
	// request) and never touches the destination's budget.
	//
	// It is rare: an answer found waiting by a late read is usually read
	// within its grace (client.go), and the attempt's result is then the
	// partner's real answer (2xx, 4xx, 5xx, Retry-After), so no event is
	// sent again for a request the partner answered. A read that times
	// out on time with bytes waiting is a partner trickling its answer:
	// a timeout that is the destination's, as any other.
	AnswerUnread bool
	// TokenRefused marks a 401 answered to a destination's OAuth2 access
	// token: the partner refused the token (revoked, or its settings
	// changed), which is the destination's, never the event's. The next
	// attempt fetches a new token (paced: tokenRejectedSpacing).
	TokenRefused bool
	// CertificateRefused marks an attempt whose partner refused the
	// destination's new client certificate in the handshake, so it went
	// again with the replaced one (a rotation's overlap); Status and Err
	// are that second try's.
	CertificateRefused bool
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
	if r.OK() || r.NotSent || r.AnswerUnread {
		return false
	}
	if r.TokenRefused {
		return true
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
// operator resumes it, and the attempt is not counted against the event
// — unless, on a destination shared by customers, it is one customer's
// alone (agent/verdict): then it is that customer's failure.
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
	// plain and secure are the clients of http and https URLs; withTLS
	// those of https URLs of destinations with their own TLS settings.
	plain, secure *fasthttp.Client
	withTLS       *tlsClients
	// unread are the connections whose answer was left unread past its
	// deadline, refusals those whose partner sent a TLS alert once the
	// handshake was done (every client's: they share the dialer).
	unread   *unreadAnswers
	refusals *tlsRefusals
	// tokens are the OAuth2 tokens of destinations that use them.
	tokens    *tokens
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
	dialer := o.dialer(guard)
	return &Sender{
		plain: newClient(dialer, o.tls, false), secure: newClient(dialer, o.tls, true),
		withTLS: newTLSClients(dialer, o.tls), tokens: newTokens(dialer, o.tls, time.Now), unread: dialer.unread, refusals: dialer.refusals,
		userAgent: userAgent, now: time.Now,
	}
}

// ForgetDestination drops a deleted destination's TLS clients, its cached
// OAuth2 token and its token-fetch metric series.
func (s *Sender) ForgetDestination(id string) {
	s.withTLS.forget(id)
	s.tokens.forget(id)
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
	start := s.now()
	deadline := start.Add(req.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// fasthttp sends and dials a host as written: a Unicode one (stored
	// before the control plane mapped hosts) goes in the IDNA form
	// net/http would dial.
	target, err := ssrf.ASCIIURL(req.Endpoint.URL)
	if err != nil {
		return Result{Err: fmt.Errorf("build request: %w", err), NotSent: true}
	}
	req.Endpoint.URL = target
	u, err := url.Parse(target)
	if err != nil {
		return Result{Err: fmt.Errorf("build request: %w", err), NotSent: true}
	}
	client, fallback := s.client(u, req.Endpoint, start)
	var bearer string
	var tokens *tokenSource
	if o := req.Endpoint.OAuth2; o != nil {
		// The token endpoint's failure is the destination's (Status 0):
		// its events are held like in an outage.
		if tokens, err = s.tokens.source(o, req.Endpoint.TLS); err != nil {
			return Result{Err: err, Duration: s.now().Sub(start)}
		}
		if bearer, err = tokens.Token(ctx); err != nil {
			return Result{Err: err, Duration: s.now().Sub(start)}
		}
		if !httpguts.ValidHeaderFieldValue(bearer) {
			return Result{Err: errors.New("oauth2 token endpoint: its access token has characters an HTTP header cannot carry"), Duration: s.now().Sub(start)}
		}
	}
	hreq, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(hreq)
	defer fasthttp.ReleaseResponse(resp)
	if err := s.build(hreq, req, start.Unix(), traceparent, tracestate, bearer); err != nil {
		// The client would send it as it is, or refuse it in a way that
		// reads as a connection error (the destination's fault).
		return Result{Err: fmt.Errorf("build request: %w", err), NotSent: true}
	}
	// No redirect is ever followed (Do does not): it would re-send a
	// signed payload to an address nobody registered; a 3xx is a failed
	// attempt.
	err = s.do(client, hreq, resp, deadline)
	certRefused := false
	if err != nil && fallback != nil && refusedHandshake(err) {
		// A rotation's overlap: the partner does not take the new
		// certificate yet; the same attempt goes with the previous one.
		certRefused = true
		resp.Reset()
		err = s.do(s.withTLS.client(fallback, 1).client, hreq, resp, deadline)
	}
	res := s.answer(req, resp, err, tokens, bearer, s.now().Sub(start))
	res.CertificateRefused = certRefused
	return res
}

// answer is an attempt's Result from the partner's answer (resp) or the
// transport's error.
func (s *Sender) answer(req Request, resp *fasthttp.Response, err error, tokens *tokenSource, bearer string, elapsed time.Duration) Result {
	if err != nil && !errors.Is(err, fasthttp.ErrBodyTooLarge) {
		if refused := ssrf.Refusal(err); refused != nil {
			return Result{Err: refused, NotSent: true, Duration: elapsed}
		}
		if _, unread := s.unread.take(resp.LocalAddr(), resp.RemoteAddr()); unread {
			return Result{Err: fmt.Errorf("timeout after %s with the partner's answer waiting unread, even after a grace of %s: this agent was stopped or starved of CPU", req.Timeout, answerGrace), AnswerUnread: true, Duration: elapsed}
		}
		err = describeTransportError(err, req.Timeout)
		if at, expired := clientCertificateExpired(req.Endpoint.TLS, s.now()); expired {
			// A partner that refused an expired certificate may reset
			// the next connections without an alert: say the likely why.
			err = fmt.Errorf("%w; the destination's client certificate expired at %s (rivoractl destinations update --client-cert)", err, at.UTC().Format(time.RFC3339))
		}
		return Result{Err: err, Duration: elapsed}
	}
	// With ErrBodyTooLarge the status and headers arrived; the body is
	// not read past maxAnswerBody.
	res := Result{Status: resp.StatusCode(), Duration: elapsed}
	if res.Status >= 200 && res.Status < 300 {
		return res
	}
	snippet := resp.Body()
	snippet = snippet[:min(len(snippet), 256)]
	res.RetryAfter = parseRetryAfter(string(resp.Header.Peek("Retry-After")), s.now())
	msg := fmt.Sprintf("HTTP %d", res.Status)
	if res.Status == http.StatusUnauthorized && tokens != nil {
		res.TokenRefused = true
		msg += " " + tokens.Rejected(bearer)
	}
	// One line, whatever the partner sent: it ends up in tables and logs.
	if body := printable(string(snippet)); body != "" {
		msg += ": " + body
	}
	res.Err = errors.New(msg)
	return res
}

// build makes hreq the attempt's signed POST: the destination's custom
// headers, then Rivora's own, which win over a custom one of the same
// name. It refuses a header HTTP cannot carry.
func (s *Sender) build(hreq *fasthttp.Request, req Request, ts int64, traceparent, tracestate, bearer string) error {
	ev := req.Event
	hreq.SetRequestURI(req.Endpoint.URL)
	hreq.Header.SetMethod(http.MethodPost)
	hreq.Header.DisableNormalizing()
	hreq.Header.SetNoDefaultContentType(true)
	for name, values := range req.Endpoint.Headers {
		if ownHeader(name, traceparent != "") || (bearer != "" && name == "Authorization") {
			continue
		}
		for _, v := range values {
			if err := checkHeader(name, v); err != nil {
				return err
			}
			hreq.Header.Add(name, v)
		}
	}
	own := [...][2]string{
		{"Content-Type", ev.GetContentType()},
		{"User-Agent", s.userAgent},
		{"Webhook-Id", ev.GetEventId()},
		// Marks the POST as safe to send again; the client does so on a
		// fresh connection when a pooled one turns out closed, instead of
		// failing the attempt (and cutting the destination's budget) for
		// nothing.
		{"Idempotency-Key", ev.GetEventId()},
		{"Webhook-Timestamp", strconv.FormatInt(ts, 10)},
		{"Rivora-Customer", ev.GetCustomerId()},
		{"Rivora-Lane", headerSafe(ev.GetLaneKey())},
		{"Rivora-Attempt", strconv.Itoa(req.Attempt)},
		{"Rivora-Event-Type", headerSafe(ev.GetType())},
	}
	for _, h := range own {
		if err := checkHeader(h[0], h[1]); err != nil {
			return err
		}
		hreq.Header.Set(h[0], h[1])
	}
	if err := signatureHeaders(hreq, req.Endpoint, ev, ts); err != nil {
		return err
	}
	if bearer != "" {
		hreq.Header.Set("Authorization", "Bearer "+bearer) // checked by send
	}
	if ev.GetReplayed() {
		hreq.Header.Set("Rivora-Replay", "true")
	}
	if of := ev.GetReplayOf(); of != "" {
		// The id an idempotency conflict's copy died under, replayed
		// under its own: it names the event the copy conflicted with.
		// It came through the archive, so it is checked as a header.
		if err := checkHeader("Rivora-Replay-Of", of); err != nil {
			return err
		}
		hreq.Header.Set("Rivora-Replay-Of", of)
	}
	if ev.GetResent() {
		hreq.Header.Set("Rivora-Resend", "1")
	}
	if traceparent != "" {
		for _, h := range [...][2]string{{tracing.TraceparentHeader, traceparent}, {tracing.TracestateHeader, tracestate}} {
			if h[1] == "" {
				continue
			}
			if err := checkHeader(h[0], h[1]); err != nil {
				return err
			}
			hreq.Header.Set(h[0], h[1])
		}
	}
	hreq.SetBodyRaw(ev.GetPayload())
	return nil
}

// signatureHeaders sets webhook-signature (unless the destination's
// legacy signature replaces it) and the legacy signature's header.
func signatureHeaders(hreq *fasthttp.Request, e destinations.Endpoint, ev *rivorav1.Event, ts int64) error {
	if !e.LegacyOnly {
		hreq.Header.Set("Webhook-Signature", e.Signer.Sign(ev.GetEventId(), ts, ev.GetPayload()))
	}
	if e.Legacy == nil {
		return nil
	}
	name, value := e.Legacy.Header(), e.Legacy.Sign(ev.GetEventId(), ts, ev.GetPayload())
	if err := checkHeader(name, value); err != nil {
		return err
	}
	hreq.Header.Set(name, value)
	return nil
}

// ownHeader reports a name Rivora sets itself (the trace context's when
// it sends one), or that HTTP/1.1 framing owns: a custom header of that
// name is left out.
func ownHeader(name string, traced bool) bool {
	switch name {
	case "Content-Type", "User-Agent", "Webhook-Id", "Idempotency-Key", "Webhook-Timestamp", "Webhook-Signature",
		"Rivora-Customer", "Rivora-Lane", "Rivora-Attempt", "Rivora-Event-Type", "Rivora-Replay", "Rivora-Resend",
		"Host", "Content-Length", "Transfer-Encoding", "Trailer":
		return true
	case tracing.TraceparentHeader, tracing.TracestateHeader:
		return traced
	}
	return false
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

// checkHeader applies the rule HTTP transports apply before they send a
// request (httpguts): a name is a token, a value has no control character
// but tab. It names the header, never its value (a custom header may hold
// a credential).
func checkHeader(name, value string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("header name %q is not a valid HTTP token", name)
	}
	if !httpguts.ValidHeaderFieldValue(value) {
		return fmt.Errorf("the %s header's value has a control character, which HTTP does not allow", name)
	}
	return nil
}

// client is the client of an attempt to u, and the fallback
// certificate's settings while a rotation's overlap lasts (nil: none).
func (s *Sender) client(u *url.URL, e destinations.Endpoint, now time.Time) (*fasthttp.Client, *destinations.ClientTLS) {
	switch {
	case u.Scheme != "https":
		return s.plain, nil
	case e.TLS == nil:
		return s.secure, nil
	}
	return s.withTLS.client(e.TLS, 0).client, e.TLS.FallbackAt(now)
}

// do sends hreq with client; a failure is the partner's TLS alert when
// one came on the connection the request went out on (resp keeps its
// addresses), and only then: never another attempt's, another
// destination's or another customer's alert.
func (s *Sender) do(client *fasthttp.Client, hreq *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	err := client.DoDeadline(hreq, resp, deadline)
	if err == nil {
		return nil
	}
	// Taken whatever the error, so that no alert outlives its attempt.
	if refused, found := s.refusals.take(resp.LocalAddr(), resp.RemoteAddr()); found && !refusedHandshake(err) {
		return refused
	}
	return err
}

// clientCertificateExpired reports when c's client certificate (its
// leaf) expired, if it has by now.
func clientCertificateExpired(c *destinations.ClientTLS, now time.Time) (time.Time, bool) {
	if c == nil || c.Certificate == nil || len(c.Certificate.Certificate) == 0 {
		return time.Time{}, false
	}
	leaf := c.Certificate.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.Certificate.Certificate[0]); err != nil {
			return time.Time{}, false
		}
	}
	return leaf.NotAfter, now.After(leaf.NotAfter)
}

func describeTransportError(err error, timeout time.Duration) error {
	if refusedHandshake(err) {
		// The cause first: a table cuts the end of a long error.
		return fmt.Errorf("TLS handshake refused by the partner: %w (check the destination's client certificate, --client-cert)", err)
	}
	var netErr net.Error
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrDialTimeout) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
		return fmt.Errorf("timeout after %s", timeout)
	}
	if cert := describeCertificateError(err); cert != "" {
		return &certificateError{text: cert, err: err}
	}
	return fmt.Errorf("connection error: %w", err)
}

// certificateError is a partner's certificate this agent does not accept,
// said in words with what to do (its cause kept for errors.As).
type certificateError struct {
	text string
	err  error
}

func (e *certificateError) Error() string { return e.text }
func (e *certificateError) Unwrap() error { return e.err }

// describeCertificateError says why the partner's certificate was not
// accepted and what fixes it, or "" when err is not about it. Its first
// clause, before ": ", is the cause in a few words (what `events get`
// shows as the summary).
func describeCertificateError(err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknown):
		issuer := "an unknown issuer"
		if unknown.Cert != nil {
			issuer = fmt.Sprintf("%q", printable(unknown.Cert.Issuer.String()))
		}
		return fmt.Sprintf("TLS certificate not trusted: the partner's is signed by %s, which this agent does not trust; if the partner uses a private CA, give the destination that CA (--server-ca), otherwise the partner must serve its full chain", issuer)
	case errors.As(err, &host):
		return fmt.Sprintf("TLS certificate for another host: the partner's is for %s, not %s; check the destination's URL", certificateNames(host.Certificate), printable(host.Host))
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired && invalid.Cert != nil:
		c := invalid.Cert
		return fmt.Sprintf("TLS certificate expired or not yet valid: %q in the partner's chain is valid from %s to %s; the partner must renew it (or this agent's clock is wrong)",
			printable(c.Subject.String()), c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
	case errors.As(err, &invalid):
		return "TLS certificate not valid: " + printable(invalid.Error())
	}
	return ""
}

// maxCertificateNames bounds the names certificateNames lists (a CDN's
// certificate may carry a hundred, and the text is stored with every
// attempt).
const maxCertificateNames = 5

// certificateNames lists a certificate's names (DNS, then IP), the first
// maxCertificateNames of them.
func certificateNames(c *x509.Certificate) string {
	var names []string
	if c != nil {
		names = append(names, c.DNSNames...)
		for _, ip := range c.IPAddresses {
			names = append(names, ip.String())
		}
	}
	switch {
	case len(names) == 0:
		return "no name"
	case len(names) > maxCertificateNames:
		return printable(strings.Join(names[:maxCertificateNames], ", ")) + fmt.Sprintf(" and %d more", len(names)-maxCertificateNames)
	}
	return printable(strings.Join(names, ", "))
}

// MaxRetryAfter bounds how long a partner's Retry-After holds its
// destination: as long as the longest retry backoff (retry.DefaultCap).
// A partner answering "come back tomorrow" would otherwise hold every
// lane for a day, or past its window (the events then die untried).
const MaxRetryAfter = time.Hour

// parseRetryAfter reads seconds or an HTTP date, at most MaxRetryAfter;
// 0 when absent or invalid.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	digits := strings.TrimSpace(v)
	if secs, err := strconv.ParseInt(digits, 10, 64); err == nil && secs > 0 {
		return time.Duration(min(secs, int64(MaxRetryAfter/time.Second))) * time.Second
	} else if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(digits, "-") {
		return MaxRetryAfter // more seconds than an int64 holds
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), MaxRetryAfter)
	}
	return 0
}

// printable is a partner's text as one line fit for a terminal, a log and
// a table: valid UTF-8, runs of white space one space, and every other
// control character (an ESC of a terminal escape sequence, say) or
// format character (U+202E, which reverses what follows it on screen; a
// zero-width space) a "?".
func printable(s string) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "?")), " ")
	return strings.Map(func(r rune) rune {
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			return '?'
		}
		return r
	}, s)
}
