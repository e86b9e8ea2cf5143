// Package sdk is the Go client customer apps use to talk to Rivora: publish
// events to an agent's ingest gateway (to a named destination, or fanned
// out to the customer's subscriptions: PublishResult), manage a customer's
// subscriptions (SubscriptionClient) and, on the receiving side, verify the
// signed webhooks Rivora delivers. It owns no state beyond its HTTP client
// and never logs; every failure is returned as an error carrying its Connect
// code (read it with connect.CodeOf).
package sdk

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk/eventid"
)

// Retry defaults: five tries spaced 100ms, 200ms, 400ms, 800ms (jittered).
const (
	DefaultMaxAttempts    = 5
	DefaultBaseBackoff    = 100 * time.Millisecond
	DefaultAttemptTimeout = 30 * time.Second
	maxBackoff            = 10 * time.Second
)

// Event is one event to publish.
type Event struct {
	// Destination is the registered destination id the event is delivered
	// to. Leave it empty to fan out: the event then goes to every active
	// subscription of Customer whose types (and filter) match Type, one
	// delivery (and event id) each; publish it with PublishResult to learn
	// them.
	Destination string
	// Subscription, instead of Destination, sends the event to that one
	// subscription of Customer (its destination, path, secret and headers)
	// whether or not its types and filter match: a test event.
	Subscription string
	// Customer is the tenant the event belongs to.
	Customer string
	// Lane orders events: events with the same (Destination, Customer, Lane)
	// are delivered one at a time, in acceptance order. Usually the end
	// user's id.
	Lane string
	// Type is the event type, e.g. "order.created".
	Type    string
	Payload []byte
	// ContentType defaults to application/json on the server, which does
	// not check that Payload is JSON (it costs a parse per event): a body
	// that is not JSON needs its own content type, or its receiver is
	// told it is JSON.
	ContentType string
	// IdempotencyKey names the event within its (Destination, Customer):
	// publishing the same key again within the server's dedup window
	// returns the same event id and stores nothing twice; the same key
	// with another payload, type, lane or content type is refused
	// (AlreadyExists). When empty, the client assigns a UUIDv7 before the
	// first try, so its own retries never store an event twice. Set it
	// yourself to make your own retries (say, after a crash) idempotent
	// too. The event id is EventID(Destination, Customer, key). A fan-out
	// is stored once per key: a retry stores nothing twice, whatever
	// subscriptions were created since.
	//
	// A key names one event forever: never reuse it for another. A reuse
	// with another payload is refused only within the dedup window (2
	// minutes by default); after it, it is stored under the same event id,
	// the webhook-id receivers dedupe on, and they drop it. Key each event
	// of an order on its own ("order-123:paid"). A key is 1 to 128 bytes
	// of letters, digits, '_', '-' and ':'.
	IdempotencyKey string
}

// Result is Rivora's answer to one published event.
type Result struct {
	// EventID is the stored event's id when the event named its
	// destination; empty for a fan-out (see Routes).
	EventID string
	// Duplicate is true when the event had already been accepted (same
	// idempotency key). That includes this call's own first try: when its
	// answer was lost (a connection reset) and the SDK tried again, the
	// retry finds the event the first try stored. Either way the event is
	// stored once.
	Duplicate bool
	// FannedOut is true when the event named no destination: Routes then
	// lists one delivery per matching subscription, and is empty when
	// none matched (not an error: nothing was stored).
	FannedOut bool
	Routes    []Route
}

// Route is one delivery a fan-out stored.
type Route struct {
	Subscription string
	Destination  string
	// EventID is this delivery's event id (for `rivoractl events get`).
	EventID string
}

// EventIDs are the ids of every delivery stored: the one event id of a
// destination-named event, or one per route of a fan-out.
func (r Result) EventIDs() []string {
	if !r.FannedOut {
		if r.EventID == "" {
			return nil
		}
		return []string{r.EventID}
	}
	ids := make([]string, len(r.Routes))
	for i, rt := range r.Routes {
		ids[i] = rt.EventID
	}
	return ids
}

func resultOf(resp *rivorav1.PublishResponse) Result {
	r := Result{EventID: resp.GetEventId(), Duplicate: resp.GetDuplicate(), FannedOut: resp.GetFannedOut()}
	for _, rt := range resp.GetRoutes() {
		r.Routes = append(r.Routes, Route{Subscription: rt.GetSubscriptionId(), Destination: rt.GetDestinationId(), EventID: rt.GetEventId()})
	}
	return r
}

// Client publishes events to Rivora. It is safe for concurrent use; create
// one per process and share it.
type Client struct {
	ingest rivorav1connect.IngestServiceClient
	cfg    config
}

type config struct {
	httpClient     *http.Client
	tlsConfig      *tls.Config
	token          string
	maxAttempts    int
	baseBackoff    time.Duration
	attemptTimeout time.Duration
	grpc           bool
	protoJSON      bool
	// unusable is why the base URL or the token cannot work (nil when
	// they can): every try answers it at once, as InvalidArgument, which
	// is not retried.
	unusable error
}

// Option configures a Client. Options are created only by this package's
// With… functions.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithHTTPClient makes the client send requests through hc instead of its
// default pooled client. With WithGRPC over plain http:// URLs, hc must speak
// HTTP/2 without TLS (h2c). hc wins over WithTLSConfig: its own transport
// decides how TLS is done, and the TLS config is not used.
func WithHTTPClient(hc *http.Client) Option {
	return optionFunc(func(c *config) { c.httpClient = hc })
}

// WithToken sends token (a publisher token, usually) on every call, as
// `Authorization: Bearer <token>`. Rivora refuses calls without one
// (Unauthenticated), and a publisher token publishes only for the customers
// it names (PermissionDenied otherwise). It works with WithHTTPClient too.
// Spaces and line breaks around the token are dropped (a token read from
// a file ends with one); a token with a control character inside makes
// every call fail with InvalidArgument.
func WithToken(token string) Option {
	return optionFunc(func(c *config) { c.token = strings.TrimSpace(token) })
}

// WithTLSConfig is how the default HTTP client verifies an https:// base
// URL: set RootCAs to trust a private CA, Certificates for a client
// certificate. HTTP/2 is negotiated over TLS (ALPN), as gRPC needs. Without
// it, the system's roots are trusted. Ignored with WithHTTPClient, whose
// transport decides.
func WithTLSConfig(cfg *tls.Config) Option {
	return optionFunc(func(c *config) { c.tlsConfig = cfg })
}

// WithRetry bounds retries: at most maxAttempts tries in all (values below 1
// mean 1, no retry), waiting baseBackoff, then twice that, and so on
// (jittered, capped at 10s) between tries. A baseBackoff of zero retries
// immediately. Retried are Unavailable (not a TLS setup that cannot
// succeed: an https:// URL for a plain-HTTP server, a certificate not
// trusted for the host), Aborted, DeadlineExceeded of one try
// (WithAttemptTimeout), ResourceExhausted (overload; not a request over
// one of the server's size limits — the message size, or what a fan-out
// would store — which would be refused again), and a connection that
// broke mid-call, reset or closed before the answer was whole (connect
// reports it as Canceled or Unknown); the
// caller's context ends all waiting, and nothing else is retried. When
// the tries run out, the error says how many were made and wraps the last
// one, whose code it keeps.
func WithRetry(maxAttempts int, baseBackoff time.Duration) Option {
	return optionFunc(func(c *config) {
		c.maxAttempts = max(maxAttempts, 1)
		c.baseBackoff = max(baseBackoff, 0)
	})
}

// WithAttemptTimeout bounds each try (default 30s), so a hung connection is
// retried rather than waited on until the caller's context ends. Zero means
// no bound beyond the caller's context.
func WithAttemptTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.attemptTimeout = max(d, 0) })
}

// WithGRPC speaks the gRPC protocol instead of Connect. For http:// base URLs
// the default HTTP client then uses HTTP/2 without TLS (h2c).
func WithGRPC() Option {
	return optionFunc(func(c *config) { c.grpc = true })
}

// WithProtoJSON encodes messages as JSON instead of binary protobuf: slower,
// but readable on the wire when debugging.
func WithProtoJSON() Option {
	return optionFunc(func(c *config) { c.protoJSON = true })
}

// New returns a client for the Rivora agent at baseURL, e.g.
// "http://127.0.0.1:7400" or "https://rivora.internal:7400".
func New(baseURL string, opts ...Option) *Client {
	cfg, baseURL := newConfig(baseURL, opts)
	return &Client{
		ingest: rivorav1connect.NewIngestServiceClient(cfg.httpClient, baseURL, cfg.connectOptions()...),
		cfg:    cfg,
	}
}

// newConfig applies opts over the defaults and fills in the HTTP client;
// it returns baseURL without trailing slashes.
func newConfig(baseURL string, opts []Option) (config, string) {
	cfg := config{
		maxAttempts:    DefaultMaxAttempts,
		baseBackoff:    DefaultBaseBackoff,
		attemptTimeout: DefaultAttemptTimeout,
	}
	for _, o := range opts {
		if o != nil { // an option left unset by an if
			o.apply(&cfg)
		}
	}
	baseURL = strings.TrimRight(baseURL, "/")
	cfg.unusable = checkBaseURL(baseURL)
	if cfg.unusable == nil {
		cfg.unusable = checkToken(cfg.token)
	}
	if cfg.httpClient == nil {
		cfg.httpClient = defaultHTTPClient(cfg.grpc && strings.HasPrefix(baseURL, "http://"), cfg.tlsConfig)
	}
	return cfg, baseURL
}

// connectOptions are what every Connect client of the SDK is built with:
// the token, the trace context, the protocol and codec chosen.
func (cfg config) connectOptions() []connect.ClientOption {
	copts := []connect.ClientOption{connect.WithInterceptors(validUTF8(), bearer(cfg.token), traceContext())}
	if cfg.grpc {
		copts = append(copts, connect.WithGRPC())
	}
	if cfg.protoJSON {
		copts = append(copts, connect.WithProtoJSON())
	}
	return copts
}

// defaultHTTPClient keeps many idle connections per host: an app publishing
// from many goroutines talks to one agent, and the standard default of two
// idle connections per host would reopen connections constantly.
func defaultHTTPClient(h2c bool, tlsConfig *tls.Config) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 512
	t.IdleConnTimeout = 90 * time.Second
	if tlsConfig != nil {
		// A custom TLS config turns off net/http's automatic HTTP/2 unless
		// asked for; the clone keeps the caller's config unshared.
		t.TLSClientConfig = tlsConfig.Clone()
		t.ForceAttemptHTTP2 = true
	}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		t.Protocols = &p
	}
	return &http.Client{Transport: t}
}

// Publish accepts one event and returns its id. For an event that names
// its Destination, a nil error means the event is durably stored by
// Rivora. For an event that fans out (no Destination) the id is empty and
// a nil error means every delivery to a matching subscription is stored,
// which may be none: use PublishResult, which lists them with their ids.
// An event whose string fields are not all valid UTF-8 is refused before
// sending, as invalid_argument naming the field (in a batch, InvalidEvent
// gives its index).
func (c *Client) Publish(ctx context.Context, e Event) (string, error) {
	r, err := c.PublishResult(ctx, e)
	if err != nil {
		return "", err
	}
	return r.EventID, nil
}

// PublishResult accepts one event and returns Rivora's whole answer: for an
// event without Destination, the subscriptions it was routed to, each with
// its own event id (none matching is not an error). A nil error means
// every delivery listed is durably stored.
func (c *Client) PublishResult(ctx context.Context, e Event) (Result, error) {
	if err := checkUTF8(e); err != nil {
		return Result{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("rivora publish: %w", err))
	}
	req, err := keyedRequest(e)
	if err != nil {
		return Result{}, err
	}
	var resp *rivorav1.PublishResponse
	err = c.cfg.retry(ctx, func(ctx context.Context) error {
		r, err := c.ingest.Publish(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		resp = r.Msg
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("rivora publish: %w", err)
	}
	if req.GetDestinationId() != "" && resp.GetEventId() == "" {
		// A Rivora agent always names the event it stored (or found).
		return Result{}, connect.NewError(connect.CodeInternal, fmt.Errorf("rivora publish: the server answered without the event's id (not a Rivora agent, or a proxy emptied its answer): whether it was stored is unknown; publishing it again with idempotency key %q is safe", req.GetIdempotencyKey()))
	}
	return resultOf(resp), nil
}

// PublishBatch accepts events all or nothing: when one is invalid, none is
// stored and the error names its index (InvalidEvent reads it; KeyReused
// for a reused key's). eventIDs[i] is the id of events[i]
// ("" for an event that fans out: use PublishBatchResults). An empty batch
// sends nothing and returns no ids.
func (c *Client) PublishBatch(ctx context.Context, events []Event) ([]string, error) {
	results, err := c.PublishBatchResults(ctx, events)
	if err != nil || results == nil {
		return nil, err
	}
	ids := make([]string, len(results))
	for i, r := range results {
		ids[i] = r.EventID
	}
	return ids, nil
}

// PublishBatchResults is PublishBatch returning Rivora's whole answer per
// event: results[i] is the answer for events[i], with the routes of an
// event that fans out.
func (c *Client) PublishBatchResults(ctx context.Context, events []Event) ([]Result, error) {
	if len(events) == 0 {
		return nil, nil
	}
	batch := &rivorav1.PublishBatchRequest{Events: make([]*rivorav1.PublishRequest, len(events))}
	for i, e := range events {
		if err := checkUTF8(e); err != nil {
			return nil, invalidInBatch(err, i)
		}
		req, err := keyedRequest(e)
		if err != nil {
			return nil, err
		}
		batch.Events[i] = req
	}
	var resp *rivorav1.PublishBatchResponse
	err := c.cfg.retry(ctx, func(ctx context.Context) error {
		r, err := c.ingest.PublishBatch(ctx, connect.NewRequest(batch))
		if err != nil {
			return err
		}
		resp = r.Msg
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rivora publish batch: %w", err)
	}
	return batchResults(resp, len(events))
}

// batchResults reads a batch answer: per-event results when the server
// sends them, else (a server from before fan-out) the event ids alone.
func batchResults(resp *rivorav1.PublishBatchResponse, n int) ([]Result, error) {
	results := make([]Result, n)
	switch {
	case len(resp.GetResults()) == n:
		for i, r := range resp.GetResults() {
			results[i] = resultOf(r)
		}
	case len(resp.GetResults()) == 0 && len(resp.GetEventIds()) == n:
		for i, id := range resp.GetEventIds() {
			results[i] = Result{EventID: id}
		}
	default:
		return nil, connect.NewError(connect.CodeInternal,
			fmt.Errorf("rivora publish batch: server answered %d ids and %d results for %d events", len(resp.GetEventIds()), len(resp.GetResults()), n))
	}
	return results, nil
}

// keyedRequest is e as a request, with an idempotency key assigned before
// the first try when e has none, so the client's own retries never store
// an event (or a fan-out) twice.
func keyedRequest(e Event) (*rivorav1.PublishRequest, error) {
	req := toRequest(e)
	if req.IdempotencyKey == "" {
		key, err := newKey()
		if err != nil {
			return nil, err
		}
		req.IdempotencyKey = key
	}
	return req, nil
}

// checkUTF8 names a string field of e that is not valid UTF-8: protobuf
// cannot encode it, and marshalling would fail with an internal error that
// names no field. The callers refuse it as invalid_argument.
func checkUTF8(e Event) error {
	fields := []struct{ name, value string }{
		{"Destination", e.Destination},
		{"Subscription", e.Subscription},
		{"Customer", e.Customer},
		{"Lane", e.Lane},
		{"Type", e.Type},
		{"ContentType", e.ContentType},
		{"IdempotencyKey", e.IdempotencyKey},
	}
	for _, f := range fields {
		if !utf8.ValidString(f.value) {
			return fmt.Errorf("event %s %q is not valid UTF-8", f.name, f.value)
		}
	}
	return nil
}

// invalidInBatch is err, the refusal of events[i] before sending, as the
// server words and marks a batch's invalid event: InvalidEvent reads i.
func invalidInBatch(err error, i int) error {
	ce := connect.NewError(connect.CodeInvalidArgument,
		fmt.Errorf("rivora publish batch: events[%d]: %w (nothing in this batch was stored)", i, err))
	detail, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{
		Reason:   invalidEventReason,
		Domain:   errorDomain,
		Metadata: map[string]string{"index": strconv.Itoa(i)},
	})
	if derr == nil {
		ce.AddDetail(detail)
	}
	return ce
}

func toRequest(e Event) *rivorav1.PublishRequest {
	return &rivorav1.PublishRequest{
		DestinationId:  e.Destination,
		SubscriptionId: e.Subscription,
		CustomerId:     e.Customer,
		LaneKey:        e.Lane,
		Type:           e.Type,
		Payload:        e.Payload,
		ContentType:    e.ContentType,
		IdempotencyKey: e.IdempotencyKey,
	}
}

func newKey() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", connect.NewError(connect.CodeInternal, fmt.Errorf("rivora: assign idempotency key: %w", err))
	}
	return id.String(), nil
}

// checkBaseURL tells why baseURL cannot reach a Rivora server: it must be
// http:// or https:// with a host ("127.0.0.1:7400" alone is not).
func checkBaseURL(baseURL string) error {
	u, err := url.Parse(baseURL)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return nil
	}
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("rivora: base URL %q: want http://HOST:PORT or https://HOST:PORT", baseURL))
}

// checkToken refuses a token no HTTP header can carry: net/http would
// refuse every request, which reads as the server being unavailable.
func checkToken(token string) error {
	for _, c := range token {
		if c < ' ' || c == 0x7f {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("rivora: the token holds a control character (%q): check how it was read", c))
		}
	}
	return nil
}

// retry runs call until it succeeds, fails for good, runs out of attempts or
// ctx ends. Every try sends the same request, so the idempotency key set
// before the first try makes a retry of an already stored event harmless.
func (cfg *config) retry(ctx context.Context, call func(context.Context) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = cfg.try(ctx, call)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !retryable(err) {
			return err
		}
		if attempt >= cfg.maxAttempts {
			if attempt == 1 {
				return err
			}
			// Wrapped, not replaced: the code, the details and
			// errors.Is/As still reach the last try's error.
			return fmt.Errorf("gave up retrying (after %d attempts; last error: %w)", attempt, err)
		}
		if wait := cfg.backoff(attempt); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return connect.NewError(contextCode(ctx.Err()),
					fmt.Errorf("%w while waiting to retry (after %d attempts; last error: %v)", ctx.Err(), attempt, err))
			case <-t.C:
			}
		}
	}
}

func (cfg *config) try(ctx context.Context, call func(context.Context) error) error {
	if cfg.unusable != nil {
		return cfg.unusable // invalid_argument: never retried
	}
	if cfg.maxAttempts == 0 {
		// A zero Client (or SubscriptionClient): not made by New.
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("rivora: the client was not made by sdk.New (or sdk.NewSubscriptionClient)"))
	}
	if cfg.attemptTimeout <= 0 {
		return call(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.attemptTimeout)
	defer cancel()
	return call(ctx)
}

// backoff returns the wait after the given failed attempt: exponential, with
// "equal jitter" (half fixed, half random) so that many clients failing
// together do not retry together.
func (cfg *config) backoff(attempt int) time.Duration {
	d := cfg.baseBackoff
	if d <= 0 {
		return 0
	}
	ceiling := max(maxBackoff, d)
	for i := 1; i < attempt && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	half := d / 2
	return half + rand.N(d-half+1)
}

// tooLarge tells a request refused for its size, which sent again is
// refused again, from back-pressure (--max-inflight-requests, an edge's
// full buffer), which a retry after a wait may get through: all answer
// resource_exhausted. Rivora's own size refusals (a fan-out that would
// store too much) say so in an ErrorInfo; connect's read limit and
// net/http's body limit (MaxBytesReader), which answer before Rivora's
// code runs, only in their messages.
func tooLarge(err error) bool {
	if errorInfo(err, requestTooLargeReason) != nil {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "larger than configured max") || strings.Contains(msg, "request body too large") || strings.Contains(msg, "MaxBytesReader limit")
}

func contextCode(err error) connect.Code {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeCanceled
}

func retryable(err error) bool {
	if misconfigured(err) {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeResourceExhausted:
		// The server's overload, but not a request over its size limit:
		// sent again, it is refused again.
		return !tooLarge(err)
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeAborted:
		return true
	case connect.CodeCanceled:
		// connect-go reports a connection reset or broken pipe (the server
		// died mid-call) as Canceled; the caller's own cancellation is
		// checked before retrying, so what is left is a transport failure.
		return true
	case connect.CodeUnknown:
		// A connection reset mid-answer can surface without a code; so can
		// a connection closed cleanly mid-answer (headers sent, body cut
		// short: an unexpected EOF). Both are transport failures like any
		// other; the event may be stored, but the retry carries the same
		// idempotency key, so retrying is safe.
		// A gRPC answer without its status trailer (a proxy that drops
		// trailers) is a protocol error that every try meets again.
		var netErr net.Error
		return errors.As(err, &netErr) ||
			((errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)) && !strings.Contains(err.Error(), "trailer"))
	default:
		return false
	}
}

// misconfigured tells a failure to set up the connection that the same
// connection set up again meets again, however long the wait: an https://
// URL for a server that speaks plain HTTP (or not TLS at all), or a
// certificate this client does not trust for this host. connect answers
// them Unavailable, as it does a server that is down.
func misconfigured(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verification     *tls.CertificateVerificationError
		recordHeader     tls.RecordHeaderError
	)
	return errors.Is(err, http.ErrSchemeMismatch) ||
		errors.As(err, &unknownAuthority) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &verification) ||
		errors.As(err, &recordHeader)
}

// KeyReused tells an already_exists answer to a publish that reused an
// idempotency key for another event (another payload, type, lane or
// content type) within the dedup window, and names the event the key
// already names. index is the refused event's place in a PublishBatch
// (-1 for a single Publish). ok is false for any other error. A fan-out's
// reused key (a publish without Destination) names no single original:
// ok is false there too; its message says what happened.
func KeyReused(err error) (originalEventID string, index int, ok bool) {
	if connect.CodeOf(err) != connect.CodeAlreadyExists {
		return "", 0, false
	}
	info := errorInfo(err, keyReusedReason)
	if info == nil {
		return "", 0, false
	}
	index = -1
	if s, found := info.GetMetadata()["index"]; found {
		if n, perr := strconv.Atoi(s); perr == nil {
			index = n
		}
	}
	return info.GetMetadata()["original_event_id"], index, true
}

// errorInfo is the ErrorInfo detail of Rivora's domain with this reason
// that err (a Connect error, wrapped or not) carries, or nil.
func errorInfo(err error, reason string) *errdetails.ErrorInfo {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		info, isInfo := v.(*errdetails.ErrorInfo)
		if derr == nil && isInfo && info.GetReason() == reason && info.GetDomain() == errorDomain {
			return info
		}
	}
	return nil
}

// The ErrorInfo reasons Rivora's answers carry: agent/ingest's
// KeyReusedReason (a conflict), RequestTooLargeReason (a request refused
// for its size) and InvalidEventReason (a batch's invalid event), edge's
// BufferFullReason (an edge's full buffer) and BufferTooOldReason (an
// edge's buffer over --buffer-max-age), in internal/errkind.Domain
// (agent's idempotency tests read the agent's answers with KeyReused).
const (
	keyReusedReason        = "IDEMPOTENCY_KEY_REUSED"
	requestTooLargeReason  = "REQUEST_TOO_LARGE"
	invalidEventReason     = "INVALID_EVENT"
	edgeBufferFullReason   = "EDGE_BUFFER_FULL"
	edgeBufferTooOldReason = "EDGE_BUFFER_TOO_OLD"
	errorDomain            = "rivora.dev"
)

// EdgeBufferFull tells the resource_exhausted answer of an edge whose
// buffer has no room for the request, and names the edge. Nothing of it
// was stored unless the answer says its events may have been (the store
// itself found the buffer full part-way): retrying with the same
// idempotency keys is safe either way. It is back-pressure, retried like any other, but it
// lasts: the edge takes events again only as the cell takes its buffer,
// which needs its link to the cell. When the tries run out, publish to
// the cell instead, or hold the events. ok is false for any other error
// (an agent's or an edge's ordinary overload included).
func EdgeBufferFull(err error) (edge string, ok bool) {
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		return "", false
	}
	info := errorInfo(err, edgeBufferFullReason)
	if info == nil {
		return "", false
	}
	return info.GetMetadata()["edge"], true
}

// EdgeBufferTooOld tells the resource_exhausted answer of an edge that
// takes no more events because the oldest its buffer has not forwarded
// is older than its --buffer-max-age, and names the edge. Nothing of the
// request was stored. Like EdgeBufferFull it is back-pressure, retried
// like any other, that lasts: the edge takes events again only once the
// cell has taken its oldest, which needs its link to the cell. When the
// tries run out, publish to the cell instead, or hold the events. ok is
// false for any other error.
func EdgeBufferTooOld(err error) (edge string, ok bool) {
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		return "", false
	}
	info := errorInfo(err, edgeBufferTooOldReason)
	if info == nil {
		return "", false
	}
	return info.GetMetadata()["edge"], true
}

// EventID is the id Rivora gives an event published with an idempotency
// key: a function of the destination, the customer and the key, so a
// publisher knows it before publishing (to store it beside its own
// record, say) and two customers' same key are two events. For a UUIDv7
// key it is a UUIDv7 with the key's time.
func EventID(destination, customer, idempotencyKey string) string {
	return eventid.FromKey(destination, customer, idempotencyKey)
}

// SubscriptionEventID is the id of the delivery a publish without a
// destination (a fan-out) with an idempotency key stores for one
// subscription: a function of the subscription, the customer and the key,
// so a retry gets the same ids and a publisher can compute them from the
// routes it is answered with. It never equals an EventID.
func SubscriptionEventID(subscription, customer, idempotencyKey string) string {
	return eventid.ForSubscription(subscription, customer, idempotencyKey)
}

// bearer sends token as the Authorization bearer of every call ("": none).
func bearer(token string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if token != "" && req.Spec().IsClient {
				req.Header().Set("Authorization", "Bearer "+token)
			}
			return next(ctx, req)
		}
	}
}

// InvalidEvent tells an invalid_argument answer to a PublishBatch refused
// for one of its events (nothing of the batch was stored), and gives the
// event's place in the batch; the error's message says what is wrong
// with it. ok is false for any other error.
func InvalidEvent(err error) (index int, ok bool) {
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		return 0, false
	}
	info := errorInfo(err, invalidEventReason)
	if info == nil {
		return 0, false
	}
	n, perr := strconv.Atoi(info.GetMetadata()["index"])
	if perr != nil || n < 0 {
		return 0, false
	}
	return n, true
}
