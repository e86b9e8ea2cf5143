package sdk_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
)

// ingestServer is a real IngestService over HTTP. fail decides, per call
// (numbered from 1), whether the call fails and how; a call that does not
// fail answers "answer-<call>" (or one such id per event of a batch).
type ingestServer struct {
	rivorav1connect.UnimplementedIngestServiceHandler

	fail func(ctx context.Context, call int) error

	mu           sync.Mutex
	calls        int
	keys         [][]string // idempotency keys of each call, in call order
	requests     []*rivorav1.PublishRequest
	contentTypes []string
}

func (s *ingestServer) record(keys []string, reqs ...*rivorav1.PublishRequest) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.keys = append(s.keys, keys)
	s.requests = append(s.requests, reqs...)
	return s.calls
}

func (s *ingestServer) Publish(ctx context.Context, req *connect.Request[rivorav1.PublishRequest]) (*connect.Response[rivorav1.PublishResponse], error) {
	call := s.record([]string{req.Msg.GetIdempotencyKey()}, req.Msg)
	if s.fail != nil {
		if err := s.fail(ctx, call); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&rivorav1.PublishResponse{EventId: fmt.Sprintf("answer-%d", call)}), nil
}

func (s *ingestServer) PublishBatch(ctx context.Context, req *connect.Request[rivorav1.PublishBatchRequest]) (*connect.Response[rivorav1.PublishBatchResponse], error) {
	var keys []string
	for _, e := range req.Msg.GetEvents() {
		keys = append(keys, e.GetIdempotencyKey())
	}
	call := s.record(keys, req.Msg.GetEvents()...)
	if s.fail != nil {
		if err := s.fail(ctx, call); err != nil {
			return nil, err
		}
	}
	ids := make([]string, len(keys))
	for i := range ids {
		ids[i] = fmt.Sprintf("answer-%d-%d", call, i)
	}
	return connect.NewResponse(&rivorav1.PublishBatchResponse{EventIds: ids}), nil
}

func (s *ingestServer) snapshot() (calls int, keys [][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, append([][]string(nil), s.keys...)
}

func (s *ingestServer) handler() http.Handler {
	mux := http.NewServeMux()
	path, h := rivorav1connect.NewIngestServiceHandler(s)
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.contentTypes = append(s.contentTypes, r.Header.Get("Content-Type"))
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	return mux
}

func startIngest(t *testing.T, s *ingestServer) string {
	t.Helper()
	ts := httptest.NewServer(s.handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

func failFirst(n int, code connect.Code) func(context.Context, int) error {
	return func(_ context.Context, call int) error {
		if call <= n {
			return connect.NewError(code, fmt.Errorf("injected failure %d", call))
		}
		return nil
	}
}

var testEvent = sdk.Event{
	Destination: "orders",
	Customer:    "acme",
	Lane:        "user-42",
	Type:        "order.created",
	Payload:     []byte(`{"order":1}`),
}

func fastRetry() sdk.Option { return sdk.WithRetry(5, time.Millisecond) }

func TestPublishRetriesUnavailableWithSameKey(t *testing.T) {
	srv := &ingestServer{fail: failFirst(1, connect.CodeUnavailable)}
	c := sdk.New(startIngest(t, srv), fastRetry())

	id, err := c.Publish(t.Context(), testEvent)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if id != "answer-2" {
		t.Fatalf("Publish id = %q, want the second answer %q", id, "answer-2")
	}
	calls, keys := srv.snapshot()
	if calls != 2 {
		t.Fatalf("server saw %d calls, want 2", calls)
	}
	if keys[0][0] == "" || keys[0][0] != keys[1][0] {
		t.Fatalf("idempotency keys = %q then %q, want the same non-empty key twice", keys[0][0], keys[1][0])
	}
	k, err := uuid.Parse(keys[0][0])
	if err != nil || k.Version() != 7 {
		t.Fatalf("assigned key %q is not a UUIDv7 (err %v)", keys[0][0], err)
	}
	got := srv.requests[1]
	if got.GetDestinationId() != "orders" || got.GetCustomerId() != "acme" || got.GetLaneKey() != "user-42" ||
		got.GetType() != "order.created" || string(got.GetPayload()) != `{"order":1}` {
		t.Fatalf("server received %v, want the published event", got)
	}
}

func TestPublishKeepsCallerKey(t *testing.T) {
	srv := &ingestServer{fail: failFirst(2, connect.CodeUnavailable)}
	c := sdk.New(startIngest(t, srv), fastRetry())
	e := testEvent
	e.IdempotencyKey = "order-1-created"
	if _, err := c.Publish(t.Context(), e); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	_, keys := srv.snapshot()
	for i, k := range keys {
		if k[0] != "order-1-created" {
			t.Fatalf("call %d carried key %q, want the caller's key", i+1, k[0])
		}
	}
	if len(keys) != 3 {
		t.Fatalf("server saw %d calls, want 3", len(keys))
	}
}

func TestPublishDistinctEventsGetDistinctKeys(t *testing.T) {
	srv := &ingestServer{}
	c := sdk.New(startIngest(t, srv))
	for range 3 {
		if _, err := c.Publish(t.Context(), testEvent); err != nil {
			t.Fatal(err)
		}
	}
	_, keys := srv.snapshot()
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k[0]] {
			t.Fatalf("key %q assigned to two different Publish calls", k[0])
		}
		seen[k[0]] = true
	}
}

func TestPublishDoesNotRetryPermanentErrors(t *testing.T) {
	for _, code := range []connect.Code{connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeFailedPrecondition} {
		t.Run(code.String(), func(t *testing.T) {
			srv := &ingestServer{fail: failFirst(1, code)}
			c := sdk.New(startIngest(t, srv), fastRetry())
			_, err := c.Publish(t.Context(), testEvent)
			if got := connect.CodeOf(err); got != code {
				t.Fatalf("error code = %v (%v), want %v", got, err, code)
			}
			if calls, _ := srv.snapshot(); calls != 1 {
				t.Fatalf("server saw %d calls, want 1 (no retry)", calls)
			}
		})
	}
}

func TestPublishGivesUpAfterMaxAttempts(t *testing.T) {
	srv := &ingestServer{fail: failFirst(100, connect.CodeUnavailable)}
	c := sdk.New(startIngest(t, srv), sdk.WithRetry(3, time.Millisecond))
	_, err := c.Publish(t.Context(), testEvent)
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("error = %v, want code Unavailable", err)
	}
	if calls, _ := srv.snapshot(); calls != 3 {
		t.Fatalf("server saw %d calls, want 3", calls)
	}
	if !strings.Contains(err.Error(), "(after 3 attempts; last error: unavailable: injected failure 3)") {
		t.Fatalf("error = %v, want it to say the tries were used up and the last one's error", err)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Message() != "injected failure 3" {
		t.Fatalf("error = %v, want it to wrap the last try's connect error", err)
	}
}

// A TLS setup that cannot succeed fails the same way on every try: it is
// answered at once, not after the back-off of five tries.
func TestPublishDoesNotRetryTLSMisconfiguration(t *testing.T) {
	srv := &ingestServer{}
	plain := httptest.NewServer(srv.handler())
	t.Cleanup(plain.Close)
	untrusted := httptest.NewTLSServer(srv.handler())
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	t.Cleanup(untrusted.Close)
	wrongHost := httptest.NewTLSServer(srv.handler())
	wrongHost.Config.ErrorLog = log.New(io.Discard, "", 0)
	t.Cleanup(wrongHost.Close)
	notHTTP, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { notHTTP.Close() })
	go func() {
		for {
			conn, err := notHTTP.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
			conn.Close()
		}
	}()

	for _, tc := range []struct {
		name, url string
		tls       *tls.Config
		want      func(error) bool
	}{
		{"https to plain HTTP", strings.Replace(plain.URL, "http://", "https://", 1), nil,
			func(err error) bool { return errors.Is(err, http.ErrSchemeMismatch) }},
		{"unknown authority", untrusted.URL, nil,
			func(err error) bool { var e x509.UnknownAuthorityError; return errors.As(err, &e) }},
		{"wrong host", wrongHost.URL, &tls.Config{RootCAs: rootsOf(wrongHost), ServerName: "rivora.invalid"},
			func(err error) bool { var e x509.HostnameError; return errors.As(err, &e) }},
		{"not TLS", "https://" + notHTTP.Addr().String(), nil,
			func(err error) bool { var e tls.RecordHeaderError; return errors.As(err, &e) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := srv.snapshot()
			var tries atomic.Int32
			c := sdk.New(tc.url, sdk.WithRetry(5, time.Millisecond), sdk.WithHTTPClient(countingClient(&tries, tc.tls)))
			_, err := c.Publish(t.Context(), testEvent)
			if connect.CodeOf(err) != connect.CodeUnavailable || !tc.want(err) {
				t.Fatalf("error = %v, want code Unavailable wrapping the TLS failure", err)
			}
			if n := tries.Load(); n != 1 {
				t.Fatalf("%d tries, want 1 (a retry meets the same failure)", n)
			}
			if strings.Contains(err.Error(), "attempts") {
				t.Fatalf("error = %v, want no attempt count after a single try", err)
			}
			if after, _ := srv.snapshot(); after != before {
				t.Fatalf("the service saw a call through a failed TLS setup")
			}
		})
	}
}

func rootsOf(ts *httptest.Server) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	return pool
}

// countingClient is an HTTP client with these TLS settings (nil: the
// system's roots) that counts its round trips.
func countingClient(n *atomic.Int32, cfg *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		n.Add(1)
		return tr.RoundTrip(r)
	})}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestPublishStopsWaitingWhenContextEnds(t *testing.T) {
	srv := &ingestServer{fail: failFirst(100, connect.CodeUnavailable)}
	c := sdk.New(startIngest(t, srv), sdk.WithRetry(5, time.Hour))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, testEvent)
		done <- err
	}()
	// Wait until the first try has failed, then cancel during the backoff.
	for {
		if calls, _ := srv.snapshot(); calls >= 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	err := <-done
	if connect.CodeOf(err) != connect.CodeCanceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want code Canceled wrapping context.Canceled", err)
	}
	if calls, _ := srv.snapshot(); calls != 1 {
		t.Fatalf("server saw %d calls, want 1", calls)
	}
}

func TestPublishRetriesHungAttempt(t *testing.T) {
	srv := &ingestServer{fail: func(ctx context.Context, call int) error {
		if call == 1 {
			<-ctx.Done() // hang until the client gives up on this try
			return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
		}
		return nil
	}}
	c := sdk.New(startIngest(t, srv), fastRetry(), sdk.WithAttemptTimeout(50*time.Millisecond))
	id, err := c.Publish(t.Context(), testEvent)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if id != "answer-2" {
		t.Fatalf("id = %q, want answer-2", id)
	}
	_, keys := srv.snapshot()
	if keys[0][0] != keys[1][0] {
		t.Fatalf("keys differ across tries: %q, %q", keys[0][0], keys[1][0])
	}
}

func TestPublishRetriesDroppedConnection(t *testing.T) {
	srv := &ingestServer{}
	var once sync.Once
	inner := srv.handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dropped := false
		once.Do(func() {
			// Drop the connection without an answer, as a crashing
			// proxy or agent would.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
			dropped = true
		})
		if !dropped {
			inner.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(ts.Close)

	c := sdk.New(ts.URL, fastRetry())
	id, err := c.Publish(t.Context(), testEvent)
	if err != nil {
		t.Fatalf("Publish after a dropped connection: %v", err)
	}
	if id != "answer-1" {
		t.Fatalf("id = %q, want answer-1 (the first call that reached the service)", id)
	}
}

func TestPublishUnreachableIsUnavailable(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close() // nothing listens there any more
	c := sdk.New(url, sdk.WithRetry(2, time.Millisecond))
	_, err := c.Publish(t.Context(), testEvent)
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("error = %v, want code Unavailable", err)
	}
	// Nothing listening may change (a server starting): retried, and said.
	var opErr *net.OpError
	if !strings.Contains(err.Error(), "(after 2 attempts; last error: unavailable: ") || !errors.As(err, &opErr) {
		t.Fatalf("error = %v, want the attempt count and the dial error wrapped", err)
	}
}

func TestPublishBatchRetriesWithSameKeys(t *testing.T) {
	srv := &ingestServer{fail: failFirst(1, connect.CodeUnavailable)}
	c := sdk.New(startIngest(t, srv), fastRetry())
	events := []sdk.Event{testEvent, testEvent, testEvent}
	events[1].IdempotencyKey = "mine"
	ids, err := c.PublishBatch(t.Context(), events)
	if err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	want := []string{"answer-2-0", "answer-2-1", "answer-2-2"}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("ids = %v, want %v", ids, want)
	}
	_, keys := srv.snapshot()
	if len(keys) != 2 {
		t.Fatalf("server saw %d calls, want 2", len(keys))
	}
	if fmt.Sprint(keys[0]) != fmt.Sprint(keys[1]) {
		t.Fatalf("keys changed across retries: %v then %v", keys[0], keys[1])
	}
	if keys[0][1] != "mine" || keys[0][0] == "" || keys[0][2] == "" || keys[0][0] == keys[0][2] {
		t.Fatalf("keys = %v, want distinct assigned keys around the caller's \"mine\"", keys[0])
	}
	if events[0].IdempotencyKey != "" {
		t.Fatalf("PublishBatch modified the caller's events")
	}
}

func TestPublishBatchEmptySendsNothing(t *testing.T) {
	srv := &ingestServer{}
	c := sdk.New(startIngest(t, srv))
	ids, err := c.PublishBatch(t.Context(), nil)
	if err != nil || ids != nil {
		t.Fatalf("PublishBatch(nil) = %v, %v; want nil, nil", ids, err)
	}
	if calls, _ := srv.snapshot(); calls != 0 {
		t.Fatalf("server saw %d calls, want 0", calls)
	}
}

func TestPublishBatchInvalidNotRetried(t *testing.T) {
	srv := &ingestServer{fail: failFirst(1, connect.CodeInvalidArgument)}
	c := sdk.New(startIngest(t, srv), fastRetry())
	_, err := c.PublishBatch(t.Context(), []sdk.Event{testEvent})
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("error = %v, want InvalidArgument", err)
	}
	if calls, _ := srv.snapshot(); calls != 1 {
		t.Fatalf("server saw %d calls, want 1", calls)
	}
}

func TestPublishCodecs(t *testing.T) {
	tests := []struct {
		name string
		opts []sdk.Option
		want string
	}{
		{"default binary protobuf", nil, "application/proto"},
		{"proto JSON", []sdk.Option{sdk.WithProtoJSON()}, "application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &ingestServer{}
			c := sdk.New(startIngest(t, srv), tt.opts...)
			if _, err := c.Publish(t.Context(), testEvent); err != nil {
				t.Fatal(err)
			}
			if srv.contentTypes[0] != tt.want {
				t.Fatalf("Content-Type = %q, want %q", srv.contentTypes[0], tt.want)
			}
		})
	}
}

func TestPublishGRPCOverH2C(t *testing.T) {
	srv := &ingestServer{fail: failFirst(1, connect.CodeUnavailable)}
	ts := httptest.NewUnstartedServer(srv.handler())
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	ts.Config.Protocols = &p
	ts.Start()
	t.Cleanup(ts.Close)

	c := sdk.New(ts.URL, sdk.WithGRPC(), fastRetry())
	id, err := c.Publish(t.Context(), testEvent)
	if err != nil {
		t.Fatalf("Publish over gRPC: %v", err)
	}
	if id != "answer-2" {
		t.Fatalf("id = %q, want answer-2", id)
	}
	if srv.contentTypes[0] != "application/grpc" && srv.contentTypes[0] != "application/grpc+proto" {
		t.Fatalf("Content-Type = %q, want gRPC", srv.contentTypes[0])
	}
	_, keys := srv.snapshot()
	if keys[0][0] != keys[1][0] {
		t.Fatalf("keys differ across gRPC retries")
	}
}

func TestPublishConcurrent(t *testing.T) {
	srv := &ingestServer{}
	c := sdk.New(startIngest(t, srv))
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			if _, err := c.Publish(t.Context(), testEvent); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Publish: %v", err)
	}
	if calls, _ := srv.snapshot(); calls != n {
		t.Fatalf("server saw %d calls, want %d", calls, n)
	}
}

// A batch over the server's size limit is refused (connect answers
// resource_exhausted, as for an overloaded server) and not sent again:
// it would be refused again.
func TestPublishBatchTooLargeNotRetried(t *testing.T) {
	var requests atomic.Int32
	srv := &ingestServer{}
	path, h := rivorav1connect.NewIngestServiceHandler(srv, connect.WithReadMaxBytes(1024))
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	big := testEvent
	big.Payload = []byte(`"` + strings.Repeat("x", 4096) + `"`)
	_, err := sdk.New(ts.URL, fastRetry()).PublishBatch(t.Context(), []sdk.Event{big, big})
	if connect.CodeOf(err) != connect.CodeResourceExhausted || requests.Load() != 1 {
		t.Fatalf("over-size batch: %v after %d requests; want resource_exhausted after 1", err, requests.Load())
	}
}

// A base URL without a scheme cannot work: every call says so at once, as
// invalid_argument, and nothing is sent or retried.
func TestBaseURLWithoutSchemeIsInvalid(t *testing.T) {
	for _, u := range []string{"127.0.0.1:7400", "localhost:7400", "ftp://example.test", ""} {
		_, err := sdk.New(u, fastRetry()).Publish(t.Context(), testEvent)
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "want http://HOST:PORT") {
			t.Errorf("base URL %q: %v, want invalid_argument naming the form", u, err)
		}
		_, err = sdk.NewSubscriptionClient(u, fastRetry()).Pause(t.Context(), "sub-1", "probe")
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("subscription client, base URL %q: %v, want invalid_argument", u, err)
		}
	}
}

// A token read from a file ends with a line break: it is sent without
// it. A token that holds a control character inside fails every call at
// once, as invalid_argument, rather than reading as an unavailable server
// after the retries.
func TestTokenIsTrimmedOrRefused(t *testing.T) {
	var got atomic.Value
	srv := &ingestServer{}
	path, h := rivorav1connect.NewIngestServiceHandler(srv)
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		h.ServeHTTP(w, r)
	}))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)

	if _, err := sdk.New(ts.URL, sdk.WithToken("tok-123\n"), fastRetry()).Publish(t.Context(), testEvent); err != nil {
		t.Fatalf("publish with a token ending in a line break: %v", err)
	}
	if got.Load() != "Bearer tok-123" {
		t.Fatalf("Authorization = %q, want %q", got.Load(), "Bearer tok-123")
	}
	_, err := sdk.New(ts.URL, sdk.WithToken("tok\n123"), fastRetry()).Publish(t.Context(), testEvent)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "control character") {
		t.Fatalf("publish with a line break inside the token: %v, want invalid_argument naming it", err)
	}
	if calls, _ := srv.snapshot(); calls != 1 {
		t.Fatalf("the server saw %d calls, want 1 (the bad token sends nothing)", calls)
	}
}

// A nil Option (one left unset) is skipped; a zero Client answers an error
// rather than panicking.
func TestNilOptionAndZeroClient(t *testing.T) {
	srv := &ingestServer{}
	var unset sdk.Option
	if _, err := sdk.New(startIngest(t, srv), unset, fastRetry()).Publish(t.Context(), testEvent); err != nil {
		t.Fatalf("publish with a nil option: %v", err)
	}
	var zero sdk.Client
	if _, err := zero.Publish(t.Context(), testEvent); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("zero Client: %v, want failed_precondition", err)
	}
	var zeroSubs sdk.SubscriptionClient
	if _, err := zeroSubs.Pause(t.Context(), "sub-1", "probe"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("zero SubscriptionClient: %v, want failed_precondition", err)
	}
}

// net/http's body limit ("request body too large") is a request over the
// size limit too: not retried.
func TestBodyLimitNotRetried(t *testing.T) {
	var requests atomic.Int32
	srv := &ingestServer{}
	path, h := rivorav1connect.NewIngestServiceHandler(srv)
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		r.Body = http.MaxBytesReader(w, r.Body, 1024)
		h.ServeHTTP(w, r)
	}))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	big := testEvent
	big.Payload = []byte(`"` + strings.Repeat("x", 4096) + `"`)
	_, err := sdk.New(ts.URL, fastRetry()).Publish(t.Context(), big)
	if err == nil || requests.Load() != 1 {
		t.Fatalf("over-size publish: %v after %d requests; want an error after 1", err, requests.Load())
	}
}

// KeyReused reads the conflict's ErrorInfo (the agent's own is checked
// end to end in agent's TestKeyReusedInABatchAtTheOwnerStoresNothing and
// TestKeyReusedAfterTheOriginalWasDeliveredAndTheAgentRestarted).
func TestKeyReusedReadsTheErrorInfo(t *testing.T) {
	ce := connect.NewError(connect.CodeAlreadyExists, errors.New("taken"))
	detail, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "IDEMPOTENCY_KEY_REUSED", Domain: "rivora.dev", Metadata: map[string]string{"original_event_id": "e1", "index": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	ce.AddDetail(detail)
	if orig, index, ok := sdk.KeyReused(fmt.Errorf("rivora publish: %w", ce)); !ok || orig != "e1" || index != 3 {
		t.Fatalf("KeyReused = %q, %d, %v; want e1, 3, true", orig, index, ok)
	}
	if _, _, ok := sdk.KeyReused(connect.NewError(connect.CodeAlreadyExists, errors.New("plain"))); ok {
		t.Fatal("KeyReused of an already_exists without the ErrorInfo: ok")
	}
	if _, _, ok := sdk.KeyReused(errors.New("not connect")); ok {
		t.Fatal("KeyReused of a plain error: ok")
	}
}

// withInfo is a Connect error carrying a google.rpc.ErrorInfo detail.
func withInfo(t *testing.T, code connect.Code, msg string, info *errdetails.ErrorInfo) *connect.Error {
	t.Helper()
	ce := connect.NewError(code, errors.New(msg))
	detail, err := connect.NewErrorDetail(info)
	if err != nil {
		t.Fatal(err)
	}
	ce.AddDetail(detail)
	return ce
}

// A resource_exhausted that says, in Rivora's ErrorInfo, that the request
// is too large (a PublishBatch whose fan-outs would store too much) is not
// sent again: it would be refused again. One that is back-pressure
// (--max-inflight-requests, an edge's full buffer, any other detail) is
// retried.
func TestResourceExhaustedRetriedUnlessTooLarge(t *testing.T) {
	tooLarge := withInfo(t, connect.CodeResourceExhausted,
		"this request would store 408 deliveries, about 98135424 bytes in all (its events fan out to their subscriptions); the limit is 33554432 bytes: publish fewer or smaller events at once",
		&errdetails.ErrorInfo{Reason: "REQUEST_TOO_LARGE", Domain: "rivora.dev"})
	srv := &ingestServer{fail: func(context.Context, int) error { return tooLarge }}
	client := sdk.New(startIngest(t, srv), fastRetry())
	if _, err := client.PublishBatch(t.Context(), []sdk.Event{testEvent, testEvent}); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "would store 408 deliveries") {
		t.Fatalf("too large batch: %v, want resource_exhausted with the server's message", err)
	}
	if _, err := client.Publish(t.Context(), testEvent); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("too large publish: %v, want resource_exhausted", err)
	}
	if calls, _ := srv.snapshot(); calls != 2 {
		t.Fatalf("the server saw %d calls, want 2 (one per request, none retried)", calls)
	}

	for _, busy := range []error{
		connect.NewError(connect.CodeResourceExhausted, errors.New("this server is at --max-inflight-requests; retry with back-off")),
		connect.NewError(connect.CodeResourceExhausted, errors.New("INGEST_EDGE of edge e1 is full (--max-buffer 1024 bytes): the cell is unreachable; nothing it acknowledged is discarded, and it accepts again as the cell takes events")),
		withInfo(t, connect.CodeResourceExhausted, "busy", &errdetails.ErrorInfo{Reason: "SOMETHING_ELSE", Domain: "rivora.dev"}),
		withInfo(t, connect.CodeResourceExhausted, "busy", &errdetails.ErrorInfo{Reason: "REQUEST_TOO_LARGE", Domain: "example.com"}),
	} {
		srv := &ingestServer{fail: func(_ context.Context, call int) error {
			if call <= 2 {
				return busy
			}
			return nil
		}}
		if _, err := sdk.New(startIngest(t, srv), fastRetry()).PublishBatch(t.Context(), []sdk.Event{testEvent, testEvent}); err != nil {
			t.Fatalf("back-pressure %v: %v, want it retried until accepted", busy, err)
		}
		if calls, _ := srv.snapshot(); calls != 3 {
			t.Fatalf("back-pressure %v: %d calls, want 3", busy, calls)
		}
	}
}

// An edge's full buffer is told from ordinary overload by its ErrorInfo
// (EdgeBufferFull), after the retries too; it is retried as back-pressure.
func TestEdgeBufferFullIsTold(t *testing.T) {
	full := withInfo(t, connect.CodeResourceExhausted, "EDGE_BUFFER of edge lyon is full (--max-buffer 1048576 bytes): …",
		&errdetails.ErrorInfo{Reason: "EDGE_BUFFER_FULL", Domain: "rivora.dev", Metadata: map[string]string{"edge": "lyon", "max_buffer_bytes": "1048576"}})
	srv := &ingestServer{fail: func(context.Context, int) error { return full }}
	_, err := sdk.New(startIngest(t, srv), fastRetry()).PublishBatch(t.Context(), []sdk.Event{testEvent, testEvent})
	if edge, ok := sdk.EdgeBufferFull(err); !ok || edge != "lyon" {
		t.Fatalf("EdgeBufferFull(%v) = %q, %t; want lyon", err, edge, ok)
	}
	if calls, _ := srv.snapshot(); calls < 2 {
		t.Fatalf("the server saw %d calls: a full edge's refusal is back-pressure, retried", calls)
	}
	for _, other := range []error{
		connect.NewError(connect.CodeResourceExhausted, errors.New("this server is at --max-inflight-requests; retry with back-off")),
		withInfo(t, connect.CodeResourceExhausted, "busy", &errdetails.ErrorInfo{Reason: "DISK_LOW", Domain: "rivora.dev"}),
		withInfo(t, connect.CodeUnavailable, "busy", &errdetails.ErrorInfo{Reason: "EDGE_BUFFER_FULL", Domain: "rivora.dev"}),
		errors.New("EDGE_BUFFER_FULL"),
	} {
		if _, ok := sdk.EdgeBufferFull(other); ok {
			t.Errorf("EdgeBufferFull(%v) = true", other)
		}
	}
}

// An edge whose buffer is over --buffer-max-age is told by its ErrorInfo
// (EdgeBufferTooOld), from a full buffer and from ordinary overload,
// after the retries too; it is retried as back-pressure.
func TestEdgeBufferTooOldIsTold(t *testing.T) {
	tooOld := withInfo(t, connect.CodeResourceExhausted, "EDGE_BUFFER of edge lyon holds events older than --buffer-max-age 72h0m0s: …",
		&errdetails.ErrorInfo{Reason: "EDGE_BUFFER_TOO_OLD", Domain: "rivora.dev", Metadata: map[string]string{"edge": "lyon", "buffer_max_age_seconds": "259200", "oldest_unforwarded_seconds": "259201"}})
	srv := &ingestServer{fail: func(context.Context, int) error { return tooOld }}
	_, err := sdk.New(startIngest(t, srv), fastRetry()).PublishBatch(t.Context(), []sdk.Event{testEvent, testEvent})
	if edge, ok := sdk.EdgeBufferTooOld(err); !ok || edge != "lyon" {
		t.Fatalf("EdgeBufferTooOld(%v) = %q, %t; want lyon", err, edge, ok)
	}
	if _, ok := sdk.EdgeBufferFull(err); ok {
		t.Fatalf("EdgeBufferFull(%v) = true for a buffer over age", err)
	}
	if calls, _ := srv.snapshot(); calls < 2 {
		t.Fatalf("the server saw %d calls: an edge's refusal for age is back-pressure, retried", calls)
	}
	for _, other := range []error{
		connect.NewError(connect.CodeResourceExhausted, errors.New("this server is at --max-inflight-requests; retry with back-off")),
		withInfo(t, connect.CodeResourceExhausted, "full", &errdetails.ErrorInfo{Reason: "EDGE_BUFFER_FULL", Domain: "rivora.dev", Metadata: map[string]string{"edge": "lyon"}}),
		withInfo(t, connect.CodeUnavailable, "busy", &errdetails.ErrorInfo{Reason: "EDGE_BUFFER_TOO_OLD", Domain: "rivora.dev"}),
		errors.New("EDGE_BUFFER_TOO_OLD"),
	} {
		if _, ok := sdk.EdgeBufferTooOld(other); ok {
			t.Errorf("EdgeBufferTooOld(%v) = true", other)
		}
	}
}

// TestPublishRetriesTruncatedAnswer: the connection closes mid-answer
// (headers sent, body cut short, then a normal close). The event may be
// stored, but the retry carries the same idempotency key, so retrying is
// safe, and not retrying makes the caller's own re-Publish (with a fresh
// key) store it twice.
func TestPublishRetriesTruncatedAnswer(t *testing.T) {
	srv := &ingestServer{}
	inner := srv.handler()
	var once sync.Once
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		truncated := false
		once.Do(func() {
			truncated = true
			rec := httptest.NewRecorder()
			inner.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", rec.Code, http.StatusText(rec.Code))
			rec.Header().Set("Content-Length", fmt.Sprint(len(body)))
			rec.Header().Write(buf)
			buf.WriteString("\r\n")
			buf.Write(body[:len(body)/2])
			if err := buf.Flush(); err != nil {
				t.Errorf("write half an answer: %v", err)
			}
		})
		if !truncated {
			inner.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(ts.Close)

	c := sdk.New(ts.URL, fastRetry())
	id, err := c.Publish(t.Context(), testEvent)
	if err != nil {
		t.Fatalf("Publish after a truncated answer: %v", err)
	}
	if id != "answer-2" {
		t.Fatalf("id = %q, want answer-2 (the second, complete answer)", id)
	}
	calls, keys := srv.snapshot()
	if calls != 2 || keys[0][0] != keys[1][0] {
		t.Fatalf("calls = %d, keys = %q: want 2 calls with the same key", calls, keys)
	}
}

// A gRPC answer without its status trailer (a proxy that drops trailers)
// is a protocol error every try meets again: not retried, though connect
// reports it as an unexpected EOF too.
func TestPublishDoesNotRetryAnAnswerWithoutItsGRPCStatus(t *testing.T) {
	var calls atomic.Int64
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(http.StatusOK)
	}))
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetHTTP1(true)
	ts.Config.Protocols.SetUnencryptedHTTP2(true) // gRPC over http:// is h2c
	ts.Start()
	t.Cleanup(ts.Close)
	c := sdk.New(ts.URL, fastRetry(), sdk.WithGRPC())
	_, err := c.Publish(t.Context(), testEvent)
	if err == nil {
		t.Fatal("Publish against an answer without grpc-status succeeded")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls for an answer without its gRPC status; want 1 (not retried)", n)
	}
}

// A 200 with an empty body (a proxy's, not Rivora's) is not taken for
// the event stored: Publish says the answer had no id, and gives the key
// to publish it again with.
func TestPublishRefusesAnAnswerWithoutTheEventID(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/proto")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(ts.Close)
	e := testEvent
	e.IdempotencyKey = "key-empty-answer"
	id, err := sdk.New(ts.URL, fastRetry()).Publish(t.Context(), e)
	if err == nil || !strings.Contains(err.Error(), "without the event's id") || !strings.Contains(err.Error(), "key-empty-answer") {
		t.Fatalf("Publish against an empty 200: id %q, %v; want an error naming the missing id and the key", id, err)
	}
}

// TestPublishRefusesInvalidUTF8 names the field protobuf cannot encode,
// as invalid_argument (InvalidEvent gives a batch's index), and sends
// nothing.
func TestPublishRefusesInvalidUTF8(t *testing.T) {
	srv := &ingestServer{}
	c := sdk.New(startIngest(t, srv), fastRetry())
	bad := testEvent
	bad.Customer = "acme\xff"
	_, err := c.Publish(t.Context(), bad)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "Customer") {
		t.Fatalf("Publish(Customer %q) = %v, want invalid_argument naming Customer", bad.Customer, err)
	}
	badType := testEvent
	badType.Type = "order.\xc3"
	_, err = c.PublishBatch(t.Context(), []sdk.Event{testEvent, badType})
	if i, ok := sdk.InvalidEvent(err); !ok || i != 1 || !strings.Contains(err.Error(), "Type") {
		t.Fatalf("PublishBatch(events[1].Type %q) = %v (InvalidEvent %d, %v), want event 1 refused naming Type", badType.Type, err, i, ok)
	}
	if calls, _ := srv.snapshot(); calls != 0 {
		t.Fatalf("server got %d calls, want none", calls)
	}
}
