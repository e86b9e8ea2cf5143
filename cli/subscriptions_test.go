package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/rig"
)

const subSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// The command line, flags in any order, sends one request with
// exactly what was given: --types split at commas, headers split at the
// first colon, the secret as is.
func TestSubscriptionsCreateSendsTheFlags(t *testing.T) {
	want := &rivorav1.CreateSubscriptionRequest{
		CustomerId: "c1", DestinationId: "d2", Types: []string{"order.*", "invoice.paid"},
		Filter: "data.amount > 100", Path: "/in/c1", Secret: subSecret,
		Headers: []*rivorav1.Header{{Name: "X-Tenant", Value: "c1, eu"}}, Description: "c1's ERP",
	}
	for _, args := range [][]string{
		{"subscriptions", "create", "--customer", "c1", "--destination", "d2", "--types", "order.*,invoice.paid",
			"--filter", "data.amount > 100", "--path", "/in/c1", "--header", "X-Tenant: c1, eu", "--secret", subSecret, "--description", "c1's ERP"},
		{"sub", "create", "--types", "order.*", "--types", " invoice.paid ,", "-c", "c1", "-d", "d2", "--description=c1's ERP",
			"--secret=" + subSecret, "--path=/in/c1", "--header", "X-Tenant:c1, eu", "--filter", "data.amount > 100"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			f, url := startFake(t)
			r := mustSucceed(t, run(t, url, "", args...))
			if got := f.subs.last(); !proto.Equal(got, want) {
				t.Fatalf("CreateSubscription request = %v, want %v", got, want)
			}
			for _, line := range []string{"ID                 sub_0000000000000001\n", "TYPES              order.*, invoice.paid\n",
				"FILTER             data.amount > 100\n", "DELIVERS TO        https://d2.example/in/c1\n", "SECRET             " + subSecret + "\n",
				"HEADERS            X-Tenant: " + auth.Fingerprint("c1, eu") + " (value fingerprints)\n", "STATE              active\n",
				"DESTINATION STATE  healthy\n", "SECRET is shown only this once"} {
				if !strings.Contains(r.stdout, line) {
					t.Fatalf("create output lacks %q:\n%s", line, r.stdout)
				}
			}
		})
	}
}

func TestSubscriptionsCreateOutputs(t *testing.T) {
	f, url := startFake(t)
	// Without a secret of its own, the destination's signs: say so.
	r := mustSucceed(t, run(t, url, "", "subscriptions", "create", "--customer", "c1", "--destination", "d1", "--types", "*"))
	if !strings.Contains(r.stdout, "SECRET             - (destination d1's secret signs)") || strings.Contains(r.stdout, "shown only this once") ||
		!strings.Contains(r.stdout, "DELIVERS TO        https://d1.example\n") {
		t.Fatalf("create without a secret:\n%s", r.stdout)
	}
	// --generate-secret: the generated secret, once; -o json is the Subscription.
	r = mustSucceed(t, run(t, url, "", "subscriptions", "create", "--customer", "c1", "--destination", "d1", "--types", "order.created",
		"--url", "https://d1.example/other", "--generate-secret", "-o", "json"))
	req := f.subs.last().(*rivorav1.CreateSubscriptionRequest)
	if !req.GetGenerateSecret() || req.GetSecret() != "" || req.GetUrl() != "https://d1.example/other" || req.GetPath() != "" {
		t.Fatalf("CreateSubscription request = %v", req)
	}
	var got rivorav1.Subscription
	if err := protojson.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("create -o json is not a Subscription: %v\n%s", err, r.stdout)
	}
	f.subs.mu.Lock()
	secret := f.subs.subs[got.GetId()].GetSecret()
	f.subs.mu.Unlock()
	if got.GetId() != "sub_0000000000000002" || !strings.HasPrefix(secret, "whsec_") || got.GetSecret() != secret {
		t.Fatalf("create -o json = %v; the generated secret is %q", &got, secret)
	}
	if !strings.Contains(r.stdout, `"customerId": "c1"`) || !strings.Contains(r.stdout, `"deliveryUrl"`) {
		t.Fatalf("create -o json does not use protojson names:\n%s", r.stdout)
	}
	// The server's refusals, with what to do.
	assertFailure(t, run(t, url, "", "subscriptions", "create", "-c", "c1", "-d", "nope", "--types", "*"), exitError, "rivoractl destinations list")
	assertFailure(t, run(t, url, "", "subscriptions", "create", "-c", "c1", "-d", "d1", "--types", "*", "--filter", "data.amount >"), exitError,
		"invalid request: filter: Syntax error")
}

func TestSubscriptionsCreateValidatesLocally(t *testing.T) {
	f, url := startFake(t)
	base := []string{"subscriptions", "create", "--customer", "c1", "--destination", "d1", "--types", "order.*"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"subscriptions", "create", "--destination", "d1"}, "subscriptions create needs --customer, --types"},
		{[]string{"subscriptions", "create", "--customer", "c1", "--types", "*"}, "needs --destination"},
		{[]string{"subscriptions", "create", "-c", "c1", "-d", "d1", "--types", " , "}, "needs --types"},
		{append(base, "--path", "/in/c1", "--url", "https://d1.example/in"), "--path and --url: pass one"},
		{append(base, "--path", "in/c1"), "want a path starting with '/'"},
		{append(base, "--url", "d1.example/in"), "absolute http or https URL"},
		{append(base, "--secret", "hunter2"), "--secret"},
		{append(base, "--secret", subSecret, "--generate-secret"), "--secret and --generate-secret: pass one"},
		{append(base, "--header", "no colon"), "--header #1 has no 'Name:'"},
		{append(base, "sub_1"), "takes no arguments"},
		{append(base, "--remove-header", "X"), "unknown flag --remove-header"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			assertFailure(t, run(t, url, "", tt.args...), exitUsage, tt.want)
		})
	}
	if n := f.subs.count(); n != 0 {
		t.Fatalf("invalid command lines reached the server: %d requests", n)
	}
}

func TestSubscriptionsListAndGet(t *testing.T) {
	f, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "subscriptions", "list", "-o", "json"))
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("empty list as JSON = %q, want []", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "subscriptions", "list", "--customer", "c9"))
	if !strings.Contains(r.stdout, "No subscriptions of customer c9. Create one: rivoractl subscriptions create") {
		t.Fatalf("empty table: %q", r.stdout)
	}
	mustSucceed(t, run(t, url, "", "subscriptions", "create", "-c", "c1", "-d", "d1", "--types", "order.*", "--secret", subSecret))
	mustSucceed(t, run(t, url, "", "subscriptions", "create", "-c", "c1", "-d", "d2", "--types", "order.created,invoice.paid", "--filter", "data.amount\n > 100", "--path", "/in/c1"))
	mustSucceed(t, run(t, url, "", "subscriptions", "create", "-c", "c2", "-d", "d1", "--types", "*"))
	mustSucceed(t, run(t, url, "", "subscriptions", "pause", "sub_0000000000000003", "--reason", "migrating"))

	r = mustSucceed(t, run(t, url, "", "subs", "ls"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "ID CUSTOMER DESTINATION TYPES FILTER DELIVERS TO STATE DESTINATION STATE" {
		t.Fatalf("list table:\n%s", r.stdout)
	}
	for i, want := range []string{
		"sub_0000000000000001  c1        d1           order.*                    -                  https://d1.example        active              healthy",
		"sub_0000000000000002  c1        d2           order.created,invoice.paid  data.amount > 100  https://d2.example/in/c1  active              healthy",
		"sub_0000000000000003  c2        d1           *                           -                  https://d1.example        paused: migrating  healthy",
	} {
		if strings.Join(strings.Fields(lines[i+1]), " ") != strings.Join(strings.Fields(want), " ") {
			t.Fatalf("row %d = %q, want %q", i+1, lines[i+1], want)
		}
	}
	if strings.Contains(r.stdout, "whsec_") {
		t.Fatalf("list shows a secret:\n%s", r.stdout)
	}

	r = mustSucceed(t, run(t, url, "", "subscriptions", "list", "--customer", "c1", "--destination", "d2", "-o", "json"))
	if got := f.subs.last(); !proto.Equal(got, &rivorav1.ListSubscriptionsRequest{CustomerId: "c1", DestinationId: "d2"}) {
		t.Fatalf("ListSubscriptions request = %v", got)
	}
	var arr []json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &arr); err != nil || len(arr) != 1 {
		t.Fatalf("list -o json (err %v):\n%s", err, r.stdout)
	}
	var s rivorav1.Subscription
	if err := protojson.Unmarshal(arr[0], &s); err != nil || s.GetId() != "sub_0000000000000002" {
		t.Fatalf("list -o json element (err %v): %s", err, arr[0])
	}

	f.subs.mu.Lock()
	f.subs.pending["sub_0000000000000001"] = 4
	f.subs.mu.Unlock()
	r = mustSucceed(t, run(t, url, "", "subscriptions", "get", "sub_0000000000000001"))
	for _, want := range []string{"PENDING            4\n", "SECRET             " + auth.Fingerprint(subSecret) + " (fingerprint", "CUSTOMER           c1\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("get output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "whsec_") {
		t.Fatalf("get shows a secret:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "subscriptions", "get", "-o", "json", "sub_0000000000000001"))
	var got rivorav1.GetSubscriptionResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &got); err != nil || got.GetPending() != 4 || got.GetSubscription().GetCustomerId() != "c1" {
		t.Fatalf("get -o json (err %v) = %v", err, &got)
	}
	assertFailure(t, run(t, url, "", "subscriptions", "get", "sub_404"), exitError, "rivoractl subscriptions list")
	assertFailure(t, run(t, url, "", "subscriptions", "get"), exitUsage, "takes one subscription ID")
}

func TestSubscriptionsUpdateSendsOnlySetFlags(t *testing.T) {
	f, url := startFake(t)
	mustSucceed(t, run(t, url, "", "subscriptions", "create", "-c", "c1", "-d", "d1", "--types", "order.*", "--filter", "data.x", "--path", "/a"))
	const id = "sub_0000000000000001"
	for _, tt := range []struct {
		args []string
		want *rivorav1.UpdateSubscriptionRequest
	}{
		{[]string{"--types", "order.*,invoice.*"}, &rivorav1.UpdateSubscriptionRequest{Id: id, SetTypes: true, Types: []string{"order.*", "invoice.*"}}},
		{[]string{"--filter", ""}, &rivorav1.UpdateSubscriptionRequest{Id: id, Filter: ptr("")}},
		{[]string{"--path", "/in/v2", "--description", "v2"}, &rivorav1.UpdateSubscriptionRequest{Id: id, Path: ptr("/in/v2"), Description: ptr("v2")}},
		{[]string{"--url", "https://d1.example/x"}, &rivorav1.UpdateSubscriptionRequest{Id: id, Url: ptr("https://d1.example/x")}},
		// Back to the destination's own URL: both cleared.
		{[]string{"--path", ""}, &rivorav1.UpdateSubscriptionRequest{Id: id, Path: ptr(""), Url: ptr("")}},
		{[]string{"--url="}, &rivorav1.UpdateSubscriptionRequest{Id: id, Path: ptr(""), Url: ptr("")}},
		{[]string{"--header", "A: 1", "--remove-header", "B", "--remove-header", "C"},
			&rivorav1.UpdateSubscriptionRequest{Id: id, SetHeaders: []*rivorav1.Header{{Name: "A", Value: "1"}}, RemoveHeaders: []string{"B", "C"}}},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			mustSucceed(t, run(t, url, "", append([]string{"subscriptions", "update", id}, tt.args...)...))
			if got := f.subs.last(); !proto.Equal(got, tt.want) {
				t.Fatalf("UpdateSubscription request = %v, want %v", got, tt.want)
			}
		})
	}
	r := mustSucceed(t, run(t, url, "", "subscriptions", "update", id, "--types", "*", "-o", "json"))
	var s rivorav1.Subscription
	if err := protojson.Unmarshal([]byte(r.stdout), &s); err != nil || len(s.GetTypes()) != 1 || s.GetTypes()[0] != "*" {
		t.Fatalf("update -o json (err %v):\n%s", err, r.stdout)
	}
	before := f.subs.count()
	assertFailure(t, run(t, url, "", "subscriptions", "update", id), exitUsage, "nothing to update")
	assertFailure(t, run(t, url, "", "subscriptions", "update", id, "--types", ","), exitUsage, "--types is empty")
	assertFailure(t, run(t, url, "", "subscriptions", "update", id, "--path", "/a", "--url", "https://d1.example/b"), exitUsage, "--path and --url")
	assertFailure(t, run(t, url, "", "subscriptions", "update", id, "--secret", subSecret), exitUsage, "unknown flag --secret")
	if f.subs.count() != before {
		t.Fatalf("invalid updates reached the server")
	}
	assertFailure(t, run(t, url, "", "subscriptions", "update", "sub_404", "--types", "*"), exitError, "not found")
}

func TestSubscriptionsPauseResumeRotateDelete(t *testing.T) {
	f, url := startFake(t)
	mustSucceed(t, run(t, url, "", "subscriptions", "create", "-c", "c1", "-d", "d1", "--types", "*", "--secret", subSecret))
	const id = "sub_0000000000000001"

	// A pause needs a reason, a subscription's as a destination's: said
	// before any call (exit 2).
	before := f.subs.count()
	for _, args := range [][]string{
		{"subscriptions", "pause", id},
		{"subscriptions", "pause", id, "--reason", " "},
		{"destinations", "pause", "d1"},
		{"destinations", "pause", "d1", "--reason", ""},
	} {
		assertFailure(t, run(t, url, "", args...), exitUsage, "--reason is required")
	}
	if f.subs.count() != before {
		t.Fatalf("a pause without a reason reached the server")
	}
	r := mustSucceed(t, run(t, url, "", "subscriptions", "pause", id, "--reason", "maintenance"))
	if got := f.subs.last(); !proto.Equal(got, &rivorav1.PauseSubscriptionRequest{Id: id, Reason: "maintenance"}) {
		t.Fatalf("PauseSubscription request = %v", got)
	}
	if !strings.Contains(r.stdout, "Paused subscription "+id) || !strings.Contains(r.stdout, "rivoractl subscriptions resume "+id) {
		t.Fatalf("pause output: %q", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "subscriptions", "get", id))
	if !strings.Contains(r.stdout, "STATE              paused: maintenance\n") {
		t.Fatalf("get after pause:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "subscriptions", "resume", id, "-o", "json"))
	var s rivorav1.Subscription
	if err := protojson.Unmarshal([]byte(r.stdout), &s); err != nil || s.GetPaused() {
		t.Fatalf("resume -o json (err %v):\n%s", err, r.stdout)
	}

	r = mustSucceed(t, run(t, url, "", "subscriptions", "rotate-secret", id, "--grace", "1h"))
	req := f.subs.last().(*rivorav1.RotateSubscriptionSecretRequest)
	if !proto.Equal(req, &rivorav1.RotateSubscriptionSecretRequest{Id: id, Grace: durationpb.New(time.Hour)}) {
		t.Fatalf("RotateSubscriptionSecret request = %v", req)
	}
	f.subs.mu.Lock()
	newSecret := f.subs.subs[id].GetSecret()
	f.subs.mu.Unlock()
	for _, want := range []string{"SECRET      " + newSecret + "\n", "OLD SECRET  " + auth.Fingerprint(subSecret) + " signs too until", "shown only this once"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("rotate-secret output lacks %q:\n%s", want, r.stdout)
		}
	}
	mustSucceed(t, run(t, url, "", "subscriptions", "rotate-secret", id, "--secret", subSecret, "--grace", "0"))
	if got := f.subs.last(); !proto.Equal(got, &rivorav1.RotateSubscriptionSecretRequest{Id: id, Secret: subSecret, Grace: durationpb.New(0)}) {
		t.Fatalf("RotateSubscriptionSecret request = %v", got)
	}
	assertFailure(t, run(t, url, "", "subscriptions", "rotate-secret", id, "--secret", "nope"), exitUsage, "--secret")

	f.subs.mu.Lock()
	f.subs.pending[id] = 3
	f.subs.mu.Unlock()
	assertFailure(t, run(t, url, "", "subscriptions", "delete", id), exitError, "pass --force")
	r = mustSucceed(t, run(t, url, "", "subscriptions", "rm", id, "--force"))
	if r.stdout != "Deleted subscription "+id+"; archived 3 pending events as dead letters (`rivoractl dlq list` shows them once written to the archive, within seconds).\n" {
		t.Fatalf("delete --force output = %q", r.stdout)
	}
	if got := f.subs.last(); !proto.Equal(got, &rivorav1.DeleteSubscriptionRequest{Id: id, Force: true}) {
		t.Fatalf("DeleteSubscription request = %v", got)
	}
	assertFailure(t, run(t, url, "", "subscriptions", "pause", id, "--reason", "gone"), exitError, "rivoractl subscriptions list")
}

// Publishing without --destination fans out: one line per route, "0
// subscriptions matched" when none, the whole PublishResponse with -o
// json; --subscription sends a test event to one.
func TestPublishFansOut(t *testing.T) {
	f, url := startFake(t)
	mustSucceed(t, run(t, url, "", "subscriptions", "create", "-c", "c1", "-d", "d1", "--types", "order.*"))
	mustSucceed(t, run(t, url, "", "subscriptions", "create", "-c", "c1", "-d", "d2", "--types", "order.created"))
	mustSucceed(t, run(t, url, "", "subscriptions", "create", "-c", "c2", "-d", "d1", "--types", "*"))

	pub := []string{"publish", "--customer", "c1", "--lane", "u1", "--data", `{"amount": 120}`, "--idempotency-key", "k1"}
	r := mustSucceed(t, run(t, url, "", append(pub, "--type", "order.created")...))
	want := "sub_0000000000000001  d1  evt-sub_0000000000000001-k1\nsub_0000000000000002  d2  evt-sub_0000000000000002-k1\n"
	if r.stdout != want {
		t.Fatalf("fan-out output = %q, want %q", r.stdout, want)
	}
	sent := f.publishs[len(f.publishs)-1]
	if sent.GetDestinationId() != "" || sent.GetCustomerId() != "c1" || sent.GetType() != "order.created" || sent.GetIdempotencyKey() != "k1" {
		t.Fatalf("Publish request = %v", sent)
	}

	r = mustSucceed(t, run(t, url, "", append(pub, "--type", "invoice.paid")...))
	if !strings.HasPrefix(r.stdout, "0 subscriptions matched") || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("no-match output = %q", r.stdout)
	}

	r = mustSucceed(t, run(t, url, "", append(pub, "--type", "order.updated", "-o", "json")...))
	var resp rivorav1.PublishResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &resp); err != nil {
		t.Fatalf("publish -o json is not a PublishResponse: %v\n%s", err, r.stdout)
	}
	wantResp := &rivorav1.PublishResponse{FannedOut: true, Routes: []*rivorav1.Route{{SubscriptionId: "sub_0000000000000001", DestinationId: "d1", EventId: "evt-sub_0000000000000001-k1"}}}
	if !proto.Equal(&resp, wantResp) || !strings.Contains(r.stdout, `"subscriptionId"`) {
		t.Fatalf("publish -o json = %s, want %v", r.stdout, wantResp)
	}
	r = mustSucceed(t, run(t, url, "", append(pub, "--type", "invoice.paid", "-o", "json")...))
	if strings.Join(strings.Fields(r.stdout), "") != `{"fannedOut":true}` {
		t.Fatalf("no-match -o json = %s", r.stdout)
	}

	// A test event to one subscription, whatever its types.
	r = mustSucceed(t, run(t, url, "", append(pub, "--type", "invoice.paid", "--subscription", "sub_0000000000000002")...))
	if r.stdout != "sub_0000000000000002  d2  evt-sub_0000000000000002-k1\n" || f.publishs[len(f.publishs)-1].GetSubscriptionId() != "sub_0000000000000002" {
		t.Fatalf("test event output = %q, request %v", r.stdout, f.publishs[len(f.publishs)-1])
	}
	assertFailure(t, run(t, url, "", append(pub, "--type", "x", "--subscription", "sub_404")...), exitError, "rivoractl subscriptions list --customer c1")

	before := len(f.publishs)
	assertFailure(t, run(t, url, "", append(pub, "--type", "x", "--subscription", "sub_1", "--destination", "d1")...), exitUsage, "--destination and --subscription: pass one")
	assertFailure(t, run(t, url, "", "publish", "--customer", "c1", "--data", "{}"), exitUsage, "publish needs --lane, --type")
	if len(f.publishs) != before {
		t.Fatalf("invalid publishes reached the server")
	}
}

// A retry of a fan-out that matched nothing answers the first publish's
// (no) routes even once a subscription takes the type: rivoractl says it
// is a duplicate that stored nothing new, not that nothing takes the type.
func TestPublishDuplicateOfNoMatch(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	pub := []string{"--token", d.AdminToken, "publish", "--customer", "idc", "--type", "i.a", "--lane", "l", "--data", `{"a":1}`, "--idempotency-key", "k1"}
	r := mustSucceed(t, run(t, d.URL, "", pub...))
	if !strings.HasPrefix(r.stdout, "0 subscriptions matched: nothing was stored") {
		t.Fatalf("first publish, no subscription: %q", r.stdout)
	}
	mustSucceed(t, run(t, d.URL, "", "--token", d.AdminToken, "destinations", "create", "dd", "--url", "http://127.0.0.1:9/hook"))
	mustSucceed(t, run(t, d.URL, "", "--token", d.AdminToken, "subscriptions", "create", "--customer", "idc", "--destination", "dd", "--types", "i.*", "--wait"))

	r = mustSucceed(t, run(t, d.URL, "", pub...))
	if !strings.Contains(r.stdout, "duplicate of an earlier publish") || !strings.Contains(r.stdout, "nothing new was stored") || strings.Contains(r.stdout, "no subscription of customer idc takes type") {
		t.Fatalf("retry once a subscription takes the type: stdout %q, stderr %q; want it called a duplicate that stored nothing new", r.stdout, r.stderr)
	}
	if strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("retry: stdout %q, want one line", r.stdout)
	}
	r = mustSucceed(t, run(t, d.URL, "", append(pub, "-o", "json")...))
	if strings.Join(strings.Fields(r.stdout), "") != `{"duplicate":true,"fannedOut":true}` {
		t.Fatalf("retry -o json = %s", r.stdout)
	}
}

// A customer's own destination: --owner-customer is sent, and shown.
func TestDestinationsOwnerCustomer(t *testing.T) {
	f, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "destinations", "create", "acme-hooks", "--url", "https://hooks.acme.example/in", "--owner-customer", "acme"))
	if f.creates[0].GetOwnerCustomer() != "acme" || !strings.Contains(r.stdout, "OWNER          customer acme\n") {
		t.Fatalf("create sent %v, printed:\n%s", f.creates[0], r.stdout)
	}
	// No limit flag: no limits sent, which is all a customer token may
	// send (it gets the defaults).
	if f.creates[0].Limits != nil {
		t.Fatalf("create without a limit flag sent limits %v", f.creates[0].GetLimits())
	}
	mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://orders.example/in"))
	r = mustSucceed(t, run(t, url, "", "destinations", "list"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || strings.Fields(lines[0])[2] != "OWNER" || strings.Fields(lines[1])[2] != "acme" || strings.Fields(lines[2])[2] != "-" {
		t.Fatalf("list table:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "destinations", "get", "orders"))
	if strings.Contains(r.stdout, "OWNER") {
		t.Fatalf("a destination no customer owns shows an owner:\n%s", r.stdout)
	}
	assertFailure(t, run(t, url, "", "destinations", "create", "x", "--url", "https://x.example", "--owner-customer", " "), exitUsage, "--owner-customer is blank")
}

// Events, lanes and dead letters of one subscription: --subscription is
// sent as the filter (and names the lane to skip), events get names it.
func TestSubscriptionFilters(t *testing.T) {
	f, url := startFake(t)
	mustSucceed(t, run(t, url, "", "events", "list", "--destination", "orders", "--subscription", "sub_1"))
	if got := f.listed[0].GetSubscriptionId(); got != "sub_1" {
		t.Fatalf("events list --subscription sent %q", got)
	}
	f.events["evt-s"] = &rivorav1.GetEventResponse{EventId: "evt-s", DestinationId: "orders", SubscriptionId: "sub_1", State: rivorav1.EventState_EVENT_STATE_PENDING}
	f.events["evt-d"] = &rivorav1.GetEventResponse{EventId: "evt-d", DestinationId: "orders", State: rivorav1.EventState_EVENT_STATE_PENDING}
	if r := mustSucceed(t, run(t, url, "", "events", "get", "evt-s")); !strings.Contains(r.stdout, "SUBSCRIPTION   sub_1\n") {
		t.Fatalf("events get of a routed event:\n%s", r.stdout)
	}
	if r := mustSucceed(t, run(t, url, "", "events", "get", "evt-d")); !strings.Contains(r.stdout, "SUBSCRIPTION   -\n") {
		t.Fatalf("events get of a destination-named event:\n%s", r.stdout)
	}

	lanes, lanesURL := startFakeLanes(t)
	mustSucceed(t, run(t, lanesURL, "", "lanes", "list", "--destination", "orders", "--subscription", "sub_1"))
	mustSucceed(t, run(t, lanesURL, "", "lanes", "skip", "orders", "--customer", "acme", "--lane", "user-42", "--subscription", "sub_1", "--reason", "poison"))
	if lanes.lists[0].GetSubscriptionId() != "sub_1" || lanes.skips[0].GetSubscriptionId() != "sub_1" {
		t.Fatalf("lanes requests: list %v, skip %v", lanes.lists[0], lanes.skips[0])
	}
}
