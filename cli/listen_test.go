package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
	"github.com/rivora/rivora/testkit/syncbuf"
)

// listening is a running `rivoractl listen`.
type listening struct {
	url         string
	out, errOut *syncbuf.Buffer
	stop        func() int // Ctrl-C; returns the exit code
	interrupt   func()     // Ctrl-C, without waiting for the exit
	again       func()     // a second Ctrl-C
	code        chan int   // the exit code, once it exits
}

var listeningOn = regexp.MustCompile(`Listening on (http://\S+) `)

func startListen(t *testing.T, server string, args ...string) *listening {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &listening{out: &syncbuf.Buffer{}, errOut: &syncbuf.Buffer{}}
	full := append([]string{"rivoractl", "--server", server, "listen", "--listen", "127.0.0.1:0"}, args...)
	intr := newInterrupt()
	l.code = make(chan int, 1)
	go func() { l.code <- runContext(ctx, intr, full, strings.NewReader(""), l.out, l.errOut) }()
	l.interrupt, l.again = cancel, func() { intr.second() }
	l.stop = func() int { cancel(); return <-l.code }
	t.Cleanup(func() { cancel(); l.again() })
	poll.True(t, "listen says where it listens", 10*time.Second, func() bool {
		m := listeningOn.FindStringSubmatch(l.errOut.String())
		if m != nil {
			l.url = m[1]
		}
		return m != nil
	})
	return l
}

// post sends one delivery signed with secret ("" for no signature
// headers) and returns the status answered.
func post(t *testing.T, url, secret, id string, attempt int, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/hook", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		s, err := webhook.NewSigner(secret)
		if err != nil {
			t.Fatal(err)
		}
		ts := time.Now().Unix()
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("webhook-signature", s.Sign(id, ts, []byte(body)))
	}
	req.Header.Set("rivora-customer", "acme")
	req.Header.Set("rivora-lane", "user_42")
	req.Header.Set("rivora-event-type", "order.created")
	req.Header.Set("rivora-attempt", strconv.Itoa(attempt))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST to listen: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestListenWithASecretVerifiesAndAnswers(t *testing.T) {
	secret, other := mustNewSecret(t), mustNewSecret(t)
	l := startListen(t, DefaultServer, "--secret", secret, "--fail-first", "1")
	if got := post(t, l.url, secret, "evt_good", 1, `{"order":1}`); got != http.StatusInternalServerError {
		t.Fatalf("first try answered %d, want 500 (--fail-first 1)", got)
	}
	if got := post(t, l.url, secret, "evt_good", 2, `{"order":1}`); got != http.StatusOK {
		t.Fatalf("second try answered %d, want 200", got)
	}
	if got := post(t, l.url, other, "evt_forged", 1, `{"order":2}`); got != http.StatusInternalServerError {
		t.Fatalf("a forged request's first try answered %d, want 500 (--fail-first applies to every webhook-id)", got)
	}
	// Anyone can send anything: what a request carries never reaches the
	// terminal as control characters.
	resp, err := http.Get(l.url + "/%1b[2J")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code := l.stop(); code != 0 {
		t.Fatalf("Ctrl-C: exit %d, want 0 (stderr %q)", code, l.errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(l.out.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "TIME") {
		t.Fatalf("want a header and one line per request, got:\n%s", l.out.String())
	}
	for i, want := range [][]string{
		{"evt_good", "order.created", "acme", "user_42", " 1 ", "11 B", "verified", "500"},
		{"evt_good", " 2 ", "verified", "200"},
		{"evt_forged", "NOT VERIFIED  500  (not verified: no signature matches the secret given"},
		{"NOT VERIFIED", `(GET /\x1b[2J)  (not verified: missing webhook-id`},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("line %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}
	if strings.Contains(l.out.String(), "\x1b") {
		t.Errorf("a control character from a request reached the terminal:\n%q", l.out.String())
	}
	if !strings.Contains(l.errOut.String(), "checking signatures with the secret given") {
		t.Errorf("banner %q does not say how it checks", l.errOut.String())
	}
}

func TestListenJSONIsOneObjectPerRequest(t *testing.T) {
	secret := mustNewSecret(t)
	l := startListen(t, DefaultServer, "--secret", secret, "--status", "503", "-o", "json")
	post(t, l.url, secret, "evt_1", 1, `{}`)
	post(t, l.url, "", "", 0, `hello`)
	l.stop()
	lines := strings.Split(strings.TrimSpace(l.out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON lines, got:\n%s", l.out.String())
	}
	var got []delivery
	for _, line := range lines {
		var d delivery
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		got = append(got, d)
	}
	if d := got[0]; d.WebhookID != "evt_1" || !d.Verified || d.Answered != 503 || d.Customer != "acme" || d.Lane != "user_42" || d.Type != "order.created" || d.Attempt != 1 || d.Bytes != 2 || d.Method != "POST" || d.Path != "/hook" {
		t.Errorf("first delivery = %+v", d)
	}
	if d := got[1]; d.Verified || !strings.Contains(d.NotVerified, "missing webhook-id") || d.Answered != 503 {
		t.Errorf("unsigned request = %+v, want NOT verified, missing headers", d)
	}
}

// VerifyDelivery of the fake: checks with the destination's secret, as
// the control plane does, and counts the calls.
func (f *fakeRivora) VerifyDelivery(_ context.Context, req *connect.Request[rivorav1.VerifyDeliveryRequest]) (*connect.Response[rivorav1.VerifyDeliveryResponse], error) {
	f.mu.Lock()
	d, ok := f.dests[req.Msg.GetDestinationId()]
	f.mu.Unlock()
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, nil)
	}
	if d.GetLegacySignature().GetReplaceStandard() {
		// The control plane checks the legacy contract; the fake, that
		// listen passed the legacy header's value on.
		if got := req.Msg.GetLegacySignature(); got != "sha256=fake-legacy" {
			return connect.NewResponse(&rivorav1.VerifyDeliveryResponse{Reason: fmt.Sprintf("fake: legacy signature %q", got)}), nil
		}
		return connect.NewResponse(&rivorav1.VerifyDeliveryResponse{Verified: true}), nil
	}
	v, err := webhook.NewVerifier(d.GetSecret())
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("webhook-id", req.Msg.GetWebhookId())
	h.Set("webhook-timestamp", req.Msg.GetWebhookTimestamp())
	h.Set("webhook-signature", req.Msg.GetWebhookSignature())
	if err := v.Verify(h, req.Msg.GetBody()); err != nil {
		return connect.NewResponse(&rivorav1.VerifyDeliveryResponse{Reason: "fake: " + err.Error()}), nil
	}
	return connect.NewResponse(&rivorav1.VerifyDeliveryResponse{Verified: true}), nil
}

func TestListenForADestinationAsksRivora(t *testing.T) {
	f, url := startFake(t)
	secret := mustNewSecret(t)
	f.dests["orders"] = &rivorav1.Destination{Id: "orders", Url: "http://127.0.0.1:9999/hook", Secret: secret}
	l := startListen(t, url, "--destination", "orders")
	post(t, l.url, secret, "evt_1", 1, `{"order":1}`)
	post(t, l.url, mustNewSecret(t), "evt_2", 1, `{"order":1}`)
	l.stop()
	out := l.out.String()
	if !regexp.MustCompile(`evt_1 .* verified `).MatchString(out) || !strings.Contains(out, "NOT VERIFIED  200  (not verified: fake: webhook: no matching signature)") {
		t.Fatalf("listen --destination output:\n%s", out)
	}
	if banner := l.errOut.String(); !strings.Contains(banner, "the secrets of destination orders") || !strings.Contains(banner, "sends to http://127.0.0.1:9999/hook, not here") {
		t.Fatalf("banner %q: want how it checks, and that orders points elsewhere", banner)
	}
	// The note follows the whole banner line; it split it mid-sentence.
	lines := strings.Split(l.errOut.String(), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "Listening on ") || !strings.HasSuffix(lines[0], "Ctrl-C stops.") ||
		!strings.HasPrefix(lines[1], "  note: destination orders sends to http://127.0.0.1:9999/hook, not here") {
		t.Fatalf("banner %q: want the banner line whole, then the note on its own line", l.errOut.String())
	}
}

// A destination that sends elsewhere is pointed here by an admin
// (UpdateDestination is admin's): a customer token is told an admin can,
// an admin is given the command; the URL names the port listened on, and
// 127.0.0.1 for a listener on every interface.
func TestListenSaysWhoCanPointTheDestinationHere(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{}) // GetDestination asks the agent for its pending count
	mustSucceed(t, run(t, d.URL, "", "--token", d.AdminToken, "destinations", "create", "acme-h", "--url", "http://127.0.0.1:9/f", "--owner-customer", "acme"))
	for _, c := range []struct {
		token, listen string
		admin         bool
	}{
		{d.Token(rivorav1.Role_ROLE_CUSTOMER, "acme"), "127.0.0.1:0", false},
		{d.Token(rivorav1.Role_ROLE_OPERATOR), ":0", false},
		{d.AdminToken, ":0", true},
	} {
		t.Setenv("RIVORA_TOKEN", c.token)
		l := startListen(t, d.URL, "--destination", "acme-h", "--listen", c.listen)
		l.stop()
		port := l.url[strings.LastIndex(l.url, ":")+1:]
		banner := l.errOut.String()
		update := "rivoractl destinations update acme-h --url http://127.0.0.1:" + port + "/hook"
		if !strings.Contains(banner, "sends to http://127.0.0.1:9/f, not here") || !strings.Contains(banner, update) {
			t.Errorf("--listen %s: banner %q; want that acme-h sends elsewhere, and %q", c.listen, banner, update)
		}
		if saysAdmin := strings.Contains(banner, "an admin token can point it here: "+update); saysAdmin == c.admin {
			t.Errorf("--listen %s, admin %v: banner %q; want %q said to be an admin's only for another role", c.listen, c.admin, banner, update)
		}
	}
}

// A subscription with a secret of its own signs its deliveries with it:
// listen --destination shows one NOT VERIFIED, naming the subscription
// and how to check it, and the reason follows the columns, which stay
// aligned.
func TestListenNamesASubscriptionsOwnSecret(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	admin := func(args ...string) result {
		return mustSucceed(t, run(t, d.URL, "", append([]string{"--token", d.AdminToken}, args...)...))
	}
	admin("destinations", "create", "lst", "--url", "http://127.0.0.1:9/hook")
	t.Setenv("RIVORA_TOKEN", d.AdminToken)
	l := startListen(t, d.URL, "--destination", "lst")
	admin("destinations", "update", "lst", "--url", l.url+"/hook", "--wait")
	sub := strings.Fields(admin("subscriptions", "create", "--customer", "lc", "--destination", "lst", "--types", "x.*", "--generate-secret", "--wait").stdout)[1]
	event := strings.Fields(admin("publish", "--customer", "lc", "--type", "x.a", "--lane", "l", "--data", `{"a":1}`).stdout)[2]
	poll.True(t, "listen shows the delivery", 10*time.Second, func() bool { return strings.Contains(l.out.String(), event) })
	l.stop()
	lines := strings.Split(strings.TrimSpace(l.out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want the header and one delivery:\n%s", l.out.String())
	}
	line := lines[1]
	for _, want := range []string{"NOT VERIFIED  200  (not verified: ", "event " + event + " is subscription " + sub + "'s, which signs with its own secret (sha256:", "rivoractl listen --secret"} {
		if !strings.Contains(line, want) {
			t.Errorf("delivery line lacks %q:\n%s", want, line)
		}
	}
	if at := strings.Index(lines[0], "ANSWERED"); at < 0 || !strings.HasPrefix(line[at:], "200  ") {
		t.Errorf("the ANSWERED column is not aligned with its header:\n%s\n%s", lines[0], line)
	}
}

// listenWithHeldLookup runs listen --destination orders against a fake
// whose GetEvent (listen's lookup of why a delivery did not verify) is
// held until release, or until its caller gives up; held gets one value
// as each lookup arrives. own is subscription sub_own's own secret, which
// signs event evt_own (and evt_own2).
func listenWithHeldLookup(t *testing.T) (f *fakeRivora, l *listening, own string, held <-chan struct{}, release func()) {
	t.Helper()
	f, h := newFake()
	gate, arrived := make(chan struct{}), make(chan struct{}, 16)
	release = sync.OnceFunc(func() { close(gate) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == rivorav1connect.EventServiceGetEventProcedure {
			arrived <- struct{}{}
			select { // a fleet of slow agents
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(release) // before srv.Close, which waits for handlers
	f.dests["orders"] = &rivorav1.Destination{Id: "orders", Url: "http://127.0.0.1:9999/hook", Secret: mustNewSecret(t)}
	own = mustNewSecret(t)
	f.subs.subs["sub_own"] = &rivorav1.Subscription{Id: "sub_own", CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}, Secret: own}
	for _, id := range []string{"evt_own", "evt_own2"} {
		f.events[id] = &rivorav1.GetEventResponse{EventId: id, DestinationId: "orders", CustomerId: "acme", SubscriptionId: "sub_own"}
	}
	return f, startListen(t, srv.URL, "--destination", "orders"), own, arrived, release
}

// A delivery that does not verify is answered before listen looks up
// whose event it is (GetEvent asks every agent, then GetSubscription):
// a slow lookup must not hold the answer past the destination's timeout.
// Its line follows the lookup, with what it found.
func TestListenAnswersBeforeLookingUpWhyNotVerified(t *testing.T) {
	f, l, own, _, release := listenWithHeldLookup(t)
	status := listenHandling(t, f, l, own, "evt_own")
	select {
	case got := <-status:
		if got != http.StatusOK {
			t.Fatalf("the delivery was answered %d, want 200", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the delivery was not answered while listen's lookup of its event was held: the lookup came first")
	}
	release()
	want := "event evt_own is subscription sub_own's, which signs with its own secret (" + auth.Fingerprint(own) + ")"
	poll.True(t, "listen prints the delivery with what the lookup found", 10*time.Second, func() bool {
		return strings.Contains(l.out.String(), want)
	})
	l.stop()
	if out := l.out.String(); !regexp.MustCompile(`evt_own .* NOT VERIFIED  200  \(not verified: fake: .*; ` + regexp.QuoteMeta(want)).MatchString(out) {
		t.Fatalf("listen printed %q; want one line for the delivery, answered 200, then why not", out)
	}
}

// deliverOn sends a delivery of event id signed with secret through
// client, reading the whole answer so that the connection can be reused;
// it returns the status and whether the connection was a reused one.
func deliverOn(client *http.Client, url, secret, id string) (status int, reused bool, err error) {
	req, err := http.NewRequest(http.MethodPost, url+"/hook", strings.NewReader(`{}`))
	if err != nil {
		return 0, false, err
	}
	s, _ := webhook.NewSigner(secret)
	ts := time.Now().Unix()
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", s.Sign(id, ts, []byte(`{}`)))
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(c httptrace.GotConnInfo) { reused = c.Reused },
	}))
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, reused, err
}

// Rivora's client reuses connections: a delivery's lookup (after its
// answer) must not hold the next delivery on the same connection, which
// the server reads only once the handler returns.
func TestListenLookupDoesNotHoldTheConnection(t *testing.T) {
	_, l, own, held, _ := listenWithHeldLookup(t)
	client := &http.Client{Transport: &http.Transport{}}
	if got, _, err := deliverOn(client, l.url, own, "evt_own"); err != nil || got != http.StatusOK {
		t.Fatalf("first delivery: %d, %v; want 200", got, err)
	}
	<-held
	type answer struct {
		status int
		reused bool
		err    error
	}
	second := make(chan answer, 1)
	go func() {
		s, r, err := deliverOn(client, l.url, own, "evt_own2")
		second <- answer{s, r, err}
	}()
	select {
	case a := <-second:
		if a.err != nil || a.status != http.StatusOK || !a.reused {
			t.Fatalf("second delivery: %d, reused %v, %v; want 200 on the first's connection", a.status, a.reused, a.err)
		}
	case <-time.After(listenLookup / 2):
		t.Fatal("the second delivery on a connection was not answered while the first's lookup was held")
	}
}

// Ctrl-C does not wait for a lookup made after the answer: it cancels it,
// and the delivery's line is printed without what it would have found.
func TestListenCtrlCCancelsALookup(t *testing.T) {
	_, l, own, held, _ := listenWithHeldLookup(t)
	if got := post(t, l.url, own, "evt_own", 1, `{}`); got != http.StatusOK {
		t.Fatalf("delivery answered %d, want 200", got)
	}
	<-held
	start := time.Now()
	if code := l.stop(); code != 0 {
		t.Fatalf("Ctrl-C: exit %d, want 0 (stderr %q)", code, l.errOut.String())
	}
	if waited := time.Since(start); waited >= listenDrain || strings.Contains(l.errOut.String(), "Stopping: waiting") {
		t.Fatalf("listen exited %s after Ctrl-C, stderr %q: it waited for a delivery already answered", waited, l.errOut.String())
	}
	if out := l.out.String(); !regexp.MustCompile(`evt_own .* NOT VERIFIED  200  \(not verified: fake: [^;]*\)\n`).MatchString(out) {
		t.Fatalf("listen printed %q; want the delivery's line, without the lookup", out)
	}
}

func TestListenRefusesBadFlags(t *testing.T) {
	f, url := startFake(t)
	f.dests["orders"] = &rivorav1.Destination{Id: "orders", Url: "http://127.0.0.1:9000/hook", Secret: mustNewSecret(t)}
	assertFailure(t, run(t, url, "", "listen", "--status", "99"), exitUsage, "--status 99")
	assertFailure(t, run(t, url, "", "listen", "--fail-first", "-1"), exitUsage, "--fail-first -1")
	assertFailure(t, run(t, url, "", "listen", "--secret", "hunter2"), exitUsage, "--secret")
	assertFailure(t, run(t, url, "", "listen", "--secret", mustNewSecret(t), "--destination", "orders"), exitUsage, "both given")
	assertFailure(t, run(t, url, "", "listen", "--destination", "nope", "--listen", "127.0.0.1:0"), exitError, "rivoractl destinations create nope")
	assertFailure(t, run(t, url, "", "listen", "extra"), exitUsage, "no arguments")
	r := run(t, url, "", "listen", "--listen", "bogus")
	assertFailure(t, r, exitUsage, `--listen "bogus": want HOST:PORT`)
	if strings.Contains(r.stderr, "something else is listening") {
		t.Fatalf("a malformed address is blamed on another listener: %s", r.stderr)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	assertFailure(t, run(t, url, "", "listen", "--listen", taken.Addr().String()), exitUsage, "something else is listening there")
}

func mustNewSecret(t *testing.T) string {
	t.Helper()
	s, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// With --delay a request is printed once answered; one Rivora hung up on
// during the delay (its timeout) says it was never answered.
func TestListenWithADelaySaysWhatWasNeverAnswered(t *testing.T) {
	secret := mustNewSecret(t)
	l := startListen(t, DefaultServer, "--secret", secret, "--delay", "1h")
	req, err := http.NewRequest(http.MethodPost, l.url+"/hook", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("webhook-id", "evt_late")
	// Rivora's side: it gives up after its timeout.
	if resp, err := (&http.Client{Timeout: 300 * time.Millisecond}).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the request was answered %d, want it cut off by the caller's timeout", resp.StatusCode)
	}
	poll.True(t, "listen prints the unanswered request", 10*time.Second, func() bool {
		return strings.Contains(l.out.String(), "evt_late")
	})
	if out := l.out.String(); !strings.Contains(out, "none: Rivora hung up during --delay") || strings.Contains(out, "  200") {
		t.Errorf("listen printed %q; want the request shown as never answered", out)
	}
	l.stop()
}

// listenHandling starts a delivery to l that listen holds (--delay) and
// returns once listen is handling it (it asked the fake to verify it);
// the channel gets the status answered, or 0 when none was.
func listenHandling(t *testing.T, f *fakeRivora, l *listening, secret, id string) <-chan int {
	t.Helper()
	f.mu.Lock()
	before := len(f.auths)
	f.mu.Unlock()
	status := make(chan int, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, l.url+"/hook", strings.NewReader(`{}`))
		if err != nil {
			status <- 0
			return
		}
		s, _ := webhook.NewSigner(secret)
		ts := time.Now().Unix()
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("webhook-signature", s.Sign(id, ts, []byte(`{}`)))
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err != nil {
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	poll.True(t, "listen is handling "+id, 10*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.auths) > before
	})
	return status
}

func listenForOrders(t *testing.T, args ...string) (*fakeRivora, *listening, string) {
	t.Helper()
	f, url := startFake(t)
	secret := mustNewSecret(t)
	f.dests["orders"] = &rivorav1.Destination{Id: "orders", Url: "http://127.0.0.1:9999/hook", Secret: secret}
	return f, startListen(t, url, append([]string{"--destination", "orders"}, args...)...), secret
}

// Ctrl-C waits for the answers being given: a request held by --delay is
// answered, and printed, before listen exits.
func TestListenCtrlCWaitsForTheAnswersBeingGiven(t *testing.T) {
	f, l, secret := listenForOrders(t, "--delay", "300ms")
	status := listenHandling(t, f, l, secret, "evt_held")
	if code := l.stop(); code != 0 {
		t.Fatalf("Ctrl-C: exit %d, want 0 (stderr %q)", code, l.errOut.String())
	}
	if got := <-status; got != http.StatusOK {
		t.Fatalf("the held request was answered %d, want 200 before listen exits", got)
	}
	if out := l.out.String(); !regexp.MustCompile(`evt_held .* 200\n`).MatchString(out) {
		t.Fatalf("listen printed %q; want the held request's line, answered 200", out)
	}
}

// A second Ctrl-C stops at once, and a request it cut short prints its
// line, saying so; Rivora gets no answer (and retries).
func TestListenSecondCtrlCStopsAtOnce(t *testing.T) {
	f, l, secret := listenForOrders(t, "--delay", "1h")
	status := listenHandling(t, f, l, secret, "evt_cut")
	start := time.Now()
	l.interrupt()
	poll.True(t, "listen says what it waits for", 10*time.Second, func() bool {
		return strings.Contains(l.errOut.String(), "Stopping: waiting up to 5s for 1 request being answered; Ctrl-C again to stop now.")
	})
	select {
	case code := <-l.code:
		t.Fatalf("listen exited (%d) at the first Ctrl-C with a request being answered", code)
	default:
	}
	l.again()
	if code := <-l.code; code != 0 {
		t.Fatalf("second Ctrl-C: exit %d, want 0 (stderr %q)", code, l.errOut.String())
	}
	if waited := time.Since(start); waited >= listenDrain {
		t.Fatalf("listen exited %s after the first Ctrl-C: the second did not cut the wait short", waited)
	}
	if got := <-status; got != 0 {
		t.Fatalf("the cut request was answered %d, want no answer", got)
	}
	out := l.out.String()
	if !regexp.MustCompile(`evt_cut .* none: interrupted, listen stopped before answering \(Rivora retries\), would have been 200`).MatchString(out) {
		t.Fatalf("listen printed %q; want the cut request's line, marked interrupted", out)
	}
}

// Only requests hold the exit: a connection that Rivora (or anyone)
// opened and sent nothing on yet does not.
func TestListenSilentConnectionDoesNotHoldTheExit(t *testing.T) {
	l := startListen(t, DefaultServer, "--delay", "1h")
	conn, err := net.Dial("tcp", strings.TrimPrefix(l.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Make sure listen's server has taken the connection.
	if _, err := conn.Write([]byte("POS")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if code := l.stop(); code != 0 {
		t.Fatalf("Ctrl-C: exit %d, want 0", code)
	}
	if waited := time.Since(start); waited >= listenDrain {
		t.Fatalf("listen took %s to exit with a silent connection open, want no wait", waited)
	}
	if strings.Contains(l.errOut.String(), "Stopping: waiting") {
		t.Fatalf("listen said it waits for a request with none being handled: %q", l.errOut.String())
	}
}

// Lookups are bounded (anyone can send forged webhook-ids, each costing
// RPCs with the user's token): past listenMaxLookups, a line is printed at
// once, without one.
func TestListenBoundsTheLookups(t *testing.T) {
	_, l, own, held, _ := listenWithHeldLookup(t)
	for range listenMaxLookups {
		post(t, l.url, own, "evt_own", 1, `{}`)
		<-held
	}
	post(t, l.url, own, "evt_over", 1, `{}`)
	poll.True(t, "listen prints the delivery past the bound", 10*time.Second, func() bool {
		return strings.Contains(l.out.String(), "evt_over")
	})
	if n := len(held); n != 0 {
		t.Fatalf("%d more lookups with %d held, want none past listenMaxLookups", n, listenMaxLookups)
	}
}

// A subscription's fingerprint is read again once listenFingerprintTTL
// has passed (a rotation shows), and at once when it had no secret of its
// own (one may have been added since).
func TestListenRereadsASubscriptionsFingerprint(t *testing.T) {
	f, url := startFake(t)
	f.events["evt_1"] = &rivorav1.GetEventResponse{EventId: "evt_1", SubscriptionId: "sub_1"}
	f.subs.subs["sub_1"] = &rivorav1.Subscription{Id: "sub_1", CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}}
	setSecret := func(secret string) {
		f.subs.mu.Lock()
		defer f.subs.mu.Unlock()
		f.subs.subs["sub_1"].Secret = secret
	}
	now := time.Now()
	o := (&env{server: url, http: &http.Client{}}).ownSecrets()
	o.now = func() time.Time { return now }
	ctx := context.Background()
	if got := o.of(ctx, "evt_1"); got != "" {
		t.Fatalf("a subscription with no secret of its own: %q, want nothing said", got)
	}
	first, second := mustNewSecret(t), mustNewSecret(t)
	setSecret(first)
	if got := o.of(ctx, "evt_1"); !strings.Contains(got, auth.Fingerprint(first)) {
		t.Fatalf("a secret added since the last delivery: %q, want its fingerprint %s", got, auth.Fingerprint(first))
	}
	setSecret(second)
	now = now.Add(listenFingerprintTTL)
	if got := o.of(ctx, "evt_1"); !strings.Contains(got, auth.Fingerprint(second)) {
		t.Fatalf("a secret rotated %s ago: %q, want the new fingerprint %s", listenFingerprintTTL, got, auth.Fingerprint(second))
	}
}

// With --secret, a request with webhook-id and webhook-timestamp but no
// webhook-signature (what a destination with --legacy-signature-only
// sends) is said to be possibly that, not "not sent by Rivora"; one
// without them still is.
func TestListenWithASecretNamesALegacySignatureOnlyDelivery(t *testing.T) {
	secret := mustNewSecret(t)
	l := startListen(t, DefaultServer, "--secret", secret)
	req, err := http.NewRequest(http.MethodPost, l.url+"/hook", strings.NewReader(`{"order":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("webhook-id", "evt_legacy")
	req.Header.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
	req.Header.Set("X-Partner-Signature", "sha256=00")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	post(t, l.url, "", "", 1, `{}`)
	l.stop()
	lines := strings.Split(strings.TrimSpace(l.out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two lines, got:\n%s", l.out.String())
	}
	if !strings.Contains(lines[1], "evt_legacy") || !strings.Contains(lines[1], "--legacy-signature-only sends only its partner's legacy signature") || strings.Contains(lines[1], "not sent by Rivora") {
		t.Errorf("a delivery with webhook-id and webhook-timestamp but no webhook-signature reads %q", lines[1])
	}
	if !strings.Contains(lines[2], "not sent by Rivora") {
		t.Errorf("a request without webhook headers reads %q", lines[2])
	}
}

// listen --destination passes on the value of the destination's legacy
// signature header, with which the control plane verifies a destination
// that sends only that (--legacy-signature-only).
func TestListenForALegacySignatureOnlyDestination(t *testing.T) {
	f, url := startFake(t)
	f.dests["erp"] = &rivorav1.Destination{Id: "erp", Url: "http://127.0.0.1:9999/hook", Secret: mustNewSecret(t),
		LegacySignature: &rivorav1.LegacySignature{Header: "X-Partner-Signature", ReplaceStandard: true}}
	l := startListen(t, url, "--destination", "erp")
	send := func(id, signature string) {
		req, err := http.NewRequest(http.MethodPost, l.url+"/hook", strings.NewReader(`{"order":1}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
		req.Header.Set("X-Partner-Signature", signature)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	send("evt_legacy", "sha256=fake-legacy")
	send("evt_forged", "sha256=forged")
	l.stop()
	out := l.out.String()
	if !regexp.MustCompile(`evt_legacy .* verified `).MatchString(out) || !strings.Contains(out, `(not verified: fake: legacy signature "sha256=forged")`) {
		t.Fatalf("listen --destination of a legacy-signature-only destination:\n%s", out)
	}
}
