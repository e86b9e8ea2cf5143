package controlplane_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// ---- harness ---------------------------------------------------------------

func (d *dev) subs(token string) rivorav1connect.SubscriptionServiceClient {
	return rivorav1connect.NewSubscriptionServiceClient(d.HTTPClient(), d.URL, d.As(token))
}

func (d *dev) types(token string) rivorav1connect.EventTypeServiceClient {
	return rivorav1connect.NewEventTypeServiceClient(d.HTTPClient(), d.URL, d.As(token))
}

func (d *dev) adminAs(token string) rivorav1connect.AdminServiceClient {
	return rivorav1connect.NewAdminServiceClient(d.HTTPClient(), d.URL, d.As(token))
}

// subscribe creates a subscription as token, failing the test on error.
func (d *dev) subscribe(token string, req *rivorav1.CreateSubscriptionRequest) *rivorav1.Subscription {
	d.T.Helper()
	resp, err := d.subs(token).CreateSubscription(context.Background(), connect.NewRequest(req))
	if err != nil {
		d.T.Fatalf("CreateSubscription(%s → %s): %v", req.GetCustomerId(), req.GetDestinationId(), err)
	}
	return resp.Msg.GetSubscription()
}

// fakeAgent stands in for the fleet where a test needs the agents'
// answers under its control: it watches the control plane as agent
// "fake" (reporting each version applied), and serves PartitionService
// from its pending counts, by destination and subscription, and its
// health answers. It records what it was asked to archive.
type fakeAgent struct {
	mu       sync.Mutex
	pending  map[[2]string]int64 // (destination, subscription) → count
	archived [][2]string
	// left: what an archive leaves to attempts in flight, by
	// (destination, subscription): heads in flight, events behind them.
	left   map[[2]string][2]int64
	health []*rivorav1.DestinationHealth
	last   *rivorav1.WatchResponse // the last config message received
	feed   []*rivorav1.WatchResponse
}

func startFakeAgent(t *testing.T, d *dev) *fakeAgent {
	t.Helper()
	f := &fakeAgent{pending: map[[2]string]int64{}, left: map[[2]string][2]int64{}}
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewPartitionServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := d.Agents.Watch(ctx, connect.NewRequest(&rivorav1.WatchRequest{AgentName: "fake", Address: srv.URL}))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	go func() {
		for stream.Receive() {
			msg := stream.Msg()
			f.mu.Lock()
			f.last = msg
			if len(msg.GetSubscriptions()) > 0 || len(msg.GetRemovedSubscriptionIds()) > 0 || msg.GetEventTypesChanged() || msg.GetSnapshot() {
				f.feed = append(f.feed, msg)
			}
			f.mu.Unlock()
			_, _ = d.Agents.ReportApplied(ctx, connect.NewRequest(&rivorav1.ReportAppliedRequest{AgentName: "fake", Version: msg.GetVersion()}))
		}
	}()
	poll.True(t, "fake agent's first config", 10*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.last != nil
	})
	return f
}

// received returns the feed messages that carried subscriptions or the
// catalogue, once cond holds for them.
func (f *fakeAgent) received(t *testing.T, what string, cond func([]*rivorav1.WatchResponse) bool) []*rivorav1.WatchResponse {
	t.Helper()
	var got []*rivorav1.WatchResponse
	poll.True(t, what, 10*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		got = slices.Clone(f.feed)
		return cond(got)
	})
	return got
}

func (f *fakeAgent) setPending(destination, subscription string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending[[2]string{destination, subscription}] = n
}

func (f *fakeAgent) CountPending(_ context.Context, req *connect.Request[rivorav1.CountPendingRequest]) (*connect.Response[rivorav1.CountPendingResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&rivorav1.CountPendingResponse{Pending: f.pending[[2]string{req.Msg.GetDestinationId(), req.Msg.GetSubscriptionId()}]}), nil
}

func (f *fakeAgent) ArchivePending(_ context.Context, req *connect.Request[rivorav1.ArchivePendingRequest]) (*connect.Response[rivorav1.ArchivePendingResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := [2]string{req.Msg.GetDestinationId(), req.Msg.GetSubscriptionId()}
	left := f.left[key]
	n := f.pending[key] - left[0] - left[1]
	f.pending[key] = left[0] + left[1]
	f.archived = append(f.archived, key)
	return connect.NewResponse(&rivorav1.ArchivePendingResponse{Archived: n, InFlight: left[0], ArchivedLater: left[1]}), nil
}

func (f *fakeAgent) GetHealth(_ context.Context, req *connect.Request[rivorav1.GetHealthRequest]) (*connect.Response[rivorav1.GetHealthResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*rivorav1.DestinationHealth
	for _, h := range f.health {
		if req.Msg.GetDestinationId() == "" || req.Msg.GetDestinationId() == h.GetDestinationId() {
			out = append(out, h)
		}
	}
	return connect.NewResponse(&rivorav1.GetHealthResponse{Destinations: out}), nil
}

// rigStart is a Dev without an agent whose control plane config cfg
// adjusts.
func rigStart(t *testing.T, cfg func(*controlplane.Config)) *rig.Dev {
	return rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true, ControlPlane: cfg})
}

// rigStartToken restarts a Dev without an agent on dir, calling with
// token.
func rigStartToken(t *testing.T, dir, token string) *rig.Dev {
	return rig.StartDev(t, dir, rig.Options{NoAgent: true, Token: token})
}

// ---- tests -----------------------------------------------------------------

func TestCreateSubscriptionValidation(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com:8443/ingest?k=1"})
	d.create(&rivorav1.CreateDestinationRequest{Id: "own", Url: "https://c2.example.com/hook", OwnerCustomer: "c2"})
	base := func() *rivorav1.CreateSubscriptionRequest {
		return &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.*"}}
	}
	cases := []struct {
		name     string
		mod      func(*rivorav1.CreateSubscriptionRequest)
		code     connect.Code
		mentions []string
	}{
		{"no customer", func(r *rivorav1.CreateSubscriptionRequest) { r.CustomerId = "" }, connect.CodeInvalidArgument, []string{"customer_id is empty"}},
		{"bad customer", func(r *rivorav1.CreateSubscriptionRequest) { r.CustomerId = "c 1" }, connect.CodeInvalidArgument, []string{"customer_id"}},
		{"absent destination", func(r *rivorav1.CreateSubscriptionRequest) { r.DestinationId = "nope" }, connect.CodeNotFound, []string{`"nope" does not exist`}},
		{"another customer's destination", func(r *rivorav1.CreateSubscriptionRequest) { r.DestinationId = "own" }, connect.CodeFailedPrecondition, []string{`customer "c2"'s own`}},
		{"no types", func(r *rivorav1.CreateSubscriptionRequest) { r.Types = nil }, connect.CodeInvalidArgument, []string{"types is empty"}},
		{"bad type", func(r *rivorav1.CreateSubscriptionRequest) { r.Types = []string{"order created"} }, connect.CodeInvalidArgument, []string{"order created"}},
		{"filter that does not compile", func(r *rivorav1.CreateSubscriptionRequest) { r.Filter = "data.amount >" }, connect.CodeInvalidArgument, []string{"filter"}},
		{"filter that is not boolean", func(r *rivorav1.CreateSubscriptionRequest) { r.Filter = "data.amount + 1" }, connect.CodeInvalidArgument, []string{"filter"}},
		{"relative path", func(r *rivorav1.CreateSubscriptionRequest) { r.Path = "in/c1" }, connect.CodeInvalidArgument, []string{`must start with a single "/"`}},
		{"path with a host", func(r *rivorav1.CreateSubscriptionRequest) { r.Path = "//evil.example.com/x" }, connect.CodeInvalidArgument, []string{"single"}},
		{"path and url", func(r *rivorav1.CreateSubscriptionRequest) {
			r.Path, r.Url = "/a", "https://erp.example.com:8443/b"
		}, connect.CodeInvalidArgument, []string{"path or url, not both"}},
		{"url on another host", func(r *rivorav1.CreateSubscriptionRequest) { r.Url = "https://evil.example.com:8443/b" }, connect.CodeInvalidArgument, []string{"not on destination \"erp\"'s origin https://erp.example.com:8443"}},
		{"url on another port", func(r *rivorav1.CreateSubscriptionRequest) { r.Url = "https://erp.example.com/b" }, connect.CodeInvalidArgument, []string{"origin"}},
		{"url on another scheme", func(r *rivorav1.CreateSubscriptionRequest) { r.Url = "http://erp.example.com:8443/b" }, connect.CodeInvalidArgument, []string{"origin"}},
		{"url with credentials", func(r *rivorav1.CreateSubscriptionRequest) { r.Url = "https://u:p@erp.example.com:8443/b" }, connect.CodeInvalidArgument, []string{"credentials"}},
		{"bad secret", func(r *rivorav1.CreateSubscriptionRequest) { r.Secret = "hunter2" }, connect.CodeInvalidArgument, []string{"secret", "whsec_"}},
		{"secret and generate", func(r *rivorav1.CreateSubscriptionRequest) {
			r.Secret, r.GenerateSecret = secret, true
		}, connect.CodeInvalidArgument, []string{"not both"}},
		{"reserved header", func(r *rivorav1.CreateSubscriptionRequest) { r.Headers = []*rivorav1.Header{hdr("Webhook-Id", "x")} }, connect.CodeInvalidArgument, []string{"reserved"}},
		{"long description", func(r *rivorav1.CreateSubscriptionRequest) { r.Description = strings.Repeat("d", 1025) }, connect.CodeInvalidArgument, []string{"description"}},
		{"operator notices", func(r *rivorav1.CreateSubscriptionRequest) { r.DestinationId = "rivora-operator" }, connect.CodeInvalidArgument, []string{"reserved"}},
	}
	for _, tc := range cases {
		req := base()
		tc.mod(req)
		_, err := d.subs(d.AdminToken).CreateSubscription(context.Background(), connect.NewRequest(req))
		wantCode(t, tc.name, err, tc.code, tc.mentions...)
	}
	list, err := d.subs(d.AdminToken).ListSubscriptions(context.Background(), connect.NewRequest(&rivorav1.ListSubscriptionsRequest{}))
	if err != nil || len(list.Msg.GetSubscriptions()) != 0 {
		t.Fatalf("after only invalid creates: %v, %v", list.Msg.GetSubscriptions(), err)
	}
}

// A subscription's path or URL resolves to its delivery URL on its
// destination's origin; its secret and header values show only in the
// answer to create; lists filter by customer and destination; a change
// to the destination's URL carries its subscriptions along.
func TestSubscriptionDeliverySecretAndList(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest?k=1"})
	d.create(&rivorav1.CreateDestinationRequest{Id: "crm", Url: "https://crm.example.com/in"})
	admin := d.AdminToken
	withPath := d.subscribe(admin, &rivorav1.CreateSubscriptionRequest{
		CustomerId: "c1", DestinationId: "erp", Types: []string{"order.created"}, Path: "/in/c1?src=rivora",
		Secret: secret, Headers: []*rivorav1.Header{hdr("x-tenant", "c1-secret-tenant")}, Description: "c1's orders",
	})
	if !strings.HasPrefix(withPath.GetId(), "sub_") || len(withPath.GetId()) != 20 {
		t.Errorf("id %q, want sub_ + 16 hex", withPath.GetId())
	}
	if withPath.GetDeliveryUrl() != "https://erp.example.com/in/c1?src=rivora" || withPath.GetSecret() != secret || withPath.GetSecretFingerprint() != auth.Fingerprint(secret) {
		t.Fatalf("create answered %v; want delivery_url on erp's origin and the secret shown once", withPath)
	}
	if h := withPath.GetHeaders(); len(h) != 1 || h[0].GetName() != "X-Tenant" || h[0].GetValue() != "" || h[0].GetValueFingerprint() != auth.Fingerprint("c1-secret-tenant") {
		t.Fatalf("create answered headers %v, want X-Tenant's fingerprint only", h)
	}
	generated := d.subscribe(admin, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "crm", Types: []string{"*"}, GenerateSecret: true, Url: "https://crm.example.com:443/c1"})
	if !strings.HasPrefix(generated.GetSecret(), "whsec_") || generated.GetDeliveryUrl() != "https://crm.example.com:443/c1" {
		t.Fatalf("generated: %v", generated)
	}
	plain := d.subscribe(admin, &rivorav1.CreateSubscriptionRequest{CustomerId: "c2", DestinationId: "erp", Types: []string{"invoice.paid"}, Filter: "data.amount > 100"})
	if plain.GetSecret() != "" || plain.GetSecretFingerprint() != "" || plain.GetDeliveryUrl() != "https://erp.example.com/ingest?k=1" {
		t.Fatalf("a subscription with neither secret nor path: %v; want no secret and the destination's URL", plain)
	}

	got, err := d.subs(admin).GetSubscription(context.Background(), connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: withPath.GetId()}))
	wantCode(t, "get without an agent to count pending events", err, connect.CodeUnavailable, "no agent")
	ids := func(req *rivorav1.ListSubscriptionsRequest) []string {
		t.Helper()
		resp, err := d.subs(admin).ListSubscriptions(context.Background(), connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range resp.Msg.GetSubscriptions() {
			if s.GetSecret() != "" || (len(s.GetHeaders()) > 0 && s.GetHeaders()[0].GetValue() != "") {
				t.Errorf("list answered a secret or header value: %v", s)
			}
			if s.GetDestinationState() != "unknown" {
				t.Errorf("destination_state %q with no agent to ask, want unknown", s.GetDestinationState())
			}
			out = append(out, s.GetId())
		}
		return out
	}
	all := []string{withPath.GetId(), generated.GetId(), plain.GetId()}
	slices.Sort(all)
	if got := ids(&rivorav1.ListSubscriptionsRequest{}); !slices.Equal(got, all) {
		t.Fatalf("list all = %v, want %v", got, all)
	}
	if got := ids(&rivorav1.ListSubscriptionsRequest{CustomerId: "c2"}); !slices.Equal(got, []string{plain.GetId()}) {
		t.Fatalf("list of c2 = %v", got)
	}
	if got := ids(&rivorav1.ListSubscriptionsRequest{CustomerId: "c1", DestinationId: "erp"}); !slices.Equal(got, []string{withPath.GetId()}) {
		t.Fatalf("list of c1 on erp = %v", got)
	}
	_ = got

	// The destination moves: the path follows it.
	if _, err := d.Admin.UpdateDestination(context.Background(), connect.NewRequest(&rivorav1.UpdateDestinationRequest{Id: "erp", Url: new("https://erp2.example.com:9443/v2")})); err != nil {
		t.Fatal(err)
	}
	resp, err := d.subs(admin).ListSubscriptions(context.Background(), connect.NewRequest(&rivorav1.ListSubscriptionsRequest{DestinationId: "erp"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.Msg.GetSubscriptions() {
		want := "https://erp2.example.com:9443/v2"
		if s.GetId() == withPath.GetId() {
			want = "https://erp2.example.com:9443/in/c1?src=rivora"
		}
		if s.GetDeliveryUrl() != want {
			t.Errorf("after erp moved, %s delivers to %s, want %s", s.GetId(), s.GetDeliveryUrl(), want)
		}
	}
}

// A filter whose regex literal does not parse is refused at create and
// at update, for a customer's token as for an operator's, in the
// function form matches(s, p) as in the method form s.matches(p): the
// function form's was accepted, and the subscription never got an event.
func TestSubscriptionFilterWithABadRegexIsRefused(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	c := d.subs(d.Token(rivorav1.Role_ROLE_CUSTOMER, "c1"))
	ctx := context.Background()
	s := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.*"}})
	for _, filter := range []string{`matches(data.s, "[")`, `data.s.matches("[")`} {
		_, err := c.CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.*"}, Filter: filter}))
		wantCode(t, "create with "+filter, err, connect.CodeInvalidArgument, `"[" is not a regular expression`, "column")
		_, err = c.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: s.GetId(), Filter: new(filter)}))
		wantCode(t, "update with "+filter, err, connect.CodeInvalidArgument, `"[" is not a regular expression`, "column")
	}
}

// A subscription stored with a filter that create now refuses (a bad
// regex in the function form matches(s, p), accepted before that check)
// still takes updates of its other fields: an update compiles the filter
// only when it sets it. It refused every update (description, types,
// path) invalid_argument, naming the filter it did not change.
func TestSubscriptionWithAStoredBadFilterTakesOtherUpdates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const bad = `matches(data.s, "[")`
	store, err := controlplane.OpenStore(filepath.Join(dir, "controlplane"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(func(tx *controlplane.DestinationTx) error {
		tx.Put(&rivorav1.Destination{Id: "erp", Url: "https://erp.example.com/ingest", Secret: secret})
		tx.Subscriptions().Put(&rivorav1.Subscription{Id: "sub_legacy", CustomerId: "c1", DestinationId: "erp", Types: []string{"order.*"}, Filter: bad})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	d := startDev(t, dir, false)
	c := d.subs(d.AdminToken)
	ctx := context.Background()
	for _, tc := range []struct {
		what string
		req  *rivorav1.UpdateSubscriptionRequest
	}{
		{"description", &rivorav1.UpdateSubscriptionRequest{Id: "sub_legacy", Description: new("orders, before the upgrade")}},
		{"types", &rivorav1.UpdateSubscriptionRequest{Id: "sub_legacy", SetTypes: true, Types: []string{"order.created"}}},
		{"path", &rivorav1.UpdateSubscriptionRequest{Id: "sub_legacy", Path: new("/orders")}},
	} {
		resp, err := c.UpdateSubscription(ctx, connect.NewRequest(tc.req))
		if err != nil {
			t.Fatalf("update of the %s of a subscription whose stored filter is %s: %v, want it updated", tc.what, bad, err)
		}
		if got := resp.Msg.GetSubscription().GetFilter(); got != bad {
			t.Fatalf("update of the %s changed the filter to %q", tc.what, got)
		}
	}
	// Setting the filter, even to the one stored, checks it.
	_, err = c.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: "sub_legacy", Filter: new(bad)}))
	wantCode(t, "update setting the filter", err, connect.CodeInvalidArgument, `"[" is not a regular expression`)
}

// Updating changes only what is set; pausing and resuming keep the pause
// intervals; rotating shows the new secret once and keeps the previous
// one signing for the grace; every change is audited under the token.
func TestSubscriptionUpdatePauseRotate(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	ops := d.Token(rivorav1.Role_ROLE_OPERATOR)
	s := d.subscribe(ops, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.*"}, Secret: secret})
	c := d.subs(ops)
	ctx := context.Background()

	_, err := c.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: s.GetId()}))
	wantCode(t, "empty update", err, connect.CodeInvalidArgument, "nothing to update")
	_, err = c.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: s.GetId(), Filter: new("data.x ==")}))
	wantCode(t, "update with a bad filter", err, connect.CodeInvalidArgument, "filter")
	up, err := c.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{
		Id: s.GetId(), SetTypes: true, Types: []string{"order.created", "invoice.*"}, Filter: new(`type != "order.test"`), Path: new("/c1"),
		SetHeaders: []*rivorav1.Header{hdr("X-Tenant", "c1")},
	}))
	if err != nil {
		t.Fatal(err)
	}
	u := up.Msg.GetSubscription()
	if !slices.Equal(u.GetTypes(), []string{"order.created", "invoice.*"}) || u.GetFilter() != `type != "order.test"` || u.GetDeliveryUrl() != "https://erp.example.com/c1" || u.GetSecret() != "" || u.GetSecretFingerprint() != auth.Fingerprint(secret) {
		t.Fatalf("updated: %v", u)
	}
	up, err = c.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: s.GetId(), Path: new(""), RemoveHeaders: []string{"x-tenant"}}))
	if err != nil || up.Msg.GetSubscription().GetDeliveryUrl() != "https://erp.example.com/ingest" || len(up.Msg.GetSubscription().GetHeaders()) != 0 || up.Msg.GetSubscription().GetFilter() == "" {
		t.Fatalf("path cleared and header removed: %v, %v", up.Msg.GetSubscription(), err)
	}

	// A pause needs a reason, as a destination's does (the console asked
	// for one, the API did not): a blank one is refused.
	for _, blank := range []string{"", "  \t"} {
		_, err = c.PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: s.GetId(), Reason: blank}))
		wantCode(t, fmt.Sprintf("pause with reason %q", blank), err, connect.CodeInvalidArgument, "a pause needs a reason", "--reason")
		_, err = d.Admin.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "erp", Reason: blank}))
		wantCode(t, fmt.Sprintf("pause of its destination with reason %q", blank), err, connect.CodeInvalidArgument, "a pause needs a reason", "--reason")
	}
	p, err := c.PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: s.GetId(), Reason: " receiver down\n"}))
	if err != nil || !p.Msg.GetSubscription().GetPaused() || len(p.Msg.GetSubscription().GetPauses()) != 1 || p.Msg.GetSubscription().GetDestinationState() != "unknown" {
		t.Fatalf("pause: %v, %v", p.Msg.GetSubscription(), err)
	}
	_, err = c.PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: s.GetId(), Reason: "again"}))
	wantCode(t, "pause twice", err, connect.CodeFailedPrecondition, "already paused", "subscriptions resume")
	r, err := c.ResumeSubscription(ctx, connect.NewRequest(&rivorav1.ResumeSubscriptionRequest{Id: s.GetId()}))
	if err != nil || r.Msg.GetSubscription().GetPaused() || r.Msg.GetSubscription().GetPauses()[0].GetEnd() == nil || r.Msg.GetSubscription().GetPauses()[0].GetReason() != "receiver down" {
		t.Fatalf("resume: %v, %v", r.Msg.GetSubscription(), err)
	}
	_, err = c.ResumeSubscription(ctx, connect.NewRequest(&rivorav1.ResumeSubscriptionRequest{Id: s.GetId()}))
	wantCode(t, "resume twice", err, connect.CodeFailedPrecondition, "not paused")

	_, err = c.RotateSubscriptionSecret(ctx, connect.NewRequest(&rivorav1.RotateSubscriptionSecretRequest{Id: s.GetId(), Secret: secret}))
	wantCode(t, "rotate to the same secret", err, connect.CodeInvalidArgument, "current secret")
	_, err = c.RotateSubscriptionSecret(ctx, connect.NewRequest(&rivorav1.RotateSubscriptionSecretRequest{Id: s.GetId(), Grace: durationpb.New(8 * 24 * time.Hour)}))
	wantCode(t, "rotate with a grace over a week", err, connect.CodeInvalidArgument, "grace")
	rot, err := c.RotateSubscriptionSecret(ctx, connect.NewRequest(&rivorav1.RotateSubscriptionSecretRequest{Id: s.GetId(), Grace: durationpb.New(time.Hour)}))
	if err != nil {
		t.Fatal(err)
	}
	rs := rot.Msg.GetSubscription()
	if !strings.HasPrefix(rs.GetSecret(), "whsec_") || rs.GetSecret() == secret || rs.GetPreviousSecret() != "" || rs.GetPreviousSecretFingerprint() != auth.Fingerprint(secret) || rs.GetPreviousSecretExpiresAt() == nil {
		t.Fatalf("rotate answered %v; want the new secret, the previous one's fingerprint and expiry", rs)
	}

	audit, err := d.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "erp"}))
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range audit.Msg.GetEntries() {
		if strings.HasPrefix(e.GetAction(), "subscription.") {
			actions = append(actions, e.GetAction())
			if !strings.HasPrefix(e.GetAuthor(), "test-operator-") || strings.Contains(e.GetDetail(), secret) || strings.Contains(e.GetDetail(), rs.GetSecret()) {
				t.Errorf("audit entry %v: want the operator token as author, and no secret", e)
			}
		}
	}
	want := []string{"subscription.create", "subscription.update", "subscription.update", "subscription.pause", "subscription.resume", "subscription.rotate_secret"}
	if !slices.Equal(actions, want) {
		t.Fatalf("audited %v, want %v", actions, want)
	}
}

// A subscription signed with its destination's secret that gets its own
// keeps the destination's signing for the grace (destination_secret_until,
// the secret itself never copied); with no grace, or at its next
// rotation, that ends.
func TestSubscriptionsFirstOwnSecretKeepsTheDestinationsForTheGrace(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	ops := d.Token(rivorav1.Role_ROLE_OPERATOR)
	c := d.subs(ops)
	ctx := context.Background()
	rotate := func(grace time.Duration, types string) *rivorav1.Subscription {
		s := d.subscribe(ops, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{types}})
		rot, err := c.RotateSubscriptionSecret(ctx, connect.NewRequest(&rivorav1.RotateSubscriptionSecretRequest{Id: s.GetId(), Grace: durationpb.New(grace)}))
		if err != nil {
			t.Fatal(err)
		}
		return rot.Msg.GetSubscription()
	}
	before := time.Now()
	rs := rotate(time.Hour, "order.*")
	until := rs.GetDestinationSecretUntil().AsTime()
	if rs.GetPreviousSecret() != "" || rs.GetPreviousSecretFingerprint() != "" || until.Before(before.Add(time.Hour)) || until.After(time.Now().Add(time.Hour)) {
		t.Fatalf("first own secret with a grace of 1h: %v; want destination_secret_until an hour on, no previous secret", rs)
	}
	audit, err := d.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "erp"}))
	if err != nil {
		t.Fatal(err)
	}
	if last := audit.Msg.GetEntries()[len(audit.Msg.GetEntries())-1]; !strings.Contains(last.GetDetail(), "its destination's secret signs too until") {
		t.Errorf("audited %q, want it to say the destination's secret signs too", last.GetDetail())
	}
	again, err := c.RotateSubscriptionSecret(ctx, connect.NewRequest(&rivorav1.RotateSubscriptionSecretRequest{Id: rs.GetId(), Grace: durationpb.New(time.Hour)}))
	if err != nil || again.Msg.GetSubscription().GetDestinationSecretUntil() != nil || again.Msg.GetSubscription().GetPreviousSecretFingerprint() != auth.Fingerprint(rs.GetSecret()) {
		t.Fatalf("next rotation: %v, %v; want the subscription's previous secret signing, not the destination's", again.Msg.GetSubscription(), err)
	}
	if rs := rotate(0, "invoice.*"); rs.GetDestinationSecretUntil() != nil {
		t.Fatalf("first own secret without grace: %v; want the destination's secret to stop at once", rs)
	}
}

// A customer token's --wait reads the config status: whether each agent
// is connected and which of the token's own changes it applied, nothing
// of who the agents are, what they own, the edges, or the cell's config
// version (which others' changes move).
func TestCustomerTokenSeesOnlyWhatTheAgentsApplied(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), true)
	ctx := context.Background()
	c1 := d.adminAs(d.Token(rivorav1.Role_ROLE_CUSTOMER, "c1"))
	own, err := c1.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c1-own", Url: "https://c1.example.com/hook", OwnerCustomer: "c1"}))
	if err != nil {
		t.Fatal(err)
	}
	version := own.Msg.GetVersion()
	// Others' changes after c1's: the cell's version moves on, c1 is not
	// told (the version would let it watch other customers' changes).
	d.create(&rivorav1.CreateDestinationRequest{Id: "shared", Url: "https://erp.example.com/ingest"})
	later := d.create(&rivorav1.CreateDestinationRequest{Id: "shared-2", Url: "https://erp.example.com/ingest"}).GetVersion()
	d.WaitApplied(later)
	full, err := d.Admin.GetConfigStatus(ctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil || len(full.Msg.GetAgents()) != 1 || full.Msg.GetAgents()[0].GetName() == "" || full.Msg.GetVersion() < later {
		t.Fatalf("the admin's config status: %v, %v; want the agent, named, and version %d or later", full.Msg, err, later)
	}
	st, err := c1.GetConfigStatus(ctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		t.Fatalf("a customer token's config status: %v", err)
	}
	want := &rivorav1.GetConfigStatusResponse{Version: version, Agents: []*rivorav1.AgentStatus{{Connected: true, AppliedVersion: version}}}
	if !proto.Equal(st.Msg, want) {
		t.Fatalf("a customer token's config status: %v; want only %v (its own change's version, %d, not the cell's, %d)", st.Msg, want, version, full.Msg.GetVersion())
	}
	// A token that changed nothing learns no version at all.
	c2 := d.adminAs(d.Token(rivorav1.Role_ROLE_CUSTOMER, "c2"))
	st, err = c2.GetConfigStatus(ctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if want := (&rivorav1.GetConfigStatusResponse{Agents: []*rivorav1.AgentStatus{{Connected: true}}}); err != nil || !proto.Equal(st.Msg, want) {
		t.Fatalf("the config status of a customer token that changed nothing: %v, %v; want only %v", st.Msg, err, want)
	}
}

// A customer token reaches only its customers' subscriptions and the
// destinations they own; another customer's answer not_found, word for
// word as an absent id's.
func TestCustomerTokenScope(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	c1, c2 := d.Token(rivorav1.Role_ROLE_CUSTOMER, "c1"), d.Token(rivorav1.Role_ROLE_CUSTOMER, "c2")

	// Own destinations: owned, default limits only.
	_, err := d.adminAs(c1).CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c1-own", Url: "https://c1.example.com/hook"}))
	wantCode(t, "customer creates a destination it does not own", err, connect.CodePermissionDenied, "owner_customer")
	_, err = d.adminAs(c1).CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c1-own", Url: "https://c1.example.com/hook", OwnerCustomer: "c2"}))
	wantCode(t, "customer creates c2's destination", err, connect.CodePermissionDenied, "c2")
	_, err = d.adminAs(c1).CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c1-own", Url: "https://c1.example.com/hook", OwnerCustomer: "c1", Limits: &rivorav1.Limits{RatePerSecond: 1000}}))
	wantCode(t, "customer sets limits", err, connect.CodePermissionDenied, "default limits")
	_, err = d.adminAs(c1).CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c1-own", Url: "http://169.254.169.254/latest", OwnerCustomer: "c1"}))
	wantCode(t, "customer's destination on a metadata address", err, connect.CodeInvalidArgument)
	own, err := d.adminAs(c1).CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c1-own", Url: "https://c1.example.com/hook", OwnerCustomer: "c1"}))
	if err != nil || own.Msg.GetDestination().GetOwnerCustomer() != "c1" || own.Msg.GetDestination().GetSecret() == "" {
		t.Fatalf("c1 creates its own destination: %v, %v", own.Msg.GetDestination(), err)
	}
	if _, err := d.adminAs(c2).CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c2-own", Url: "https://c2.example.com/hook", OwnerCustomer: "c2"})); err != nil {
		t.Fatal(err)
	}
	// Ids are one namespace: c1 cannot take c2's, and learns only that.
	_, err = d.adminAs(c1).CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c2-own", Url: "https://c1.example.com/hook", OwnerCustomer: "c1"}))
	wantCode(t, "c1 creates a destination under c2's id", err, connect.CodeAlreadyExists, "is taken; choose another id")
	// An operator steers c1's destination; c1 does not see how.
	if _, err := d.Admin.SetLimitsOverride(ctx, connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{DestinationId: "c1-own", Reason: "c1 floods its partner", RatePerSecond: new(5.0)})); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Admin.SetPriority(ctx, connect.NewRequest(&rivorav1.SetPriorityRequest{DestinationId: "c1-own", CustomerId: "c9", Weight: new(3.0)})); err != nil {
		t.Fatal(err)
	}
	list, err := d.adminAs(c1).ListDestinations(ctx, connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil || len(list.Msg.GetDestinations()) != 1 || list.Msg.GetDestinations()[0].GetId() != "c1-own" {
		t.Fatalf("c1 lists destinations: %v, %v; want only c1-own", list.Msg.GetDestinations(), err)
	}
	if got := list.Msg.GetDestinations()[0]; got.GetOverride() != nil || len(got.GetCustomerWeights()) != 0 || got.GetSecret() != "" {
		t.Fatalf("c1 sees its destination as %v; want no override, no other customer's weight, no secret", got)
	}
	sameAsAbsent := func(what string, call func(id string) error, theirs, absent string) {
		t.Helper()
		a, b := call(theirs), call(absent)
		if connect.CodeOf(a) != connect.CodeNotFound || connect.CodeOf(b) != connect.CodeNotFound {
			t.Errorf("%s: theirs %v, absent %v; want not_found for both", what, a, b)
			return
		}
		if x, y := strings.ReplaceAll(a.Error(), theirs, "ID"), strings.ReplaceAll(b.Error(), absent, "ID"); x != y || strings.Contains(x, "c2") {
			t.Errorf("%s: theirs %q, absent %q; want the same words, naming no customer", what, x, y)
		}
	}
	for _, call := range []struct {
		what string
		fn   func(id string) error
	}{
		{"get destination", func(id string) error {
			_, err := d.adminAs(c1).GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: id}))
			return err
		}},
		{"delete destination", func(id string) error {
			_, err := d.adminAs(c1).DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: id, Force: true}))
			return err
		}},
		{"rotate destination secret", func(id string) error {
			_, err := d.adminAs(c1).RotateDestinationSecret(ctx, connect.NewRequest(&rivorav1.RotateDestinationSecretRequest{DestinationId: id}))
			return err
		}},
		{"destination health", func(id string) error {
			_, err := d.adminAs(c1).GetDestinationHealth(ctx, connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: id}))
			return err
		}},
		{"subscribe to it", func(id string) error {
			_, err := d.subs(c1).CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: id, Types: []string{"*"}}))
			return err
		}},
	} {
		sameAsAbsent("c1: "+call.what+" of c2's destination", call.fn, "c2-own", "absent-dest")
	}
	// A shared destination: c1 may subscribe (not see it).
	_, err = d.adminAs(c1).GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "erp"}))
	wantCode(t, "c1 gets the shared destination", err, connect.CodeNotFound)
	mine := d.subscribe(c1, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.*"}})
	d.subscribe(c1, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "c1-own", Types: []string{"*"}, GenerateSecret: true})
	theirs := d.subscribe(c2, &rivorav1.CreateSubscriptionRequest{CustomerId: "c2", DestinationId: "erp", Types: []string{"order.*"}})
	_, err = d.subs(c1).CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "c2", DestinationId: "erp", Types: []string{"*"}}))
	wantCode(t, "c1 subscribes for c2", err, connect.CodePermissionDenied, "c2")
	_, err = d.subs(c1).ListSubscriptions(ctx, connect.NewRequest(&rivorav1.ListSubscriptionsRequest{CustomerId: "c2"}))
	wantCode(t, "c1 lists c2's subscriptions", err, connect.CodePermissionDenied)
	subs, err := d.subs(c1).ListSubscriptions(ctx, connect.NewRequest(&rivorav1.ListSubscriptionsRequest{}))
	if err != nil || len(subs.Msg.GetSubscriptions()) != 2 || slices.ContainsFunc(subs.Msg.GetSubscriptions(), func(s *rivorav1.Subscription) bool { return s.GetCustomerId() != "c1" }) {
		t.Fatalf("c1 lists subscriptions: %v, %v; want its two", subs.Msg.GetSubscriptions(), err)
	}
	absent := "sub_0000000000000000"
	for _, call := range []struct {
		what string
		fn   func(id string) error
	}{
		{"get", func(id string) error {
			_, err := d.subs(c1).GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: id}))
			return err
		}},
		{"update", func(id string) error {
			_, err := d.subs(c1).UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: id, Description: new("x")}))
			return err
		}},
		{"pause", func(id string) error {
			_, err := d.subs(c1).PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: id, Reason: "x"}))
			return err
		}},
		{"resume", func(id string) error {
			_, err := d.subs(c1).ResumeSubscription(ctx, connect.NewRequest(&rivorav1.ResumeSubscriptionRequest{Id: id}))
			return err
		}},
		{"rotate", func(id string) error {
			_, err := d.subs(c1).RotateSubscriptionSecret(ctx, connect.NewRequest(&rivorav1.RotateSubscriptionSecretRequest{Id: id}))
			return err
		}},
		{"delete", func(id string) error {
			_, err := d.subs(c1).DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: id, Force: true}))
			return err
		}},
	} {
		sameAsAbsent("c1: "+call.what+" c2's subscription", call.fn, theirs.GetId(), absent)
	}
	if _, err := d.subs(c1).PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: mine.GetId(), Reason: "x"})); err != nil {
		t.Fatalf("c1 pauses its own subscription: %v", err)
	}
	// Never admin state.
	for what, err := range map[string]error{
		"pause a destination": func() error {
			_, err := d.adminAs(c1).PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "c1-own", Reason: "x"}))
			return err
		}(),
		"update its destination": func() error {
			_, err := d.adminAs(c1).UpdateDestination(ctx, connect.NewRequest(&rivorav1.UpdateDestinationRequest{Id: "c1-own", RatePerSecond: new(1e5)}))
			return err
		}(),
		"list tokens": func() error {
			_, err := rivorav1connect.NewTokenServiceClient(d.HTTPClient(), d.URL, d.As(c1)).ListTokens(ctx, connect.NewRequest(&rivorav1.ListTokensRequest{}))
			return err
		}(),
		"read the audit": func() error {
			_, err := d.adminAs(c1).ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{}))
			return err
		}(),
		"create an event type": func() error {
			_, err := d.types(c1).CreateEventType(ctx, connect.NewRequest(&rivorav1.CreateEventTypeRequest{Name: "x"}))
			return err
		}(),
	} {
		wantCode(t, "c1: "+what, err, connect.CodePermissionDenied)
	}
	who, err := rivorav1connect.NewTokenServiceClient(d.HTTPClient(), d.URL, d.As(c1)).WhoAmI(ctx, connect.NewRequest(&rivorav1.WhoAmIRequest{}))
	if err != nil || who.Msg.GetToken().GetRole() != rivorav1.Role_ROLE_CUSTOMER || !slices.Equal(who.Msg.GetToken().GetCustomers(), []string{"c1"}) {
		t.Fatalf("c1's WhoAmI: %v, %v", who.Msg.GetToken(), err)
	}
	if _, err := d.types(c1).ListEventTypes(ctx, connect.NewRequest(&rivorav1.ListEventTypesRequest{})); err != nil {
		t.Fatalf("c1 reads the catalogue: %v", err)
	}
	// Admins see everything, viewers read subscriptions.
	viewer := d.Token(rivorav1.Role_ROLE_VIEWER)
	all, err := d.subs(viewer).ListSubscriptions(ctx, connect.NewRequest(&rivorav1.ListSubscriptionsRequest{}))
	if err != nil || len(all.Msg.GetSubscriptions()) != 3 {
		t.Fatalf("viewer lists subscriptions: %d, %v; want 3", len(all.Msg.GetSubscriptions()), err)
	}
	_, err = d.subs(viewer).PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: theirs.GetId(), Reason: "x"}))
	wantCode(t, "viewer pauses a subscription", err, connect.CodePermissionDenied)
	// The owner's delete of its own destination with a subscription is
	// refused without force, naming it.
	_, err = d.adminAs(c1).DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "c1-own"}))
	wantCode(t, "c1 deletes its destination with a subscription", err, connect.CodeFailedPrecondition, "1 subscription (sub_", "--force")
}

// A customer's subscriptions are bounded.
// A customer token chooses which of its events go to a shared destination,
// not where or with which headers: a path, URL or header there could
// speak for another customer at the partner. An operator may set them,
// and a customer may on its own destination.
func TestACustomerCannotRouteOnASharedDestination(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	c1 := d.Token(rivorav1.Role_ROLE_CUSTOMER, "c1")
	if _, err := d.adminAs(c1).CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c1-own", Url: "https://c1.example.com/hook", OwnerCustomer: "c1"})); err != nil {
		t.Fatal(err)
	}
	routed := map[string]func(*rivorav1.CreateSubscriptionRequest){
		"path":   func(r *rivorav1.CreateSubscriptionRequest) { r.Path = "/in/c2" },
		"url":    func(r *rivorav1.CreateSubscriptionRequest) { r.Url = "https://erp.example.com/in/c2" },
		"header": func(r *rivorav1.CreateSubscriptionRequest) { r.Headers = []*rivorav1.Header{hdr("X-Tenant", "c2")} },
	}
	for name, set := range routed {
		req := &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.*"}}
		set(req)
		_, err := d.subs(c1).CreateSubscription(ctx, connect.NewRequest(req))
		wantCode(t, "c1 subscribes to the shared destination with a "+name, err, connect.CodePermissionDenied, "shared")
		req.DestinationId = "c1-own"
		if name == "url" {
			req.Url = "https://c1.example.com/other"
		}
		d.subscribe(c1, req)
		req.DestinationId = "erp"
		if name == "url" {
			req.Url = "https://erp.example.com/in/c1"
		}
		d.subscribe(d.AdminToken, req)
	}
	plain := d.subscribe(c1, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.*"}})
	for name, req := range map[string]*rivorav1.UpdateSubscriptionRequest{
		"path":           {Id: plain.GetId(), Path: new("/in/c2")},
		"header":         {Id: plain.GetId(), SetHeaders: []*rivorav1.Header{hdr("X-Tenant", "c2")}},
		"header removal": {Id: plain.GetId(), RemoveHeaders: []string{"X-Tenant"}},
	} {
		_, err := d.subs(c1).UpdateSubscription(ctx, connect.NewRequest(req))
		wantCode(t, "c1 updates its shared subscription's "+name, err, connect.CodePermissionDenied, "shared")
	}
	if _, err := d.subs(c1).UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: plain.GetId(), Filter: new("data.amount > 1")})); err != nil {
		t.Fatalf("c1 changes its shared subscription's filter: %v", err)
	}
}

func TestSubscriptionsPerCustomerBounded(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	// Each its own types: an identical one is refused as a duplicate.
	for i := range controlplane.MaxSubscriptionsPerCustomer {
		d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "whale", DestinationId: "erp", Types: []string{fmt.Sprintf("t%d.*", i)}})
	}
	_, err := d.subs(d.AdminToken).CreateSubscription(context.Background(), connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "whale", DestinationId: "erp", Types: []string{"*"}}))
	wantCode(t, "one subscription over the bound", err, connect.CodeResourceExhausted, `customer "whale" has 100 subscriptions`, "stores one more delivery")
	// A cap, not back-pressure: the reason tells a client not to retry.
	if md, ok := errkind.Info(err, errkind.LimitReachedReason); !ok || md["limit"] != "subscriptions_per_customer" || md["max"] != "100" {
		t.Errorf("the refusal's %s detail: %v (found %v); want limit subscriptions_per_customer, max 100", errkind.LimitReachedReason, md, ok)
	}
	d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "minnow", DestinationId: "erp", Types: []string{"*"}})
}

// An exact duplicate of one of the customer's subscriptions (same
// destination, the same types in any order, filter, path, URL and
// headers) is refused at create with already_exists naming it: it would
// send each event twice. Anything that changes what is sent or where
// makes another subscription; another customer's identical one is no
// duplicate (and is never named). Of identical creates at once, one
// succeeds.
func TestDuplicateSubscriptionIsRefused(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	base := &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.*", "invoice.paid"},
		Filter: "data.amount > 100", Path: "/acme", Headers: []*rivorav1.Header{{Name: "x-tenant", Value: "acme"}}}
	first := d.subscribe(d.AdminToken, base)
	create := func(token string, m *rivorav1.CreateSubscriptionRequest) error {
		_, err := d.subs(token).CreateSubscription(ctx, connect.NewRequest(m))
		return err
	}
	twin := proto.Clone(base).(*rivorav1.CreateSubscriptionRequest)
	twin.Types = []string{"invoice.paid", "order.*"}
	twin.Description, twin.GenerateSecret = "again", true
	wantCode(t, "an identical subscription (types reordered, its own secret)", create(d.AdminToken, twin), connect.CodeAlreadyExists, first.GetId(), "twice")
	// A customer token is told its own subscription's id; another
	// customer's identical one is no duplicate of it.
	c1, c2 := d.Token(rivorav1.Role_ROLE_CUSTOMER, "c1"), d.Token(rivorav1.Role_ROLE_CUSTOMER, "c2")
	own := d.subscribe(c1, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"refund.*"}})
	wantCode(t, "c1's twin of its own", create(c1, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"refund.*"}}),
		connect.CodeAlreadyExists, own.GetId())
	if err := create(c2, &rivorav1.CreateSubscriptionRequest{CustomerId: "c2", DestinationId: "erp", Types: []string{"refund.*"}}); err != nil {
		t.Errorf("c2's subscription identical to c1's but for the customer: %v, want created", err)
	}
	for what, change := range map[string]func(m *rivorav1.CreateSubscriptionRequest){
		"other types":    func(m *rivorav1.CreateSubscriptionRequest) { m.Types = []string{"order.*"} },
		"another filter": func(m *rivorav1.CreateSubscriptionRequest) { m.Filter = "data.amount > 200" },
		"another path":   func(m *rivorav1.CreateSubscriptionRequest) { m.Path = "/other" },
		"another header value": func(m *rivorav1.CreateSubscriptionRequest) {
			m.Headers = []*rivorav1.Header{{Name: "X-Tenant", Value: "other"}}
		},
		"another customer": func(m *rivorav1.CreateSubscriptionRequest) { m.CustomerId = "c2" },
	} {
		m := proto.Clone(base).(*rivorav1.CreateSubscriptionRequest)
		change(m)
		if err := create(d.AdminToken, m); err != nil {
			t.Errorf("a subscription with %s: %v, want created", what, err)
		}
	}
	// A paused twin: the answer says to resume it.
	paused := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c3", DestinationId: "erp", Types: []string{"*"}})
	if _, err := d.subs(d.AdminToken).PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: paused.GetId(), Reason: "test"})); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "a paused subscription's twin", create(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c3", DestinationId: "erp", Types: []string{"*"}}),
		connect.CodeAlreadyExists, paused.GetId(), "resume")

	// Identical creates at once: each change sees the one before.
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			errs <- create(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c4", DestinationId: "erp", Types: []string{"*"}})
		}()
	}
	created := 0
	for range n {
		switch err := <-errs; {
		case err == nil:
			created++
		case connect.CodeOf(err) == connect.CodeAlreadyExists:
		default:
			t.Errorf("a concurrent identical create: %v", err)
		}
	}
	list, err := d.subs(d.AdminToken).ListSubscriptions(ctx, connect.NewRequest(&rivorav1.ListSubscriptionsRequest{CustomerId: "c4"}))
	if err != nil || created != 1 || len(list.Msg.GetSubscriptions()) != 1 {
		t.Fatalf("%d identical creates at once: %d created, %d stored (%v); want 1", n, created, len(list.Msg.GetSubscriptions()), err)
	}
}

// Get counts a subscription's pending events through the agents; delete
// is refused while there are some, and with force archives them (the
// agents are asked for that subscription only) before it deletes. A
// destination with subscriptions is deleted only with force, which
// deletes them too. destination_state comes from the agents' health.
func TestSubscriptionDeleteAndStateThroughTheAgents(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	f := startFakeAgent(t, d)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	d.create(&rivorav1.CreateDestinationRequest{Id: "crm", Url: "https://crm.example.com/ingest"})
	s1 := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"*"}})
	s2 := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c2", DestinationId: "crm", Types: []string{"*"}})
	f.setPending("erp", s1.GetId(), 3)
	f.mu.Lock()
	f.health = []*rivorav1.DestinationHealth{{DestinationId: "erp", State: "parked"}, {DestinationId: "crm", State: "degraded"}}
	f.mu.Unlock()
	c := d.subs(d.AdminToken)

	got, err := c.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: s1.GetId()}))
	if err != nil || got.Msg.GetPending() != 3 || got.Msg.GetSubscription().GetDestinationState() != "down" {
		t.Fatalf("get: %v, %v; want 3 pending, destination down (parked)", got.Msg, err)
	}
	list, err := c.ListSubscriptions(ctx, connect.NewRequest(&rivorav1.ListSubscriptionsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Msg.GetSubscriptions() {
		if want := map[string]string{s1.GetId(): "down", s2.GetId(): "degraded"}[s.GetId()]; s.GetDestinationState() != want {
			t.Errorf("%s's destination_state %q, want %q", s.GetId(), s.GetDestinationState(), want)
		}
	}
	if _, err := d.Admin.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "crm", Reason: "x"})); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: s2.GetId()})); got.Msg.GetSubscription().GetDestinationState() != "paused" {
		t.Fatalf("paused destination: state %q", got.Msg.GetSubscription().GetDestinationState())
	}

	_, err = c.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: s1.GetId()}))
	wantCode(t, "delete with pending events", err, connect.CodeFailedPrecondition, "3 pending events", "--force")
	del, err := c.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: s1.GetId(), Force: true}))
	if err != nil || del.Msg.GetArchived() != 3 {
		t.Fatalf("forced delete: %v, %v; want 3 archived", del.Msg, err)
	}
	f.mu.Lock()
	archived := slices.Clone(f.archived)
	f.mu.Unlock()
	if !slices.Equal(archived, [][2]string{{"erp", s1.GetId()}}) {
		t.Fatalf("the agents were asked to archive %v, want erp's lanes of %s only", archived, s1.GetId())
	}
	_, err = c.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: s1.GetId()}))
	wantCode(t, "get after delete", err, connect.CodeNotFound)
	f.received(t, "the deletion on the feed", func(msgs []*rivorav1.WatchResponse) bool {
		return slices.ContainsFunc(msgs, func(m *rivorav1.WatchResponse) bool {
			return slices.Contains(m.GetRemovedSubscriptionIds(), s1.GetId())
		})
	})

	_, err = d.Admin.DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "crm"}))
	wantCode(t, "delete a destination with a subscription", err, connect.CodeFailedPrecondition, "1 subscription ("+s2.GetId()+")", "--force")
	f.setPending("crm", "", 2)
	gone, err := d.Admin.DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "crm", Force: true}))
	if err != nil || gone.Msg.GetArchived() != 2 {
		t.Fatalf("forced destination delete: %v, %v", gone.Msg, err)
	}
	_, err = c.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: s2.GetId()}))
	wantCode(t, "its subscription after a forced destination delete", err, connect.CodeNotFound)
}

// A forced delete asks the agents to archive even when they counted
// nothing pending: an event accepted but not yet in its partition's
// lanes is not counted, and the archive waits for it (owner.awaitMoved).
// Without force, nothing pending deletes at once, with no archive.
func TestForcedDeleteArchivesWhenNothingWasCounted(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	f := startFakeAgent(t, d)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	d.create(&rivorav1.CreateDestinationRequest{Id: "crm", Url: "https://crm.example.com/ingest"})
	forced := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"*"}})
	plain := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c2", DestinationId: "erp", Types: []string{"*"}})
	c := d.subs(d.AdminToken)

	if _, err := c.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: plain.GetId()})); err != nil {
		t.Fatalf("delete with nothing pending: %v", err)
	}
	if _, err := c.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: forced.GetId(), Force: true})); err != nil {
		t.Fatalf("forced delete with nothing counted pending: %v", err)
	}
	if _, err := d.Admin.DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "crm", Force: true})); err != nil {
		t.Fatalf("forced destination delete with nothing counted pending: %v", err)
	}
	f.mu.Lock()
	archived := slices.Clone(f.archived)
	f.mu.Unlock()
	if want := [][2]string{{"erp", forced.GetId()}, {"crm", ""}}; !slices.Equal(archived, want) {
		t.Fatalf("the agents were asked to archive %v, want %v (the forced deletes only)", archived, want)
	}
}

// A deprecated type is no longer offered for new subscriptions: naming it
// exactly is refused, a glob still takes it, and a subscription that had
// it keeps it through other edits.
func TestDeprecatedTypeNotOfferedForNewSubscriptions(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	types := d.types(d.AdminToken)
	if _, err := types.CreateEventType(ctx, connect.NewRequest(&rivorav1.CreateEventTypeRequest{Name: "order.legacy"})); err != nil {
		t.Fatal(err)
	}
	had := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.legacy"}})
	other := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.created"}})
	if _, err := types.DeprecateEventType(ctx, connect.NewRequest(&rivorav1.DeprecateEventTypeRequest{Name: "order.legacy"})); err != nil {
		t.Fatal(err)
	}
	c := d.subs(d.AdminToken)
	_, err := c.CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "c2", DestinationId: "erp", Types: []string{"order.legacy"}}))
	wantCode(t, "a new subscription to a deprecated type", err, connect.CodeInvalidArgument, `"order.legacy" is deprecated`)
	_, err = c.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: other.GetId(), SetTypes: true, Types: []string{"order.created", "order.legacy"}}))
	wantCode(t, "adding a deprecated type", err, connect.CodeInvalidArgument, `"order.legacy" is deprecated`)
	if _, err := c.CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "c2", DestinationId: "erp", Types: []string{"order.*"}})); err != nil {
		t.Fatalf("a glob that takes the deprecated type: %v", err)
	}
	up, err := c.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: had.GetId(), Description: new("still wanted")}))
	if err != nil || !slices.Equal(up.Msg.GetSubscription().GetTypes(), []string{"order.legacy"}) {
		t.Fatalf("editing a subscription that had the deprecated type: %v, %v; want it kept", up.Msg.GetSubscription(), err)
	}
}

// With --strict-event-types, updating a subscription checks its new types
// against the catalogue (this once locked the store for good: the check
// read the store from within the change).
func TestStrictCellUpdatesSubscriptions(t *testing.T) {
	t.Parallel()
	d := &dev{rigStart(t, func(c *controlplane.Config) { c.StrictEventTypes = true })}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	if _, err := d.types(d.AdminToken).CreateEventType(ctx, connect.NewRequest(&rivorav1.CreateEventTypeRequest{Name: "order.created"})); err != nil {
		t.Fatal(err)
	}
	s := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.created"}})
	c := d.subs(d.AdminToken)
	_, err := c.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: s.GetId(), SetTypes: true, Types: []string{"order.updated"}}))
	wantCode(t, "an update to a type not in the catalogue", err, connect.CodeInvalidArgument, `"order.updated" is not in the event-type catalogue`)
	if _, err := c.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: s.GetId(), Description: new("orders")})); err != nil {
		t.Fatalf("updating a subscription's description in a strict cell: %v", err)
	}
}

// The agents' feed: the snapshot carries every subscription with its
// secrets and header values and the whole catalogue with
// strict_event_types; a change sends the changed subscription, a delete
// its id, a catalogue change the whole catalogue.
func TestFeedCarriesSubscriptionsAndCatalogue(t *testing.T) {
	t.Parallel()
	d := &dev{rigStart(t, func(c *controlplane.Config) { c.StrictEventTypes = true })}
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	if _, err := d.types(d.AdminToken).CreateEventType(ctx, connect.NewRequest(&rivorav1.CreateEventTypeRequest{Name: "order.created"})); err != nil {
		t.Fatal(err)
	}
	_, err := d.subs(d.AdminToken).CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.updated"}}))
	wantCode(t, "a type not in the catalogue with --strict-event-types", err, connect.CodeInvalidArgument, `"order.updated" is not in the event-type catalogue`)
	before := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"order.created", "invoice.*"}, Secret: secret, Headers: []*rivorav1.Header{hdr("X-Key", "v1")}, Path: "/c1"})

	f := startFakeAgent(t, d)
	msgs := f.received(t, "the snapshot", func(m []*rivorav1.WatchResponse) bool { return len(m) > 0 })
	snap := msgs[0]
	if !snap.GetSnapshot() || len(snap.GetSubscriptions()) != 1 || !snap.GetStrictEventTypes() || !snap.GetEventTypesChanged() || len(snap.GetEventTypes()) != 1 {
		t.Fatalf("snapshot = %v", snap)
	}
	fs := snap.GetSubscriptions()[0]
	if fs.GetId() != before.GetId() || fs.GetSecret() != secret || fs.GetHeaders()[0].GetValue() != "v1" || fs.GetDeliveryUrl() != "https://erp.example.com/c1" {
		t.Fatalf("the feed's subscription %v: want its secret, header value and delivery URL", fs)
	}

	rot, err := d.subs(d.AdminToken).RotateSubscriptionSecret(ctx, connect.NewRequest(&rivorav1.RotateSubscriptionSecretRequest{Id: before.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	msgs = f.received(t, "the rotation", func(m []*rivorav1.WatchResponse) bool { return len(m) > 1 })
	if m := msgs[1]; m.GetSnapshot() || len(m.GetSubscriptions()) != 1 || m.GetSubscriptions()[0].GetSecret() != rot.Msg.GetSubscription().GetSecret() || m.GetSubscriptions()[0].GetPreviousSecret() != secret || m.GetEventTypesChanged() {
		t.Fatalf("after a rotation the feed sent %v; want the subscription with its new and previous secrets, no catalogue", m)
	}
	if _, err := d.types(d.AdminToken).CreateEventType(ctx, connect.NewRequest(&rivorav1.CreateEventTypeRequest{Name: "order.updated", Schema: `{"type":"object"}`})); err != nil {
		t.Fatal(err)
	}
	msgs = f.received(t, "the catalogue change", func(m []*rivorav1.WatchResponse) bool { return len(m) > 2 })
	if m := msgs[2]; !m.GetEventTypesChanged() || len(m.GetEventTypes()) != 2 || !m.GetStrictEventTypes() || len(m.GetSubscriptions()) != 0 {
		t.Fatalf("after a new type the feed sent %v; want the whole catalogue", m)
	}
	if _, err := d.subs(d.AdminToken).DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: before.GetId()})); err != nil {
		t.Fatal(err)
	}
	msgs = f.received(t, "the deletion", func(m []*rivorav1.WatchResponse) bool { return len(m) > 3 })
	if m := msgs[3]; !slices.Equal(m.GetRemovedSubscriptionIds(), []string{before.GetId()}) || len(m.GetSubscriptions()) != 0 {
		t.Fatalf("after a delete the feed sent %v", m)
	}
}

// The catalogue: a type's name and schema are checked at create (the
// compiler's message), deprecation hides it from the default list and is
// undone, ListEventTypes tells whether the cell is strict.
func TestEventTypes(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	c := d.types(d.AdminToken)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		req      *rivorav1.CreateEventTypeRequest
		mentions []string
	}{
		{"empty name", &rivorav1.CreateEventTypeRequest{}, []string{"1–128 bytes"}},
		{"bad name", &rivorav1.CreateEventTypeRequest{Name: "order created"}, []string{`' ' at byte 5`}},
		{"schema not JSON", &rivorav1.CreateEventTypeRequest{Name: "a", Schema: "{"}, []string{"schema"}},
		{"schema with an unknown type", &rivorav1.CreateEventTypeRequest{Name: "a", Schema: `{"type":"banana"}`}, []string{"schema"}},
		{"schema with an external ref", &rivorav1.CreateEventTypeRequest{Name: "a", Schema: `{"$ref":"https://example.com/s.json"}`}, []string{"schema"}},
		{"schema with a reference cycle", &rivorav1.CreateEventTypeRequest{Name: "a", Schema: `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`}, []string{"reference cycle", "#/$defs/a → #/$defs/a"}},
		{"long description", &rivorav1.CreateEventTypeRequest{Name: "a", Description: strings.Repeat("x", 1025)}, []string{"description"}},
	} {
		_, err := c.CreateEventType(ctx, connect.NewRequest(tc.req))
		wantCode(t, tc.name, err, connect.CodeInvalidArgument, tc.mentions...)
	}
	schema := `{"type":"object","required":["amount"],"properties":{"amount":{"type":"number"}}}`
	created, err := c.CreateEventType(ctx, connect.NewRequest(&rivorav1.CreateEventTypeRequest{Name: "order.created", Description: "an order was placed", Schema: schema}))
	if err != nil || created.Msg.GetEventType().GetSchema() != schema || created.Msg.GetVersion() == 0 {
		t.Fatalf("create: %v, %v", created.Msg, err)
	}
	_, err = c.CreateEventType(ctx, connect.NewRequest(&rivorav1.CreateEventTypeRequest{Name: "order.created"}))
	wantCode(t, "create twice", err, connect.CodeAlreadyExists, "event-types update")
	if _, err := c.CreateEventType(ctx, connect.NewRequest(&rivorav1.CreateEventTypeRequest{Name: "invoice.paid"})); err != nil {
		t.Fatal(err)
	}
	_, err = c.UpdateEventType(ctx, connect.NewRequest(&rivorav1.UpdateEventTypeRequest{Name: "order.created"}))
	wantCode(t, "empty update", err, connect.CodeInvalidArgument, "nothing to update")
	_, err = c.UpdateEventType(ctx, connect.NewRequest(&rivorav1.UpdateEventTypeRequest{Name: "order.created", Schema: new(`{"type":1}`)}))
	wantCode(t, "update to a bad schema", err, connect.CodeInvalidArgument, "schema")
	_, err = c.UpdateEventType(ctx, connect.NewRequest(&rivorav1.UpdateEventTypeRequest{Name: "order.created", Schema: new(`{"anyOf":[{"type":"string"},{"$ref":"#"}]}`)}))
	wantCode(t, "update to a schema with a reference cycle", err, connect.CodeInvalidArgument, "reference cycle")
	up, err := c.UpdateEventType(ctx, connect.NewRequest(&rivorav1.UpdateEventTypeRequest{Name: "order.created", Schema: new("")}))
	if err != nil || up.Msg.GetEventType().GetSchema() != "" || up.Msg.GetEventType().GetDescription() != "an order was placed" {
		t.Fatalf("schema removed: %v, %v", up.Msg, err)
	}
	_, err = c.GetEventType(ctx, connect.NewRequest(&rivorav1.GetEventTypeRequest{Name: "nope"}))
	wantCode(t, "get an absent type", err, connect.CodeNotFound, "event-types list")
	if _, err := c.DeprecateEventType(ctx, connect.NewRequest(&rivorav1.DeprecateEventTypeRequest{Name: "invoice.paid"})); err != nil {
		t.Fatal(err)
	}
	_, err = c.DeprecateEventType(ctx, connect.NewRequest(&rivorav1.DeprecateEventTypeRequest{Name: "invoice.paid"}))
	wantCode(t, "deprecate twice", err, connect.CodeFailedPrecondition, "deprecated already")
	names := func(include bool) []string {
		resp, err := c.ListEventTypes(ctx, connect.NewRequest(&rivorav1.ListEventTypesRequest{IncludeDeprecated: include}))
		if err != nil || resp.Msg.GetStrict() {
			t.Fatalf("list: %v, strict %v", err, resp.Msg.GetStrict())
		}
		var out []string
		for _, et := range resp.Msg.GetEventTypes() {
			out = append(out, et.GetName())
		}
		return out
	}
	if got := names(false); !slices.Equal(got, []string{"order.created"}) {
		t.Fatalf("list = %v, want the deprecated type left out", got)
	}
	if got := names(true); !slices.Equal(got, []string{"invoice.paid", "order.created"}) {
		t.Fatalf("list with deprecated = %v", got)
	}
	undone, err := c.DeprecateEventType(ctx, connect.NewRequest(&rivorav1.DeprecateEventTypeRequest{Name: "invoice.paid", Undo: true}))
	if err != nil || undone.Msg.GetEventType().GetDeprecated() {
		t.Fatalf("undo: %v, %v", undone.Msg, err)
	}
	publisher := d.Token(rivorav1.Role_ROLE_PUBLISHER, "c1")
	if _, err := d.types(publisher).GetEventType(ctx, connect.NewRequest(&rivorav1.GetEventTypeRequest{Name: "order.created"})); err != nil {
		t.Fatalf("a publisher reads the catalogue: %v", err)
	}
	_, err = d.types(d.Token(rivorav1.Role_ROLE_OPERATOR)).DeprecateEventType(ctx, connect.NewRequest(&rivorav1.DeprecateEventTypeRequest{Name: "order.created"}))
	wantCode(t, "an operator deprecates", err, connect.CodePermissionDenied)
}

// Subscriptions and the catalogue survive a restart.
func TestSubscriptionsPersist(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDev(t, dir, false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	s := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"*"}, Secret: secret})
	if _, err := d.types(d.AdminToken).CreateEventType(context.Background(), connect.NewRequest(&rivorav1.CreateEventTypeRequest{Name: "order.created"})); err != nil {
		t.Fatal(err)
	}
	admin := d.AdminToken
	d.stop()
	again := &dev{rigStartToken(t, dir, admin)}
	list, err := again.subs(admin).ListSubscriptions(context.Background(), connect.NewRequest(&rivorav1.ListSubscriptionsRequest{}))
	if err != nil || len(list.Msg.GetSubscriptions()) != 1 || list.Msg.GetSubscriptions()[0].GetSecretFingerprint() != s.GetSecretFingerprint() {
		t.Fatalf("after a restart: %v, %v", list.Msg.GetSubscriptions(), err)
	}
	if _, err := again.types(admin).GetEventType(context.Background(), connect.NewRequest(&rivorav1.GetEventTypeRequest{Name: "order.created"})); err != nil {
		t.Fatalf("the catalogue after a restart: %v", err)
	}
}

// With the real agent: a paused subscription holds its events (the other
// subscription's are delivered); its pending count is its own; deleting
// it is refused while they are pending, and with force they become dead
// letters with reason deleted, naming the subscription.
func TestDeleteSubscriptionWithPendingRealAgent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDev(t, dir, true)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL})
	held := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}, Path: "/held"})
	flowing := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "acme", DestinationId: "orders", Types: []string{"order.*"}})
	c := d.subs(d.AdminToken)
	pause, err := c.PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: held.GetId(), Reason: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	d.WaitApplied(pause.Msg.GetVersion())
	var ids []string
	for i := range 3 {
		resp, err := d.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{CustomerId: "acme", LaneKey: fmt.Sprintf("u%d", i%2), Type: "order.created", Payload: []byte(`{}`)}))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Msg.GetRoutes()) != 2 {
			t.Fatalf("fan-out routes %v, want both subscriptions", resp.Msg.GetRoutes())
		}
		for _, r := range resp.Msg.GetRoutes() {
			if r.GetSubscriptionId() == held.GetId() {
				ids = append(ids, r.GetEventId())
			}
		}
	}
	pending := func(id string) int64 {
		g, err := c.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: id}))
		if err != nil {
			return -1
		}
		return g.Msg.GetPending()
	}
	poll.True(t, "3 pending for the paused subscription, none for the other", 15*time.Second, func() bool {
		return pending(held.GetId()) == 3 && pending(flowing.GetId()) == 0
	})
	_, err = c.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: held.GetId()}))
	wantCode(t, "delete with pending", err, connect.CodeFailedPrecondition, "3 pending events", "--force")
	del, err := c.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: held.GetId(), Force: true}))
	if err != nil || del.Msg.GetArchived() != 3 {
		t.Fatalf("forced delete: %v, %v; want 3 archived", del.Msg, err)
	}
	var letters []*rivorav1.DeadLetter
	poll.True(t, "3 dead letters archived", 15*time.Second, func() bool {
		letters = archived(t, filepath.Join(dir, "archive", "deadletter", "orders"))
		return len(letters) >= 3
	})
	var got []string
	for _, dl := range letters {
		if dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_DELETED || dl.GetEvent().GetSubscriptionId() != held.GetId() {
			t.Fatalf("dead letter %v: want reason deleted, subscription %s", dl, held.GetId())
		}
		got = append(got, dl.GetEvent().GetEventId())
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("archived %v, want %v", got, ids)
	}
	_, err = d.Admin.DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "orders"}))
	wantCode(t, "delete the destination of a subscription", err, connect.CodeFailedPrecondition, flowing.GetId())
}

// A dead letter of a deleted subscription is not resent: the resend is
// refused before anything is stored, as a replay of it is (the
// subscription's URL, secret and headers went with it), instead of
// answering success and dying again at once as a second dead letter.
func TestResendOfADeletedSubscriptionsEventIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDev(t, dir, true)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "shared", Url: sink(t).URL})
	sub := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "acme", DestinationId: "shared", Types: []string{"*"}})
	c := d.subs(d.AdminToken)
	pause, err := c.PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: sub.GetId(), Reason: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	d.WaitApplied(pause.Msg.GetVersion())
	pub, err := d.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{CustomerId: "acme", LaneKey: "u1", Type: "order.created", Payload: []byte(`{}`)}))
	if err != nil || len(pub.Msg.GetRoutes()) != 1 {
		t.Fatalf("publish: %v, %v; want one route", pub.Msg, err)
	}
	id := pub.Msg.GetRoutes()[0].GetEventId()
	poll.True(t, "the event pending for the paused subscription", 15*time.Second, func() bool {
		g, err := c.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: sub.GetId()}))
		return err == nil && g.Msg.GetPending() == 1
	})
	del, err := c.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: sub.GetId(), Force: true}))
	if err != nil {
		t.Fatal(err)
	}
	d.WaitApplied(del.Msg.GetVersion())
	dead := func() (*rivorav1.GetEventResponse, bool) {
		resp, err := d.Events.GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
		if err != nil {
			return nil, false
		}
		ev := resp.Msg
		return ev, ev.GetState() == rivorav1.EventState_EVENT_STATE_DEAD && ev.GetDeadReason() == rivorav1.DeadReason_DEAD_REASON_DELETED
	}
	poll.True(t, "the event dead (deleted), its dead letter archived", 15*time.Second, func() bool {
		_, ok := dead()
		return ok && len(archived(t, filepath.Join(dir, "archive", "deadletter", "shared"))) == 1
	})

	_, err = d.Events.ResendEvent(ctx, connect.NewRequest(&rivorav1.ResendEventRequest{EventId: id, Reason: "x"}))
	wantCode(t, "resend of a deleted subscription's dead letter", err, connect.CodeFailedPrecondition, sub.GetId(), "was deleted", "not resent")
	if ev, ok := dead(); !ok || len(ev.GetEpisodes()) != 0 {
		t.Fatalf("after the refused resend the event is %v; want still dead (deleted), accepted once", ev)
	}
}

// A replay of a shared destination whose dead letters include a deleted
// subscription's is refused for every customer, saying how many and
// whose, unless it leaves those in the archive
// (skip_deleted_subscriptions): then it replays the others and says
// what it left. One customer's deletion held every other customer's
// replay.
func TestReplayLeavesADeletedSubscriptionsDeadLettersWhenAsked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDev(t, dir, true)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "shared", Url: sink(t).URL})
	c := d.subs(d.AdminToken)
	held := func(customer string) *rivorav1.Subscription {
		sub := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: customer, DestinationId: "shared", Types: []string{"*"}})
		pause, err := c.PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: sub.GetId(), Reason: "test"}))
		if err != nil {
			t.Fatal(err)
		}
		d.WaitApplied(pause.Msg.GetVersion())
		if _, err := d.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{CustomerId: customer, LaneKey: "u1", Type: "order.created", Payload: []byte(`{}`)})); err != nil {
			t.Fatal(err)
		}
		poll.True(t, customer+"'s event pending", 15*time.Second, func() bool {
			g, err := c.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: sub.GetId()}))
			return err == nil && g.Msg.GetPending() == 1
		})
		return sub
	}
	acme, globex := held("acme"), held("globex")
	lanes := rivorav1connect.NewLaneServiceClient(d.HTTPClient(), d.URL, d.As(d.AdminToken))
	if _, err := lanes.SkipLaneHead(ctx, connect.NewRequest(&rivorav1.SkipLaneHeadRequest{DestinationId: "shared", CustomerId: "globex", LaneKey: "u1", SubscriptionId: globex.GetId(), Reason: "poison"})); err != nil {
		t.Fatal(err)
	}
	del, err := c.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: acme.GetId(), Force: true}))
	if err != nil {
		t.Fatal(err)
	}
	d.WaitApplied(del.Msg.GetVersion())
	poll.True(t, "both dead letters archived", 15*time.Second, func() bool {
		return len(archived(t, filepath.Join(dir, "archive", "deadletter", "shared"))) == 2
	})

	archive := rivorav1connect.NewArchiveServiceClient(d.HTTPClient(), d.URL, d.As(d.AdminToken))
	replay := func(req *rivorav1.ReplayRequest) (*rivorav1.ReplayResponse, error) {
		req.Filter = &rivorav1.DeadLetterFilter{DestinationId: "shared"}
		stream, err := archive.Replay(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		var last *rivorav1.ReplayResponse
		for stream.Receive() {
			last = stream.Msg()
		}
		return last, stream.Err()
	}
	_, err = replay(&rivorav1.ReplayRequest{})
	wantCode(t, "replay with a deleted subscription's dead letter", err, connect.CodeFailedPrecondition, "1 of the 2 dead letters", "subscription "+acme.GetId(), "--skip-deleted-subscriptions")
	dry, err := replay(&rivorav1.ReplayRequest{DryRun: true})
	if err != nil || !strings.Contains(dry.GetRefused(), acme.GetId()) || dry.GetDeletedSubscriptionDeadLetters() != 1 || !slices.Equal(dry.GetDeletedSubscriptions(), []string{acme.GetId()}) {
		t.Fatalf("dry run: %v, %v; want refused, 1 dead letter of %s", dry, err, acme.GetId())
	}
	done, err := replay(&rivorav1.ReplayRequest{SkipDeletedSubscriptions: true})
	if err != nil || done.GetReplayed() != 1 || done.GetDeletedSubscriptionDeadLetters() != 1 || done.GetDeletedSubscriptionCount() != 1 || !slices.Equal(done.GetDeletedSubscriptions(), []string{acme.GetId()}) {
		t.Fatalf("replay leaving it: %v, %v; want globex's replayed, acme's left", done, err)
	}
	poll.True(t, "globex's event pending again", 15*time.Second, func() bool {
		g, err := c.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: globex.GetId()}))
		return err == nil && g.Msg.GetPending() == 1
	})
}

// A customer token reads why its own destination is paused, not which
// operator's token paused it (an operator's name is the cell's).
func TestCustomerTokenSeesAPauseWithoutItsAuthor(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), true)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "c1-own", Url: "https://c1.example.com/hook", OwnerCustomer: "c1"})
	if _, err := d.Admin.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "c1-own", Reason: "your endpoint answers slowly", Author: "ops-alice"})); err != nil {
		t.Fatal(err)
	}
	full, err := d.Admin.GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "c1-own"}))
	if err != nil || len(full.Msg.GetDestination().GetPauses()) != 1 || full.Msg.GetDestination().GetPauses()[0].GetAuthor() == "" {
		t.Fatalf("the admin's answer: %v, %v; want the pause with its author", full.Msg.GetDestination().GetPauses(), err)
	}
	own, err := d.adminAs(d.Token(rivorav1.Role_ROLE_CUSTOMER, "c1")).GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "c1-own"}))
	if err != nil {
		t.Fatal(err)
	}
	pauses := own.Msg.GetDestination().GetPauses()
	if len(pauses) != 1 || pauses[0].GetAuthor() != "" || pauses[0].GetReason() != "your endpoint answers slowly" || own.Msg.GetDestination().GetPauseReason() != "your endpoint answers slowly" {
		t.Fatalf("the owner's answer: pauses %v, pause reason %q; want the reason without the author", pauses, own.Msg.GetDestination().GetPauseReason())
	}
}

// A forced delete while an event is in flight says what it left to the
// attempt: the answer (in_flight, archived_later) and the audit count
// the event in flight and the events queued behind it apart from those
// archived (it said "0 pending events archived", and the events behind
// became dead letters uncounted).
func TestForcedDeleteSaysWhatItLeftToAnAttemptInFlight(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	f := startFakeAgent(t, d)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "erp", Url: "https://erp.example.com/ingest"})
	d.create(&rivorav1.CreateDestinationRequest{Id: "crm", Url: "https://crm.example.com/ingest"})
	s := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "erp", Types: []string{"*"}})
	f.setPending("erp", s.GetId(), 3)
	f.setPending("crm", "", 5)
	f.mu.Lock()
	f.left[[2]string{"erp", s.GetId()}] = [2]int64{1, 2}
	f.left[[2]string{"crm", ""}] = [2]int64{2, 1}
	f.mu.Unlock()

	del, err := d.subs(d.AdminToken).DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: s.GetId(), Force: true}))
	if err != nil || del.Msg.GetArchived() != 0 || del.Msg.GetInFlight() != 1 || del.Msg.GetArchivedLater() != 2 {
		t.Fatalf("forced subscription delete: %v, %v; want 0 archived, 1 in flight, 2 archived later", del.Msg, err)
	}
	gone, err := d.Admin.DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "crm", Force: true}))
	if err != nil || gone.Msg.GetArchived() != 2 || gone.Msg.GetInFlight() != 2 || gone.Msg.GetArchivedLater() != 1 {
		t.Fatalf("forced destination delete: %v, %v; want 2 archived, 2 in flight, 1 archived later", gone.Msg, err)
	}
	want := map[string]string{
		"erp": "subscription " + s.GetId() + " (customer c1) deleted; 0 pending events archived; 1 event in flight left to its attempt (a dead letter too if it fails), 2 pending events queued behind it archived once it ends",
		"crm": "2 pending events archived; 2 events in flight left to their attempts (dead letters too if they fail), 1 pending event queued behind them archived once they end",
	}
	for id, detail := range want {
		audit, err := d.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: id}))
		if err != nil || len(audit.Msg.GetEntries()) == 0 {
			t.Fatalf("audit of %s: %v, %v", id, audit, err)
		}
		if last := audit.Msg.GetEntries()[len(audit.Msg.GetEntries())-1]; last.GetDetail() != detail {
			t.Errorf("audit of %s's delete: %q, want %q", id, last.GetDetail(), detail)
		}
	}
}
