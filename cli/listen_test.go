package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/poll"
)

// lockedBuffer is a bytes.Buffer written by listen's handlers while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// listening is a running `rivoractl listen`.
type listening struct {
	url         string
	out, errOut *lockedBuffer
	stop        func() int // Ctrl-C; returns the exit code
}

var listeningOn = regexp.MustCompile(`Listening on (http://\S+) `)

func startListen(t *testing.T, server string, args ...string) *listening {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &listening{out: &lockedBuffer{}, errOut: &lockedBuffer{}}
	full := append([]string{"rivoractl", "--server", server, "listen", "--listen", "127.0.0.1:0"}, args...)
	code := make(chan int, 1)
	go func() { code <- RunContext(ctx, full, strings.NewReader(""), l.out, l.errOut) }()
	l.stop = func() int { cancel(); return <-code }
	t.Cleanup(func() { cancel() })
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
		{"evt_forged", "NOT VERIFIED (no signature matches the secret given", "500"},
		{"NOT VERIFIED (missing webhook-id", "(GET /?[2J)"},
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
	if !regexp.MustCompile(`evt_1 .* verified `).MatchString(out) || !strings.Contains(out, "NOT VERIFIED (fake: webhook: no matching signature)") {
		t.Fatalf("listen --destination output:\n%s", out)
	}
	if banner := l.errOut.String(); !strings.Contains(banner, "the secrets of destination orders") || !strings.Contains(banner, "sends to http://127.0.0.1:9999/hook, not here") {
		t.Fatalf("banner %q: want how it checks, and that orders points elsewhere", banner)
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
