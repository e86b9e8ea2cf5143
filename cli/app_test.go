package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/rig"
)

// fakeRivora serves the public API rivoractl uses, over real HTTP, keeping
// just enough state to answer like the control plane and an agent would.
// It is the contract rivoractl is tested against: requests are recorded
// exactly as they arrive.
type fakeRivora struct {
	rivorav1connect.UnimplementedAdminServiceHandler
	rivorav1connect.UnimplementedIngestServiceHandler
	rivorav1connect.UnimplementedEventServiceHandler

	tokens *fakeTokens // TokenService (tokens_test.go)
	// subs: SubscriptionService and EventTypeService
	// (subscriptions_test.go); Publish without a destination fans out
	// to its subscriptions.
	subs *fakeSubscriptions
	// edges answers ListEdges.
	edges []*rivorav1.EdgeStatus
	// health, when it has a destination's, is what GetDestinationHealth
	// answers for it (gone_test.go).
	health map[string]*rivorav1.DestinationHealth

	mu      sync.Mutex
	dests   map[string]*rivorav1.Destination
	pending map[string]int64
	// left: what a forced delete leaves to attempts in flight, by
	// destination: events in flight, events queued behind them.
	left     map[string][2]int64
	events   map[string]*rivorav1.GetEventResponse
	creates  []*rivorav1.CreateDestinationRequest
	updates  []*rivorav1.UpdateDestinationRequest
	deletes  []*rivorav1.DeleteDestinationRequest
	publishs []*rivorav1.PublishRequest
	codecs   []string
	// auths: the Authorization header of every request.
	auths []string
	// listed and resent: events list and resend requests (events_test.go).
	listed []*rivorav1.ListEventsRequest
	resent []*rivorav1.ResendEventRequest
}

var fixedTime = timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))

func startFake(t *testing.T) (*fakeRivora, string) {
	t.Helper()
	f, h := newFake()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

// newFake returns the fake and its HTTP handler, with opts (such as an
// auth interceptor) on every service.
func newFake(opts ...connect.HandlerOption) (*fakeRivora, http.Handler) {
	f := &fakeRivora{
		dests:   map[string]*rivorav1.Destination{},
		pending: map[string]int64{},
		events:  map[string]*rivorav1.GetEventResponse{},
		tokens:  &fakeTokens{},
		subs:    newFakeSubscriptions(),
	}
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewAdminServiceHandler(f, opts...))
	mux.Handle(rivorav1connect.NewIngestServiceHandler(f, opts...))
	mux.Handle(rivorav1connect.NewEventServiceHandler(f, opts...))
	mux.Handle(rivorav1connect.NewTokenServiceHandler(f.tokens, opts...))
	mux.Handle(rivorav1connect.NewSubscriptionServiceHandler(f.subs, opts...))
	mux.Handle(rivorav1connect.NewEventTypeServiceHandler(f.subs, opts...))
	return f, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.codecs = append(f.codecs, r.Header.Get("Content-Type"))
		f.auths = append(f.auths, r.Header.Get("Authorization"))
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
}

// withoutSecret is a destination as every answer but create's carries it:
// the signing secret left out.
func withoutSecret(d *rivorav1.Destination) *rivorav1.Destination {
	d = proto.Clone(d).(*rivorav1.Destination)
	d.SecretFingerprint = auth.Fingerprint(d.GetSecret())
	d.Secret = ""
	return d
}

func (f *fakeRivora) CreateDestination(_ context.Context, req *connect.Request[rivorav1.CreateDestinationRequest]) (*connect.Response[rivorav1.CreateDestinationResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, proto.Clone(req.Msg).(*rivorav1.CreateDestinationRequest))
	m := req.Msg
	if m.GetId() == "" || m.GetUrl() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("id and url are required"))
	}
	if _, ok := f.dests[m.GetId()]; ok {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("destination %q already exists", m.GetId()))
	}
	secret := m.GetSecret()
	if secret == "" {
		var err error
		if secret, err = webhook.NewSecret(); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	}
	limits := proto.Clone(m.GetLimits()).(*rivorav1.Limits)
	if limits == nil {
		limits = &rivorav1.Limits{}
	}
	if limits.GetWindow() == nil {
		limits.Window = durationpb.New(72 * time.Hour)
	}
	d := &rivorav1.Destination{Id: m.GetId(), Url: m.GetUrl(), Secret: secret, SecretFingerprint: auth.Fingerprint(secret), Limits: limits, OwnerCustomer: m.GetOwnerCustomer(), CreatedAt: fixedTime, UpdatedAt: fixedTime}
	if scheme := m.GetSignatureScheme(); scheme == webhook.SchemeV1a || scheme == webhook.SchemeBoth {
		key, public, err := webhook.NewSigningKey()
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		d.SignatureScheme, d.PublicKey, d.SigningKeyFingerprint = scheme, public, auth.Fingerprint(key)
	}
	f.dests[d.GetId()] = d
	return connect.NewResponse(&rivorav1.CreateDestinationResponse{Destination: d}), nil
}

func (f *fakeRivora) GetDestination(_ context.Context, req *connect.Request[rivorav1.GetDestinationRequest]) (*connect.Response[rivorav1.GetDestinationResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.dests[req.Msg.GetId()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("destination %q not found", req.Msg.GetId()))
	}
	return connect.NewResponse(&rivorav1.GetDestinationResponse{Destination: withoutSecret(d), Pending: f.pending[d.GetId()]}), nil
}

func (f *fakeRivora) ListDestinations(context.Context, *connect.Request[rivorav1.ListDestinationsRequest]) (*connect.Response[rivorav1.ListDestinationsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &rivorav1.ListDestinationsResponse{}
	for _, d := range f.dests {
		resp.Destinations = append(resp.Destinations, withoutSecret(d))
	}
	sort.Slice(resp.Destinations, func(i, j int) bool { return resp.Destinations[i].GetId() < resp.Destinations[j].GetId() })
	return connect.NewResponse(resp), nil
}

func (f *fakeRivora) UpdateDestination(_ context.Context, req *connect.Request[rivorav1.UpdateDestinationRequest]) (*connect.Response[rivorav1.UpdateDestinationResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, proto.Clone(req.Msg).(*rivorav1.UpdateDestinationRequest))
	m := req.Msg
	d, ok := f.dests[m.GetId()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("destination %q not found", m.GetId()))
	}
	if m.Url != nil {
		d.Url = m.GetUrl()
	}
	if m.Secret != nil {
		d.Secret = m.GetSecret()
	}
	if m.RatePerSecond != nil {
		d.Limits.RatePerSecond = m.GetRatePerSecond()
	}
	if m.Burst != nil {
		d.Limits.Burst = m.GetBurst()
	}
	if m.MaxAttempts != nil {
		d.Limits.MaxAttempts = m.GetMaxAttempts()
	}
	if m.MaxInFlight != nil {
		d.Limits.MaxInFlight = m.GetMaxInFlight()
	}
	if m.Window != nil {
		d.Limits.Window = m.GetWindow()
	}
	if m.Timeout != nil {
		d.Limits.Timeout = m.GetTimeout()
	}
	return connect.NewResponse(&rivorav1.UpdateDestinationResponse{Destination: withoutSecret(d)}), nil
}

func (f *fakeRivora) DeleteDestination(_ context.Context, req *connect.Request[rivorav1.DeleteDestinationRequest]) (*connect.Response[rivorav1.DeleteDestinationResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes = append(f.deletes, proto.Clone(req.Msg).(*rivorav1.DeleteDestinationRequest))
	id := req.Msg.GetId()
	if _, ok := f.dests[id]; !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("destination %q not found", id))
	}
	n := f.pending[id]
	if n > 0 && !req.Msg.GetForce() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("destination %q has %d pending events", id, n))
	}
	delete(f.dests, id)
	delete(f.pending, id)
	left := f.left[id]
	return connect.NewResponse(&rivorav1.DeleteDestinationResponse{Archived: n - left[0] - left[1], InFlight: left[0], ArchivedLater: left[1]}), nil
}

func (f *fakeRivora) Publish(_ context.Context, req *connect.Request[rivorav1.PublishRequest]) (*connect.Response[rivorav1.PublishResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.publishs = append(f.publishs, proto.Clone(req.Msg).(*rivorav1.PublishRequest))
	if req.Msg.GetDestinationId() == "" {
		return f.subs.fanOut(req.Msg)
	}
	if _, ok := f.dests[req.Msg.GetDestinationId()]; !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("destination %q not found", req.Msg.GetDestinationId()))
	}
	dup := false // a key published before to the destination
	for _, earlier := range f.publishs[:len(f.publishs)-1] {
		dup = dup || (earlier.GetDestinationId() == req.Msg.GetDestinationId() && earlier.GetIdempotencyKey() == req.Msg.GetIdempotencyKey())
	}
	return connect.NewResponse(&rivorav1.PublishResponse{EventId: req.Msg.GetIdempotencyKey(), Duplicate: dup}), nil
}

func (f *fakeRivora) GetEvent(_ context.Context, req *connect.Request[rivorav1.GetEventRequest]) (*connect.Response[rivorav1.GetEventResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev, ok := f.events[req.Msg.GetEventId()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("event %q not found", req.Msg.GetEventId()))
	}
	return connect.NewResponse(ev), nil
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs rivoractl against server with args, as a shell would. The
// CLI's tests do not run in parallel: every app parsing its flags writes
// into urfave/cli's package-level help flag, a race between two apps
// run at once.
func run(t *testing.T, server, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	full := []string{"rivoractl"}
	if server != "" {
		full = append(full, "--server", server)
	}
	full = append(full, args...)
	code := RunContext(t.Context(), full, strings.NewReader(stdin), &out, &errb)
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

func mustSucceed(t *testing.T, r result) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	return r
}

// assertFailure checks the exit code and that stderr is one line
// "rivoractl: …" containing want.
func assertFailure(t *testing.T, r result, code int, want string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d (stderr %q, stdout %q)", r.code, code, r.stderr, r.stdout)
	}
	if !strings.HasPrefix(r.stderr, "rivoractl: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Fatalf("stderr %q: want exactly one line starting with \"rivoractl: \"", r.stderr)
	}
	if !strings.Contains(r.stderr, want) {
		t.Fatalf("stderr %q does not contain %q", r.stderr, want)
	}
}

func TestCreateFlagsBeforeOrAfterIDSendTheSameRequest(t *testing.T) {
	// No author: the audit names the token.
	want := &rivorav1.CreateDestinationRequest{
		Id:  "orders",
		Url: "https://example.com/hooks",
		Limits: &rivorav1.Limits{
			RatePerSecond: 5,
			Window:        durationpb.New(24 * time.Hour),
			MaxInFlight:   3,
		},
	}
	for _, args := range [][]string{
		{"destinations", "create", "--url", "https://example.com/hooks", "orders", "--rate", "5", "--window", "24h", "--max-in-flight", "3"},
		{"destinations", "create", "orders", "--url", "https://example.com/hooks", "--rate=5", "--window", "24h", "--max-in-flight=3"},
		{"-o", "table", "destinations", "create", "--rate", "5", "--max-in-flight", "3", "orders", "--window", "24h", "--url", "https://example.com/hooks"},
		{"dest", "create", "--url=https://example.com/hooks", "--rate", "5", "--window=24h", "--max-in-flight", "3", "--", "orders"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			f, url := startFake(t)
			mustSucceed(t, run(t, url, "", args...))
			if len(f.creates) != 1 {
				t.Fatalf("server saw %d creates, want 1", len(f.creates))
			}
			if !proto.Equal(f.creates[0], want) {
				t.Fatalf("CreateDestination request = %v, want %v", f.creates[0], want)
			}
			if f.codecs[0] != "application/proto" {
				t.Fatalf("Content-Type = %q, want binary protobuf", f.codecs[0])
			}
		})
	}
}

func TestCreatePrintsSecret(t *testing.T) {
	f, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://example.com/hooks"))
	secret := f.dests["orders"].GetSecret()
	if !strings.Contains(r.stdout, secret) {
		t.Fatalf("create output does not show the generated secret %q:\n%s", secret, r.stdout)
	}
	for _, want := range []string{"ID", "orders", "WINDOW", "72h", "RATE", "default"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("create output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// A destination that signs v1a only is created showing what its
// receivers verify with, its public key, and not its whsec_ secret,
// which signs nothing while the scheme is v1a (the JSON answer, the API's
// own, keeps it for a later switch to v1 or both). With both, the
// secret is shown, and both ways to verify are said.
func TestCreateV1aPrintsThePublicKeyNotTheSecret(t *testing.T) {
	f, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "destinations", "create", "ed", "--url", "https://example.com/hooks", "--signature-scheme", "v1a"))
	d := f.dests["ed"]
	if strings.Contains(r.stdout, d.GetSecret()) || strings.Contains(r.stdout, "with SECRET") || strings.Contains(r.stdout, "store it with the receiver") {
		t.Errorf("create of a v1a destination shows or suggests its whsec_ secret:\n%s", r.stdout)
	}
	for _, want := range []string{"PUBLIC KEY     " + d.GetPublicKey(), d.GetSecretFingerprint() + " (fingerprint; not used: this destination signs v1a only", "Receivers verify v1a signatures with PUBLIC KEY"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("create of a v1a destination does not show %q:\n%s", want, r.stdout)
		}
	}
	r = mustSucceed(t, run(t, url, "", "destinations", "create", "ed2", "--url", "https://example.com/hooks", "--signature-scheme", "v1a", "-o", "json"))
	if !strings.Contains(r.stdout, f.dests["ed2"].GetSecret()) {
		t.Errorf("-o json leaves out the answer's secret:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "destinations", "create", "both", "--url", "https://example.com/hooks", "--signature-scheme", "both"))
	for _, want := range []string{f.dests["both"].GetSecret(), f.dests["both"].GetPublicKey(), "with SECRET", "with PUBLIC KEY"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("create of a destination signing both does not show %q:\n%s", want, r.stdout)
		}
	}
}

func TestCreateJSONOutputParses(t *testing.T) {
	f, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://example.com/hooks", "--burst", "7", "-o", "json"))
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, r.stdout)
	}
	for _, key := range []string{"id", "url", "secret", "limits", "createdAt"} {
		if _, ok := raw[key]; !ok {
			t.Fatalf("JSON output lacks %q: %s", key, r.stdout)
		}
	}
	var got rivorav1.Destination
	if err := protojson.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("output is not a Destination: %v", err)
	}
	if !proto.Equal(&got, f.dests["orders"]) {
		t.Fatalf("printed %v, server holds %v", &got, f.dests["orders"])
	}
}

func TestCreateValidatesLocally(t *testing.T) {
	f, url := startFake(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"destinations", "create", "orders"}, "--url is required"},
		{[]string{"destinations", "create", "--url", "https://x.example"}, "takes one destination ID"},
		{[]string{"destinations", "create", "a", "b", "--url", "https://x.example"}, "takes one destination ID"},
		{[]string{"destinations", "create", "a", "--url", "x.example/hooks"}, "absolute http or https URL"},
		{[]string{"destinations", "create", "a", "--url", "https://x.example", "--secret", "hunter2"}, "--secret"},
		{[]string{"destinations", "create", "a", "--url", "https://x.example", "--rate", "-1"}, "--rate"},
		{[]string{"destinations", "create", "a", "--url", "https://x.example", "--burst", "-1"}, "--burst"},
		{[]string{"destinations", "create", "a", "--url", "https://x.example", "--window", "3x"}, "window"},
		{[]string{"destinations", "create", "a", "--url", "https://x.example", "--bogus"}, "unknown flag --bogus for `rivoractl destinations create`, which takes ID as an argument (`rivoractl destinations create ID`); an argument that starts with '-' goes after \"--\""},
		{[]string{"destinations", "create", "a", "--url"}, "flag needs an argument"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			assertFailure(t, run(t, url, "", tt.args...), exitUsage, tt.want)
		})
	}
	if len(f.creates) != 0 {
		t.Fatalf("invalid command lines reached the server: %v", f.creates)
	}
}

// A destination id taken: an operator is told to update it, once; a
// customer token, whose destination it is not, only that it is taken.
func TestCreateConflict(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true})
	create := func(token string, args ...string) result {
		return run(t, d.URL, "", append([]string{"--token", token, "destinations", "create"}, args...)...)
	}
	mustSucceed(t, create(d.AdminToken, "orders", "--url", "https://example.com/hooks", "--owner-customer", "beta"))
	r := create(d.AdminToken, "orders", "--url", "https://example.com/hooks", "--owner-customer", "beta")
	assertFailure(t, r, exitError, "rivoractl destinations update orders")
	if n := strings.Count(r.stderr, "destinations update"); n != 1 {
		t.Errorf("the update hint appears %d times: %q", n, r.stderr)
	}
	r = create(d.Token(rivorav1.Role_ROLE_CUSTOMER, "acme"), "orders", "--url", "https://example.com/hooks", "--owner-customer", "acme")
	assertFailure(t, r, exitError, `destination id "orders" is taken; choose another id`)
	if strings.Contains(r.stderr, "update") || strings.Contains(r.stderr, "beta") {
		t.Errorf("a customer token told more than that the id is taken: %q", r.stderr)
	}
}

// A limit the control plane refuses for its bounds is named by the flag
// the user typed, from the error's details (not by the API's field name,
// and not by matching the server's words), with the bound and the value.
func TestRefusedLimitNamesItsFlag(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true})
	mustSucceed(t, run(t, d.URL, "", "--token", d.AdminToken, "destinations", "create", "orders", "--url", "https://example.com/hooks"))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"destinations", "create", "other", "--url", "https://example.com/hooks", "--window", "2400h"}, "invalid request: --window must be a duration more than 0 and at most 2160h0m0s (90 days), such as 72h, got 2400h0m0s"},
		{[]string{"destinations", "update", "orders", "--timeout", "50ms"}, "invalid request: --timeout must be a duration from 100ms to 5m0s, such as 10s, got 50ms"},
		{[]string{"limits", "set", "orders", "--timeout", "10m", "--reason", "probe"}, "invalid request: --timeout must be a duration from 100ms to 5m0s, such as 10s, got 10m0s"},
	} {
		r := run(t, d.URL, "", append([]string{"--token", d.AdminToken}, c.args...)...)
		assertFailure(t, r, exitError, c.want)
		if strings.Contains(r.stderr, "invalid request: window") || strings.Contains(r.stderr, "invalid request: timeout") {
			t.Errorf("%v: the API's field name shown: %q", c.args, r.stderr)
		}
	}
}

func TestListDestinations(t *testing.T) {
	_, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "destinations", "list", "-o", "json"))
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("empty list as JSON = %q, want []", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "destinations", "list"))
	if !strings.Contains(r.stdout, "rivoractl destinations create") {
		t.Fatalf("empty table does not say how to create one: %q", r.stdout)
	}

	mustSucceed(t, run(t, url, "", "destinations", "create", "billing", "--url", "https://billing.example/h"))
	mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://orders.example/h", "--rate", "2.5"))

	r = mustSucceed(t, run(t, url, "", "destinations", "list", "-o", "json"))
	var arr []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &arr); err != nil {
		t.Fatalf("list -o json is not a JSON array: %v\n%s", err, r.stdout)
	}
	if len(arr) != 2 || arr[0]["id"] != "billing" || arr[1]["id"] != "orders" {
		t.Fatalf("list -o json = %s, want billing and orders", r.stdout)
	}
	for _, obj := range arr {
		b, _ := json.Marshal(obj)
		var d rivorav1.Destination
		if err := protojson.Unmarshal(b, &d); err != nil {
			t.Fatalf("array element is not a Destination: %v", err)
		}
	}

	r = mustSucceed(t, run(t, url, "", "destinations", "ls"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.HasPrefix(lines[1], "billing") ||
		!strings.HasPrefix(lines[2], "orders") || !strings.Contains(lines[2], "2.5/s") {
		t.Fatalf("list table:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "whsec_") {
		t.Fatalf("list table shows secrets:\n%s", r.stdout)
	}
	assertFailure(t, run(t, url, "", "destinations", "list", "extra"), exitUsage, "takes no arguments")
}

func TestGetDestinationShowsPending(t *testing.T) {
	f, url := startFake(t)
	mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://example.com/hooks"))
	f.mu.Lock()
	f.pending["orders"] = 7
	f.mu.Unlock()

	r := mustSucceed(t, run(t, url, "", "destinations", "get", "orders"))
	fp := auth.Fingerprint(f.dests["orders"].GetSecret())
	if !strings.Contains(r.stdout, "PENDING") || !strings.Contains(r.stdout, "7") || !strings.Contains(r.stdout, "SECRET         "+fp+" (fingerprint") {
		t.Fatalf("get output lacks pending count or the secret's fingerprint %s:\n%s", fp, r.stdout)
	}
	if strings.Contains(r.stdout, "whsec_") {
		t.Fatalf("get output shows a secret:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "destinations", "get", "-o", "json", "orders"))
	var got rivorav1.GetDestinationResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("get -o json: %v\n%s", err, r.stdout)
	}
	if got.GetPending() != 7 || got.GetDestination().GetId() != "orders" {
		t.Fatalf("get -o json = %v", &got)
	}

	assertFailure(t, run(t, url, "", "destinations", "get", "nope"), exitError, "rivoractl destinations list")
}

func TestUpdateSendsOnlySetFlags(t *testing.T) {
	f, url := startFake(t)
	mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://example.com/hooks", "--rate", "50", "--burst", "9"))

	r := mustSucceed(t, run(t, url, "", "destinations", "update", "orders", "--rate", "7", "--timeout", "5s", "-o", "json"))
	want := &rivorav1.UpdateDestinationRequest{Id: "orders", RatePerSecond: ptr(7.0), Timeout: durationpb.New(5 * time.Second)}
	if !proto.Equal(f.updates[0], want) {
		t.Fatalf("UpdateDestination request = %v, want %v", f.updates[0], want)
	}
	var d rivorav1.Destination
	if err := protojson.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("update -o json: %v", err)
	}
	if d.GetLimits().GetBurst() != 9 || d.GetLimits().GetTimeout().AsDuration() != 5*time.Second {
		t.Fatalf("updated destination = %v: burst must be kept, timeout changed", &d)
	}

	mustSucceed(t, run(t, url, "", "destinations", "update", "--url", "https://new.example/h", "orders", "--max-attempts", "4", "--burst", "1"))
	want = &rivorav1.UpdateDestinationRequest{Id: "orders", Url: ptr("https://new.example/h"), MaxAttempts: ptr(int32(4)), Burst: ptr(int32(1))}
	if !proto.Equal(f.updates[1], want) {
		t.Fatalf("UpdateDestination request = %v, want %v", f.updates[1], want)
	}

	assertFailure(t, run(t, url, "", "destinations", "update", "orders"), exitUsage, "nothing to update")
	assertFailure(t, run(t, url, "", "destinations", "update", "nope", "--burst", "1"), exitError, "not found")
	if len(f.updates) != 3 {
		t.Fatalf("server saw %d updates, want 3", len(f.updates))
	}
}

func TestDeleteRefusedWhilePendingUnlessForced(t *testing.T) {
	f, url := startFake(t)
	mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://example.com/hooks"))
	f.mu.Lock()
	f.pending["orders"] = 3
	f.mu.Unlock()

	assertFailure(t, run(t, url, "", "destinations", "delete", "orders"), exitError, "pass --force")
	r := mustSucceed(t, run(t, url, "", "destinations", "delete", "orders", "--force"))
	if !strings.Contains(r.stdout, "archived 3 pending events") {
		t.Fatalf("delete --force output = %q", r.stdout)
	}
	if !f.deletes[1].GetForce() || f.deletes[0].GetForce() {
		t.Fatalf("force flags sent = %v, %v; want false then true", f.deletes[0].GetForce(), f.deletes[1].GetForce())
	}

	mustSucceed(t, run(t, url, "", "destinations", "create", "billing", "--url", "https://example.com/hooks"))
	r = mustSucceed(t, run(t, url, "", "destinations", "rm", "billing", "-o", "json"))
	var got rivorav1.DeleteDestinationResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("delete -o json: %v\n%s", err, r.stdout)
	}
}

func TestPublish(t *testing.T) {
	f, url := startFake(t)
	mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://example.com/hooks"))

	r := mustSucceed(t, run(t, url, "", "publish", "--destination", "orders", "--customer", "acme", "--lane", "user-42",
		"--type", "order.created", "--data", `{"order": 1}`, "-o", "json"))
	var out map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("publish -o json: %v\n%s", err, r.stdout)
	}
	id := out["eventId"]
	if len(out) != 1 || id == "" {
		t.Fatalf("publish -o json = %s, want {\"eventId\": …}", r.stdout)
	}
	if _, err := uuid.Parse(id); err != nil {
		t.Fatalf("event id %q (the SDK-assigned key) is not a UUID: %v", id, err)
	}
	want := &rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42", Type: "order.created",
		Payload: []byte(`{"order": 1}`), IdempotencyKey: id}
	if !proto.Equal(f.publishs[0], want) {
		t.Fatalf("Publish request = %v, want %v", f.publishs[0], want)
	}

	// From a file, with an idempotency key, table output: just the id.
	path := filepath.Join(t.TempDir(), "event.json")
	if err := os.WriteFile(path, []byte(`{"order": 2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = mustSucceed(t, run(t, url, "", "publish", "-d", "orders", "-c", "acme", "-l", "u", "-t", "x", "--data", "@"+path, "--idempotency-key", "order-2"))
	if r.stdout != "order-2\n" || string(f.publishs[1].GetPayload()) != `{"order": 2}` || r.stderr != "" {
		t.Fatalf("publish from file: stdout %q, stderr %q, payload %q", r.stdout, r.stderr, f.publishs[1].GetPayload())
	}
	// The key again: the id, and on stderr that nothing new was stored.
	r = mustSucceed(t, run(t, url, "", "publish", "-d", "orders", "-c", "acme", "-l", "u", "-t", "x", "--data", "@"+path, "--idempotency-key", "order-2"))
	if r.stdout != "order-2\n" || !strings.Contains(r.stderr, "duplicate: this idempotency key had already been published") {
		t.Fatalf("publish of a key again: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	f.publishs = slices.Delete(f.publishs, 2, 3) // the indexes below count the first publish of each

	// From stdin, not JSON.
	mustSucceed(t, run(t, url, "plain text", "publish", "-d", "orders", "-c", "acme", "-l", "u", "-t", "x", "--data", "@-", "--content-type", "text/plain"))
	if got := f.publishs[2]; string(got.GetPayload()) != "plain text" || got.GetContentType() != "text/plain" {
		t.Fatalf("publish from stdin sent %v", got)
	}

	before := len(f.publishs)
	assertFailure(t, run(t, url, "", "publish", "-d", "orders", "-c", "acme", "-l", "u", "-t", "x", "--data", "{not json"), exitUsage, "not valid JSON")
	assertFailure(t, run(t, url, "", "publish", "-d", "orders", "--data", "{}"), exitUsage, "--customer, --lane, --type")
	assertFailure(t, run(t, url, "", "publish", "-d", "orders", "-c", "a", "-l", "u", "-t", "x", "--data", "@/does/not/exist"), exitUsage, "--data @/does/not/exist")
	if len(f.publishs) != before {
		t.Fatalf("invalid publishes reached the server")
	}
	assertFailure(t, run(t, url, "", "publish", "-d", "nope", "-c", "a", "-l", "u", "-t", "x", "--data", "{}"), exitError, "destinations list")
}

func TestEventsGet(t *testing.T) {
	f, url := startFake(t)
	ev := &rivorav1.GetEventResponse{
		EventId: "evt-1", DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42", Type: "order.created",
		State:      rivorav1.EventState_EVENT_STATE_PENDING,
		AcceptedAt: fixedTime,
		Attempts: []*rivorav1.Attempt{
			{Number: 1, At: fixedTime, StatusCode: 503, Error: "service\nunavailable", Duration: durationpb.New(120 * time.Millisecond)},
			{Number: 2, At: fixedTime, Error: "dial tcp: connection refused", Duration: durationpb.New(3 * time.Millisecond)},
		},
		NextAttemptAt: timestamppb.New(fixedTime.AsTime().Add(4 * time.Second)),
		AheadInLane:   2,
		Waiting:       "held: destination parked since 2026-03-01T11:58:00Z; 2 of 8 attempts used",
		AttemptsUsed:  2,
		MaxAttempts:   8,
		WindowEndsAt:  timestamppb.New(fixedTime.AsTime().Add(72 * time.Hour)),
	}
	f.events["evt-1"] = ev

	r := mustSucceed(t, run(t, url, "", "events", "get", "evt-1"))
	for _, want := range []string{"pending", "orders", "acme", "user-42", "AHEAD IN LANE", "2026-03-01T12:00:04.000Z",
		"503", "service unavailable", "120ms", "connection refused",
		"WAITING", "held: destination parked since 2026-03-01T11:58:00Z; 2 of 8 attempts used", "WINDOW ENDS", "2026-03-04T12:00:00.000Z"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("events get output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = mustSucceed(t, run(t, url, "", "events", "get", "-o", "json", "evt-1"))
	var got rivorav1.GetEventResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("events get -o json: %v\n%s", err, r.stdout)
	}
	if !proto.Equal(&got, ev) {
		t.Fatalf("events get -o json = %v, want %v", &got, ev)
	}
	if !strings.Contains(r.stdout, `"aheadInLane"`) || !strings.Contains(r.stdout, `"EVENT_STATE_PENDING"`) ||
		!strings.Contains(r.stdout, `"waiting": "held: destination parked`) || !strings.Contains(r.stdout, `"attemptsUsed": 2`) {
		t.Fatalf("JSON does not use protojson names:\n%s", r.stdout)
	}

	f.events["evt-2"] = &rivorav1.GetEventResponse{EventId: "evt-2", State: rivorav1.EventState_EVENT_STATE_DEAD,
		DeadReason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS}
	r = mustSucceed(t, run(t, url, "", "event", "get", "evt-2"))
	if !strings.Contains(r.stdout, "dead") || !strings.Contains(r.stdout, "max attempts") || strings.Contains(r.stdout, "AHEAD") {
		t.Fatalf("dead event output:\n%s", r.stdout)
	}

	// Delivered, while a copy of another payload under its id died.
	f.events["evt-3"] = &rivorav1.GetEventResponse{EventId: "evt-3", State: rivorav1.EventState_EVENT_STATE_DELIVERED, ConflictingCopyDead: true}
	r = mustSucceed(t, run(t, url, "", "events", "get", "evt-3"))
	if !strings.Contains(r.stdout, "delivered") || !strings.Contains(r.stdout, "CONFLICTING COPY") || !strings.Contains(r.stdout, "rivoractl dlq show evt-3") || strings.Contains(r.stdout, "DEAD REASON") {
		t.Fatalf("delivered event with a conflicting copy dead:\n%s", r.stdout)
	}

	assertFailure(t, run(t, url, "", "events", "get", "evt-404"), exitError, "not found")
	assertFailure(t, run(t, url, "", "events", "get"), exitUsage, "takes one event ID")
}

func TestServerErrors(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	deadURL := closed.URL
	closed.Close()
	assertFailure(t, run(t, deadURL, "", "destinations", "list"), exitError,
		"cannot reach Rivora at "+deadURL+": is it running (`rivora dev`, or the control plane or agent that --server names)?")
	assertFailure(t, run(t, deadURL, "", "publish", "-d", "o", "-c", "a", "-l", "u", "-t", "x", "--data", "{}"), exitError,
		"cannot reach Rivora at "+deadURL)

	notRivora := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notRivora.Close)
	assertFailure(t, run(t, notRivora.URL, "", "destinations", "list"), exitError, "does not serve this call")

	overloaded := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(overloaded.Close)
	assertFailure(t, run(t, overloaded.URL, "", "destinations", "get", "x"), exitError, "is unavailable")
}

func TestUsageErrors(t *testing.T) {
	_, url := startFake(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"destinations", "bogus"}, `unknown command "bogus"`},
		{[]string{"destinations", "list", "-o", "yaml"}, `-o "yaml"`},
		{[]string{"--server", "localhost:7400", "destinations", "list"}, "not a Rivora URL"},
		{[]string{"destinations", "list", "--nope"}, "unknown flag --nope for `rivoractl destinations list`"},
		// --author is gone: the audit names the token.
		{[]string{"--author", "alice", "destinations", "list"}, "flag provided but not defined: -author"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"rivoractl"}, tt.args...)
			if !slices.Contains(args, "--server") {
				args = append(args, "--server", url)
			}
			code := RunContext(t.Context(), args, strings.NewReader(""), &out, &errb)
			assertFailure(t, result{stdout: out.String(), stderr: errb.String(), code: code}, exitUsage, tt.want)
		})
	}
}

func TestServerFromEnvironment(t *testing.T) {
	f, url := startFake(t)
	t.Setenv("RIVORA_SERVER", url)
	mustSucceed(t, run(t, "", "", "destinations", "create", "orders", "--url", "https://example.com/hooks"))
	if len(f.creates) != 1 {
		t.Fatalf("RIVORA_SERVER was not used")
	}
}

// TestHelpEverywhere checks that every command answers --help, wherever the
// flag is, with an example to copy.
func TestHelpEverywhere(t *testing.T) {
	var paths [][]string
	var walk func(prefix []string, cmds []*ucli.Command)
	walk = func(prefix []string, cmds []*ucli.Command) {
		for _, c := range cmds {
			p := append(slices.Clone(prefix), c.Name)
			paths = append(paths, p)
			walk(p, c.Subcommands)
		}
	}
	paths = append(paths, nil)
	walk(nil, testApp().Commands)
	if len(paths) < 10 {
		t.Fatalf("found only %d commands", len(paths))
	}
	for _, p := range paths {
		for _, args := range [][]string{append(slices.Clone(p), "--help"), append(slices.Clone(p), "ARG", "-h")} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				r := run(t, "", "", args...)
				if r.code != 0 || r.stderr != "" {
					t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
				}
				if !strings.Contains(r.stdout, "USAGE") || !strings.Contains(r.stdout, "rivoractl "+strings.Join(p, " ")) {
					t.Fatalf("help lacks usage or an example:\n%s", r.stdout)
				}
			})
		}
	}
}

// A rate outside 0.001–1e6 events per second is a usage error before
// anything is sent: replay, limits set and destinations create alike
// (issue 22).
func TestRateFlagsHaveTheFloor(t *testing.T) {
	_, url := startFake(t)
	for _, args := range [][]string{
		{"replay", "--destination", "orders", "--rate", "1e-300"},
		{"replay", "--destination", "orders", "--rate", "1e-10"},
		{"limits", "set", "orders", "--rate", "5e-324", "--reason", "probe"},
		{"destinations", "create", "a", "--url", "https://x.example", "--rate", "0.0005"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			assertFailure(t, run(t, url, "", args...), exitUsage, "want a number of events per second at least 0.001")
		})
	}
}

// An override of 0 is a usage error naming the flag: the server reads 0
// as "not overridden", and answered "nothing to override" although a
// limit was given.
func TestLimitsSetRefusesZero(t *testing.T) {
	_, url := startFake(t)
	for _, flag := range []string{"--burst", "--max-attempts", "--max-in-flight"} {
		assertFailure(t, run(t, url, "", "limits", "set", "orders", flag, "0", "--reason", "probe"), exitUsage, flag+" 0: an override needs a whole number from 1")
	}
}

// An https:// --server that answers plain HTTP is named as such, not as
// "unavailable; try again shortly" (a retry cannot help).
func TestHTTPSServerThatAnswersHTTP(t *testing.T) {
	_, url := startFake(t)
	https := strings.Replace(url, "http://", "https://", 1)
	assertFailure(t, run(t, https, "", "destinations", "list"), exitError, "answers plain HTTP, not HTTPS: use an http:// URL")
}

func (f *fakeRivora) ListEdges(context.Context, *connect.Request[rivorav1.ListEdgesRequest]) (*connect.Response[rivorav1.ListEdgesResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&rivorav1.ListEdgesResponse{Edges: f.edges}), nil
}

// A flag's value that does not parse names the flag as the help does,
// with two dashes.
func TestBadFlagValueNamesTheFlag(t *testing.T) {
	_, url := startFake(t)
	assertFailure(t, run(t, url, "", "replay", "--destination", "orders", "--rate", "abc"), exitUsage, `invalid value "abc" for flag --rate`)
}
