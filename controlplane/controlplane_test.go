package controlplane_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// ---- harness ---------------------------------------------------------------

// dev is `rivora dev` in process (rig.Dev): a control plane and,
// unless started without one, the real agent following it as its fleet.
type dev struct {
	*rig.Dev
}

func startDev(t *testing.T, dir string, withAgent bool) *dev {
	t.Helper()
	return &dev{rig.StartDev(t, dir, rig.Options{NoAgent: !withAgent})}
}

func (d *dev) stop() { d.Stop() }

// create registers a destination without waiting for the agent.
func (d *dev) create(req *rivorav1.CreateDestinationRequest) *rivorav1.CreateDestinationResponse {
	d.T.Helper()
	resp, err := d.Admin.CreateDestination(context.Background(), connect.NewRequest(req))
	if err != nil {
		d.T.Fatalf("CreateDestination(%s): %v", req.GetId(), err)
	}
	return resp.Msg
}

// wantCode asserts a Connect error code and that the message names what
// to fix.
func wantCode(t *testing.T, what string, err error, code connect.Code, mentions ...string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("%s: err = %v (code %v), want %v", what, err, connect.CodeOf(err), code)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: error %q does not mention %q", what, err, m)
		}
	}
}

func sink(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	t.Cleanup(srv.Close)
	return srv
}

// ---- tests -----------------------------------------------------------------

func TestCreateValidation(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	base := func() *rivorav1.CreateDestinationRequest {
		return &rivorav1.CreateDestinationRequest{Id: "orders", Url: "https://example.com/hook"}
	}
	cases := []struct {
		name     string
		mod      func(*rivorav1.CreateDestinationRequest)
		mentions []string
	}{
		{"empty id", func(r *rivorav1.CreateDestinationRequest) { r.Id = "" }, []string{"id is empty"}},
		{"id with a dot", func(r *rivorav1.CreateDestinationRequest) { r.Id = "orders.eu" }, []string{`'.'`, "use letters, digits"}},
		{"id with a space", func(r *rivorav1.CreateDestinationRequest) { r.Id = "my orders" }, []string{`' '`}},
		{"long id", func(r *rivorav1.CreateDestinationRequest) { r.Id = strings.Repeat("x", 65) }, []string{"65 bytes", "limit is 64"}},
		{"empty url", func(r *rivorav1.CreateDestinationRequest) { r.Url = "" }, []string{"absolute http:// or https:// URL"}},
		{"ftp url", func(r *rivorav1.CreateDestinationRequest) { r.Url = "ftp://example.com/x" }, []string{`"ftp://example.com/x"`, "http://"}},
		{"relative url", func(r *rivorav1.CreateDestinationRequest) { r.Url = "/hook" }, []string{"absolute"}},
		{"url without host", func(r *rivorav1.CreateDestinationRequest) { r.Url = "http://" }, []string{"absolute"}},
		{"unparsable url", func(r *rivorav1.CreateDestinationRequest) { r.Url = "http://a b/%zz" }, []string{"url"}},
		{"url with a space", func(r *rivorav1.CreateDestinationRequest) { r.Url = "http://127.0.0.1:9000/a b" }, []string{`a space after "http://127.0.0.1:9000/a"`, "percent-encode", "%20"}},
		{"url with a space in the query", func(r *rivorav1.CreateDestinationRequest) { r.Url = "https://example.com/hook?q=a b" }, []string{"a space", "%20"}},
		{"url with credentials and a space", func(r *rivorav1.CreateDestinationRequest) { r.Url = "https://user:s3cret@example.com/a b" }, []string{"credentials (user:password@)"}},
		{"url with credentials and a bad port", func(r *rivorav1.CreateDestinationRequest) { r.Url = "https://u:s3cret@host:abc/" }, []string{`"https://…@host:abc/"`}},
		{"ftp url with credentials", func(r *rivorav1.CreateDestinationRequest) { r.Url = "ftp://u:s3cret@host/" }, []string{`"ftp://…@host/"`, "http://"}},
		{"url with credentials and a tab", func(r *rivorav1.CreateDestinationRequest) { r.Url = "https://u:s3cret@host/a\tb" }, []string{"invalid control character"}},
		{"url with credentials and no host", func(r *rivorav1.CreateDestinationRequest) { r.Url = "https://u:s3cret@" }, []string{"url"}},
		{"url with a tab", func(r *rivorav1.CreateDestinationRequest) { r.Url = "https://example.com/a\tb" }, []string{"invalid control character"}},
		{"url with DEL", func(r *rivorav1.CreateDestinationRequest) { r.Url = "https://example.com/a\x7fb" }, []string{"invalid control character"}},
		{"url with credentials", func(r *rivorav1.CreateDestinationRequest) { r.Url = "https://user:pass@example.com/hook" }, []string{"credentials (user:password@)"}},
		{"url with port 0", func(r *rivorav1.CreateDestinationRequest) { r.Url = "http://127.0.0.1:0/hook" }, []string{"port 0", "from 1 to 65535"}},
		{"url with a port over 65535", func(r *rivorav1.CreateDestinationRequest) { r.Url = "http://[::1]:99999/hook" }, []string{"port 99999", "from 1 to 65535"}},
		{"secret without prefix", func(r *rivorav1.CreateDestinationRequest) { r.Secret = "hunter2" }, []string{"secret", "whsec_"}},
		{"secret not base64", func(r *rivorav1.CreateDestinationRequest) { r.Secret = "whsec_!!!" }, []string{"secret", "base64"}},
		{"secret too short", func(r *rivorav1.CreateDestinationRequest) { r.Secret = "whsec_c2hvcnQ=" }, []string{"secret", "at least 16"}},
		{"negative rate", func(r *rivorav1.CreateDestinationRequest) { r.Limits = &rivorav1.Limits{RatePerSecond: -1} }, []string{"rate_per_second"}},
		{"rate too high", func(r *rivorav1.CreateDestinationRequest) { r.Limits = &rivorav1.Limits{RatePerSecond: 2e7} }, []string{"rate_per_second"}},
		{"NaN rate", func(r *rivorav1.CreateDestinationRequest) { r.Limits = &rivorav1.Limits{RatePerSecond: math.NaN()} }, []string{"rate_per_second"}},
		{"negative burst", func(r *rivorav1.CreateDestinationRequest) { r.Limits = &rivorav1.Limits{Burst: -1} }, []string{"burst"}},
		{"negative max attempts", func(r *rivorav1.CreateDestinationRequest) { r.Limits = &rivorav1.Limits{MaxAttempts: -3} }, []string{"max_attempts"}},
		{"negative max in flight", func(r *rivorav1.CreateDestinationRequest) { r.Limits = &rivorav1.Limits{MaxInFlight: -1} }, []string{"max_in_flight"}},
		{"zero window", func(r *rivorav1.CreateDestinationRequest) { r.Limits = &rivorav1.Limits{Window: durationpb.New(0)} }, []string{"window must be", "more than 0"}},
		{"negative window", func(r *rivorav1.CreateDestinationRequest) {
			r.Limits = &rivorav1.Limits{Window: durationpb.New(-time.Hour)}
		}, []string{"window"}},
		{"zero timeout", func(r *rivorav1.CreateDestinationRequest) { r.Limits = &rivorav1.Limits{Timeout: durationpb.New(0)} }, []string{"timeout must be", "from 100ms to 5m0s"}},
		{"rate over 1e6", func(r *rivorav1.CreateDestinationRequest) { r.Limits = &rivorav1.Limits{RatePerSecond: 1e6 + 1} }, []string{"rate_per_second", "at most 1e+06"}},
		{"burst over 1e6", func(r *rivorav1.CreateDestinationRequest) { r.Limits = &rivorav1.Limits{Burst: 1_000_001} }, []string{"burst", "from 1 to 1000000"}},
		{"max attempts over 10000", func(r *rivorav1.CreateDestinationRequest) { r.Limits = &rivorav1.Limits{MaxAttempts: 10_001} }, []string{"max_attempts", "from 1 to 10000"}},
		{"window over 90 days", func(r *rivorav1.CreateDestinationRequest) {
			r.Limits = &rivorav1.Limits{Window: durationpb.New(91 * 24 * time.Hour)}
		}, []string{"window", "90 days", "2184h"}},
		{"timeout under 100ms", func(r *rivorav1.CreateDestinationRequest) {
			r.Limits = &rivorav1.Limits{Timeout: durationpb.New(50 * time.Millisecond)}
		}, []string{"timeout", "50ms"}},
		{"timeout over 5m", func(r *rivorav1.CreateDestinationRequest) {
			r.Limits = &rivorav1.Limits{Timeout: durationpb.New(6 * time.Minute)}
		}, []string{"timeout", "6m0s"}},
	}
	for _, tc := range cases {
		req := base()
		tc.mod(req)
		_, err := d.Admin.CreateDestination(context.Background(), connect.NewRequest(req))
		wantCode(t, tc.name, err, connect.CodeInvalidArgument, tc.mentions...)
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the refusal quotes the URL's password: %v", tc.name, err)
		}
	}
	resp, err := d.Admin.ListDestinations(context.Background(), connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil || len(resp.Msg.GetDestinations()) != 0 {
		t.Fatalf("after only invalid creates: %d destinations, %v", len(resp.Msg.GetDestinations()), err)
	}
}

func TestCreateDefaultsListAndDuplicates(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), true)
	before := time.Now()
	got := d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: "https://example.com/hook"})
	dest := got.GetDestination()
	if got.GetVersion() == 0 {
		t.Fatal("create returned config version 0")
	}
	if _, err := webhook.Key(dest.GetSecret()); err != nil {
		t.Fatalf("generated secret %q is not usable: %v", dest.GetSecret(), err)
	}
	if !proto.Equal(dest.GetLimits(), controlplane.DefaultLimits) {
		t.Fatalf("limits = %v, want the defaults %v", dest.GetLimits(), controlplane.DefaultLimits)
	}
	if dest.GetPriorityClass() != rivorav1.PriorityClass_PRIORITY_CLASS_NORMAL || dest.GetPaused() {
		t.Fatalf("class %v paused %v, want normal and not paused", dest.GetPriorityClass(), dest.GetPaused())
	}
	if at := dest.GetCreatedAt().AsTime(); at.Before(before.Add(-time.Second)) || !dest.GetUpdatedAt().AsTime().Equal(at) {
		t.Fatalf("created_at %v updated_at %v", at, dest.GetUpdatedAt().AsTime())
	}

	// Set fields are kept, unset ones take the defaults.
	second := d.create(&rivorav1.CreateDestinationRequest{Id: "billing", Url: "http://127.0.0.1:9/x", Secret: secret, Limits: &rivorav1.Limits{RatePerSecond: 5, Timeout: durationpb.New(time.Second)}})
	want := proto.Clone(controlplane.DefaultLimits).(*rivorav1.Limits)
	want.RatePerSecond, want.Timeout = 5, durationpb.New(time.Second)
	if !proto.Equal(second.GetDestination().GetLimits(), want) || second.GetDestination().GetSecret() != secret {
		t.Fatalf("billing = %v, want limits %v and the given secret", second.GetDestination(), want)
	}
	if second.GetVersion() <= got.GetVersion() {
		t.Fatalf("versions %d then %d: every change must bump the version", got.GetVersion(), second.GetVersion())
	}

	_, err := d.Admin.CreateDestination(context.Background(), connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "orders", Url: "https://other.example.com/"}))
	wantCode(t, "duplicate", err, connect.CodeAlreadyExists, `"orders" already exists`, "rivoractl destinations update orders")

	list, err := d.Admin.ListDestinations(context.Background(), connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, x := range list.Msg.GetDestinations() {
		ids = append(ids, x.GetId())
	}
	if !slices.Equal(ids, []string{"billing", "orders"}) {
		t.Fatalf("List = %v, want [billing orders] (sorted)", ids)
	}
	if o := list.Msg.GetDestinations()[1]; o.GetUrl() != "https://example.com/hook" {
		t.Fatalf("duplicate create changed the original: %v", o)
	}

	g, err := d.Admin.GetDestination(context.Background(), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	// Get shows the secret's fingerprint, never the secret.
	wantGet := proto.Clone(dest).(*rivorav1.Destination)
	wantGet.Secret = ""
	if !proto.Equal(g.Msg.GetDestination(), wantGet) || g.Msg.GetPending() != 0 || wantGet.GetSecretFingerprint() == "" {
		t.Fatalf("Get = %v, want %v with nothing pending", g.Msg, wantGet)
	}
	for name, call := range map[string]func() error{
		"get": func() error {
			_, err := d.Admin.GetDestination(context.Background(), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "nope"}))
			return err
		},
		"update": func() error {
			u := "http://x.example/"
			_, err := d.Admin.UpdateDestination(context.Background(), connect.NewRequest(&rivorav1.UpdateDestinationRequest{Id: "nope", Url: &u}))
			return err
		},
		"delete": func() error {
			_, err := d.Admin.DeleteDestination(context.Background(), connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "nope", Force: true}))
			return err
		},
		"set priority": func() error {
			_, err := d.Admin.SetPriority(context.Background(), connect.NewRequest(&rivorav1.SetPriorityRequest{DestinationId: "nope", Class: rivorav1.PriorityClass_PRIORITY_CLASS_HIGH}))
			return err
		},
		"health": func() error {
			_, err := d.Admin.GetDestinationHealth(context.Background(), connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: "nope"}))
			return err
		},
	} {
		wantCode(t, name+" of an unknown destination", call(), connect.CodeNotFound, `"nope" does not exist`, "rivoractl destinations list")
	}
}

func TestUpdateDestination(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	orig := d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: "https://example.com/hook", Secret: secret, Limits: &rivorav1.Limits{Burst: 10}}).GetDestination()
	update := func(req *rivorav1.UpdateDestinationRequest) (*rivorav1.Destination, error) {
		req.Id = "orders"
		resp, err := d.Admin.UpdateDestination(context.Background(), connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetDestination(), nil
	}
	newURL, rate, maxAttempts := "https://new.example.com/hook", 12.5, int32(3)
	got, err := update(&rivorav1.UpdateDestinationRequest{Url: &newURL, RatePerSecond: &rate, MaxAttempts: &maxAttempts, Window: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(controlplane.DefaultLimits).(*rivorav1.Limits)
	want.Burst, want.RatePerSecond, want.MaxAttempts, want.Window = 10, 12.5, 3, durationpb.New(time.Hour)
	if got.GetUrl() != newURL || got.GetSecret() != "" || got.GetSecretFingerprint() != auth.Fingerprint(secret) || !proto.Equal(got.GetLimits(), want) {
		t.Fatalf("after update: %v\nwant url %s, the same secret's fingerprint (not the secret), limits %v", got, newURL, want)
	}
	if !got.GetUpdatedAt().AsTime().After(orig.GetUpdatedAt().AsTime()) && !got.GetUpdatedAt().AsTime().Equal(orig.GetUpdatedAt().AsTime()) {
		t.Fatalf("updated_at went back: %v → %v", orig.GetUpdatedAt().AsTime(), got.GetUpdatedAt().AsTime())
	}
	bad := func(s string) *string { return &s }
	negBurst, negRate := int32(-1), -2.0
	for name, tc := range map[string]struct {
		req      *rivorav1.UpdateDestinationRequest
		mentions []string
	}{
		"bad url":        {&rivorav1.UpdateDestinationRequest{Url: bad("gopher://x")}, []string{"http://"}},
		"bad secret":     {&rivorav1.UpdateDestinationRequest{Secret: bad("whsec_")}, []string{"secret"}},
		"negative burst": {&rivorav1.UpdateDestinationRequest{Burst: &negBurst}, []string{"burst"}},
		"negative rate":  {&rivorav1.UpdateDestinationRequest{RatePerSecond: &negRate}, []string{"rate_per_second"}},
		"long timeout":   {&rivorav1.UpdateDestinationRequest{Timeout: durationpb.New(time.Hour)}, []string{"timeout"}},
		"nothing":        {&rivorav1.UpdateDestinationRequest{}, []string{"nothing to update"}},
	} {
		_, err := update(tc.req)
		wantCode(t, name, err, connect.CodeInvalidArgument, tc.mentions...)
	}
	g, err := d.Admin.ListDestinations(context.Background(), connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if now := g.Msg.GetDestinations()[0]; !proto.Equal(now, got) {
		t.Fatalf("a refused update changed the destination:\n got %v\nwant %v", now, got)
	}
}

func TestSetPriority(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), true)
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL})
	w := func(v float64) *float64 { return &v }
	for name, tc := range map[string]struct {
		req      *rivorav1.SetPriorityRequest
		mentions []string
	}{
		"nothing":                             {&rivorav1.SetPriorityRequest{}, []string{"nothing to change"}},
		"customer, no weight":                 {&rivorav1.SetPriorityRequest{CustomerId: "acme"}, []string{"a customer and its weight"}},
		"class and a customer without weight": {&rivorav1.SetPriorityRequest{Class: rivorav1.PriorityClass_PRIORITY_CLASS_LOW, CustomerId: "acme"}, []string{"needs a weight"}},
		"weight, no customer":                 {&rivorav1.SetPriorityRequest{Weight: w(2)}, []string{"customer"}},
		"bad customer":                        {&rivorav1.SetPriorityRequest{CustomerId: "a.b", Weight: w(2)}, []string{"customer", `'.'`}},
		"zero weight":                         {&rivorav1.SetPriorityRequest{CustomerId: "acme", Weight: w(0)}, []string{"between 0.01 and 10000"}},
		"tiny weight":                         {&rivorav1.SetPriorityRequest{CustomerId: "acme", Weight: w(0.001)}, []string{"weight"}},
		"huge weight":                         {&rivorav1.SetPriorityRequest{CustomerId: "acme", Weight: w(10_001)}, []string{"weight"}},
		"NaN weight":                          {&rivorav1.SetPriorityRequest{CustomerId: "acme", Weight: w(math.NaN())}, []string{"weight"}},
		"unknown class":                       {&rivorav1.SetPriorityRequest{Class: rivorav1.PriorityClass(42)}, []string{"class"}},
	} {
		tc.req.DestinationId = "orders"
		_, err := d.Admin.SetPriority(context.Background(), connect.NewRequest(tc.req))
		wantCode(t, name, err, connect.CodeInvalidArgument, tc.mentions...)
	}
	if _, err := d.Admin.SetPriority(context.Background(), connect.NewRequest(&rivorav1.SetPriorityRequest{DestinationId: "orders", Class: rivorav1.PriorityClass_PRIORITY_CLASS_HIGH})); err != nil {
		t.Fatal(err)
	}
	resp, err := d.Admin.SetPriority(context.Background(), connect.NewRequest(&rivorav1.SetPriorityRequest{DestinationId: "orders", CustomerId: "acme", Weight: w(4), Reason: "acme's gold plan"}))
	if err != nil {
		t.Fatal(err)
	}
	audit, err := d.Admin.ListAudit(context.Background(), connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	if last := audit.Msg.GetEntries()[len(audit.Msg.GetEntries())-1]; last.GetAction() != "priority.set" || last.GetReason() != "acme's gold plan" {
		t.Fatalf("last audit entry %v; want priority.set with its reason", last)
	}
	got := resp.Msg.GetDestination()
	if got.GetPriorityClass() != rivorav1.PriorityClass_PRIORITY_CLASS_HIGH || got.GetCustomerWeights()["acme"] != 4 {
		t.Fatalf("after SetPriority: class %v weights %v", got.GetPriorityClass(), got.GetCustomerWeights())
	}
	// The agent runs it: health (answered by the agent) shows the class.
	d.WaitApplied(resp.Msg.GetVersion())
	h, err := d.Admin.GetDestinationHealth(context.Background(), connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	if hs := h.Msg.GetDestinations(); len(hs) != 1 || hs[0].GetPriorityClass() != rivorav1.PriorityClass_PRIORITY_CLASS_HIGH || hs[0].GetState() != "healthy" {
		t.Fatalf("health = %v, want orders healthy with class high", hs)
	}
}

// Deleting a destination with pending events is refused unless forced;
// forced, they are archived as dead letters (reason deleted).
func TestDeleteWithPending(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDev(t, dir, true)
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL})
	pause, err := d.Admin.PauseDestination(context.Background(), connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "orders", Reason: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	d.WaitApplied(pause.Msg.GetVersion())
	var ids []string
	for i := range 3 {
		resp, err := d.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: "orders", CustomerId: "acme", LaneKey: fmt.Sprintf("u%d", i%2), Type: "t", Payload: []byte(`{}`),
		}))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.Msg.GetEventId())
	}
	poll.True(t, "3 pending", 10*time.Second, func() bool {
		g, err := d.Admin.GetDestination(context.Background(), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "orders"}))
		return err == nil && g.Msg.GetPending() == 3
	})
	_, err = d.Admin.DeleteDestination(context.Background(), connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "orders"}))
	wantCode(t, "delete with pending", err, connect.CodeFailedPrecondition, "3 pending events", "--force")
	if _, err := d.Admin.GetDestination(context.Background(), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "orders"})); err != nil {
		t.Fatalf("refused delete removed the destination: %v", err)
	}

	del, err := d.Admin.DeleteDestination(context.Background(), connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "orders", Force: true}))
	if err != nil {
		t.Fatal(err)
	}
	if del.Msg.GetArchived() != 3 {
		t.Fatalf("forced delete archived %d, want 3", del.Msg.GetArchived())
	}
	_, err = d.Admin.GetDestination(context.Background(), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "orders"}))
	wantCode(t, "get after delete", err, connect.CodeNotFound)
	d.WaitApplied(del.Msg.GetVersion())
	_, err = d.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "u", Type: "t"}))
	wantCode(t, "publish to a deleted destination", err, connect.CodeInvalidArgument, "not registered")

	var letters []*rivorav1.DeadLetter
	poll.True(t, "3 dead letters archived", 15*time.Second, func() bool {
		letters = archived(t, filepath.Join(dir, "archive", "deadletter", "orders"))
		return len(letters) >= 3
	})
	var got []string
	for _, dl := range letters {
		if dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_DELETED {
			t.Fatalf("dead letter reason %v, want DELETED", dl.GetReason())
		}
		got = append(got, dl.GetEvent().GetEventId())
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("archived %v, want %v", got, ids)
	}
	poll.True(t, "GetEvent reports the event dead", 10*time.Second, func() bool {
		r, err := d.Events.GetEvent(context.Background(), connect.NewRequest(&rivorav1.GetEventRequest{EventId: ids[0]}))
		return err == nil && r.Msg.GetState() == rivorav1.EventState_EVENT_STATE_DEAD && r.Msg.GetDeadReason() == rivorav1.DeadReason_DEAD_REASON_DELETED
	})
	// Deleting an empty destination needs no force.
	d.create(&rivorav1.CreateDestinationRequest{Id: "empty", Url: sink(t).URL})
	if _, err := d.Admin.DeleteDestination(context.Background(), connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "empty"})); err != nil {
		t.Fatalf("delete of a destination with nothing pending: %v", err)
	}
}

// The control plane asks its agents for pending counts and health; with no
// agent it says so rather than guessing.
func TestNoAgent(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: "https://example.com/"})
	_, err := d.Admin.GetDestination(context.Background(), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "orders"}))
	wantCode(t, "get without agents", err, connect.CodeUnavailable, "no agent is connected")
	_, err = d.Admin.DeleteDestination(context.Background(), connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "orders", Force: true}))
	wantCode(t, "delete without agents", err, connect.CodeUnavailable, "no agent is connected")
	list, err := d.Admin.ListDestinations(context.Background(), connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil || len(list.Msg.GetDestinations()) != 1 {
		t.Fatalf("a refused delete removed the destination: %v, %v", list, err)
	}
}

// Everything set through the API survives a restart of the control plane.
func TestStatePersists(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDev(t, dir, false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: "https://example.com/hook", Limits: &rivorav1.Limits{MaxAttempts: 3}})
	d.create(&rivorav1.CreateDestinationRequest{Id: "billing", Url: "https://example.com/billing", Secret: secret})
	u := "https://example.com/v2"
	if _, err := d.Admin.UpdateDestination(context.Background(), connect.NewRequest(&rivorav1.UpdateDestinationRequest{Id: "orders", Url: &u})); err != nil {
		t.Fatal(err)
	}
	w := 2.5
	if _, err := d.Admin.SetPriority(context.Background(), connect.NewRequest(&rivorav1.SetPriorityRequest{DestinationId: "billing", Class: rivorav1.PriorityClass_PRIORITY_CLASS_LOW, CustomerId: "acme", Weight: &w})); err != nil {
		t.Fatal(err)
	}
	before, err := d.Admin.ListDestinations(context.Background(), connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	status, err := d.Admin.GetConfigStatus(context.Background(), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	d.stop()

	d2 := startDev(t, dir, false)
	after, err := d2.Admin.ListDestinations(context.Background(), connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Msg.GetDestinations()) != 2 {
		t.Fatalf("after a restart: %d destinations, want 2", len(after.Msg.GetDestinations()))
	}
	for i := range before.Msg.GetDestinations() {
		if !proto.Equal(before.Msg.GetDestinations()[i], after.Msg.GetDestinations()[i]) {
			t.Fatalf("destination %d changed across a restart:\nbefore %v\n after %v", i, before.Msg.GetDestinations()[i], after.Msg.GetDestinations()[i])
		}
	}
	status2, err := d2.Admin.GetConfigStatus(context.Background(), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if status2.Msg.GetVersion() != status.Msg.GetVersion() {
		t.Fatalf("config version %d after a restart, was %d", status2.Msg.GetVersion(), status.Msg.GetVersion())
	}
	// The next change continues from there.
	resp := d2.create(&rivorav1.CreateDestinationRequest{Id: "third", Url: "https://example.com/3"})
	if resp.GetVersion() != status.Msg.GetVersion()+1 {
		t.Fatalf("first change after a restart got version %d, want %d", resp.GetVersion(), status.Msg.GetVersion()+1)
	}
}

func TestStoreReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v, ds := s.Snapshot(); v != 0 || len(ds) != 0 {
		t.Fatalf("new store: version %d, %d destinations", v, len(ds))
	}
	add := func(id string) error {
		_, err := s.Update(func(tx *controlplane.DestinationTx) error {
			tx.Put(&rivorav1.Destination{Id: id, Url: "https://example.com/" + id, CustomerWeights: map[string]float64{"a": 2}})
			return nil
		})
		return err
	}
	if err := add("b"); err != nil {
		t.Fatal(err)
	}
	if err := add("a"); err != nil {
		t.Fatal(err)
	}
	// A refused change changes nothing, not even the version.
	if _, err := s.Update(func(tx *controlplane.DestinationTx) error {
		tx.Delete("a")
		return fmt.Errorf("no")
	}); err == nil {
		t.Fatal("Update ignored fn's error")
	}
	// Snapshots are copies.
	_, ds := s.Snapshot()
	ds[0].Url = "mutated"
	if got, _ := s.Get("a"); got.GetUrl() != "https://example.com/a" {
		t.Fatalf("mutating a snapshot changed the store: %v", got)
	}

	s2, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	v, ds := s2.Snapshot()
	if v != 2 || len(ds) != 2 || ds[0].GetId() != "a" || ds[1].GetId() != "b" || ds[1].GetCustomerWeights()["a"] != 2 {
		t.Fatalf("reopened store: version %d, %v", v, ds)
	}
	if err := os.WriteFile(filepath.Join(dir, "controlplane.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.OpenStore(dir); err == nil || !strings.Contains(err.Error(), "controlplane.json") {
		t.Fatalf("OpenStore on a corrupt file: %v, want an error naming the file", err)
	}
}

func archived(t *testing.T, root string) []*rivorav1.DeadLetter {
	t.Helper()
	var out []*rivorav1.DeadLetter
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() || !strings.HasSuffix(path, ".ndjson.gz") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(zr)
		for sc.Scan() {
			dl := &rivorav1.DeadLetter{}
			if err := protojson.Unmarshal(sc.Bytes(), dl); err != nil {
				return err
			}
			out = append(out, dl)
		}
		return sc.Err()
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}
