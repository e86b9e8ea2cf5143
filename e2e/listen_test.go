package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rivora/rivora/e2e/creds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/syncbuf"
)

// listenProc is a running `rivoractl listen`.
type listenProc struct {
	cmd         *exec.Cmd
	out, errOut *syncbuf.Buffer
	done        chan error
}

// startListen runs `rivoractl listen --listen addr args...` against d and
// waits until it listens.
func startListen(t *testing.T, d *devProc, addr string, args ...string) *listenProc {
	t.Helper()
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
	l := &listenProc{out: &syncbuf.Buffer{}, errOut: &syncbuf.Buffer{}, done: make(chan error, 1)}
	l.cmd = exec.Command(rivoractlBin, append([]string{"listen", "--listen", addr, "--server", d.URL()}, args...)...)
	l.cmd.Env = append(os.Environ(), "RIVORA_TOKEN="+creds.For(d.URL()))
	l.cmd.Stdout, l.cmd.Stderr = l.out, l.errOut
	if err := l.cmd.Start(); err != nil {
		t.Fatalf("start rivoractl listen: %v", err)
	}
	go func() { l.done <- l.cmd.Wait() }()
	t.Cleanup(func() {
		if l.cmd.ProcessState == nil {
			l.cmd.Process.Kill()
			<-l.done
		}
	})
	poll.True(t, "rivoractl listen listening", 15*time.Second, func() bool {
		if strings.Contains(l.errOut.String(), "Listening on http://"+addr) {
			return true
		}
		select {
		case err := <-l.done:
			t.Fatalf("rivoractl listen exited (%v):\n%s%s", err, l.out.String(), l.errOut.String())
		default:
		}
		return false
	})
	return l
}

// stop is Ctrl-C: listen must exit 0 at once.
func (l *listenProc) stop(t *testing.T) {
	t.Helper()
	if err := l.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("interrupt listen: %v", err)
	}
	select {
	case err := <-l.done:
		if err != nil {
			t.Fatalf("rivoractl listen after Ctrl-C: %v\nstderr:\n%s", err, l.errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("rivoractl listen did not stop within 10s of Ctrl-C")
	}
}

// line is the first output line naming id, "" while none does.
func (l *listenProc) line(id string) string {
	for _, line := range strings.Split(l.out.String(), "\n") {
		if strings.Contains(line, id) {
			return line
		}
	}
	return ""
}

// deliveries are listen's -o json lines, each of which must parse.
func (l *listenProc) deliveries(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.out.String()), "\n") {
		if line == "" {
			continue
		}
		var d map[string]any
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("listen -o json printed a line that is not one JSON object: %q: %v", line, err)
		}
		out = append(out, d)
	}
	return out
}

// rivoractl listen against a real `rivora dev`: a delivery arrives
// verified (with no secret on the command line), a forged request is shown
// NOT VERIFIED; with --status 503 the destination degrades and the event
// waits, not charged; restarted without it the event arrives, and events
// get numbers its tries.
func TestListen(t *testing.T) {
	d := startDev(t, devOptions{})
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	rivoractl(t, d, "destinations", "create", "orders", "--url", "http://"+addr+"/hook", "--max-attempts", "3", "--wait")

	// Success first.
	l := startListen(t, d, addr, "--destination", "orders")
	first := publishCLI(t, d, `{"order": 1}`)
	poll.True(t, "listen shows the delivery", 30*time.Second, func() bool { return l.line(first) != "" })
	if line := l.line(first); !strings.Contains(line, " verified ") || !strings.Contains(line, "order.created") || !strings.Contains(line, "acme") ||
		!strings.Contains(line, "user_42") || !strings.Contains(line, " 200") {
		t.Errorf("listen's line for %s = %q; want it verified, with type, customer, lane and 200", first, line)
	}
	forged := postForged(t, addr)
	poll.True(t, "listen shows the forged request", 10*time.Second, func() bool { return l.line(forged) != "" })
	if line := l.line(forged); !strings.Contains(line, "NOT VERIFIED") || !strings.Contains(line, "(not verified: no signature matches destination orders's secret") {
		t.Errorf("listen's line for a forged request = %q, want NOT VERIFIED and why", line)
	}
	l.stop(t)

	// Then the incident: every delivery answered 503.
	l = startListen(t, d, addr, "--destination", "orders", "--status", "503", "-o", "json")
	held := publishCLI(t, d, `{"order": 2}`)
	poll.True(t, "the destination degrades", 30*time.Second, func() bool {
		h, err := d.Admin().GetDestinationHealth(ctxTimeout(t, 5*time.Second), connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: "orders"}))
		return err == nil && len(h.Msg.GetDestinations()) == 1 && h.Msg.GetDestinations()[0].GetState() != "healthy"
	})
	poll.True(t, "listen -o json shows three tries answered 503", 30*time.Second, func() bool {
		n := 0
		for _, dl := range l.deliveries(t) {
			if dl["webhookId"] == held && dl["answered"] == float64(503) && dl["verified"] == true {
				n++
			}
		}
		return n >= 3
	})
	ev := getEventJSON(t, d, held)
	if ev.GetState() != rivorav1.EventState_EVENT_STATE_PENDING && ev.GetState() != rivorav1.EventState_EVENT_STATE_IN_FLIGHT {
		t.Fatalf("event %s is %s while its destination answers 503, want pending", held, ev.GetState())
	}
	// The first 503 may use an attempt: the destination had just
	// delivered, so it was healthy then. Once it is degraded, none does.
	if ev.GetAttemptsUsed() > 1 {
		t.Errorf("event %s used %d attempts while its destination was down, want at most 1 (the try before it degraded)", held, ev.GetAttemptsUsed())
	}
	l.stop(t)

	// Restarted without --status: the held event arrives, verified.
	l = startListen(t, d, addr, "--destination", "orders", "-o", "json")
	poll.True(t, "the held event arrives", 30*time.Second, func() bool {
		for _, dl := range l.deliveries(t) {
			if dl["webhookId"] == held && dl["answered"] == float64(200) && dl["verified"] == true && dl["customer"] == "acme" && dl["type"] == "order.created" {
				return true
			}
		}
		return false
	})
	l.stop(t)

	// events get numbers every try; the 503s used no attempt.
	var tries []*rivorav1.Attempt
	poll.True(t, "the delivery in the event's history", 10*time.Second, func() bool {
		ev = getEventJSON(t, d, held)
		tries = ev.GetAttempts()
		return ev.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
	})
	if len(tries) < 4 {
		t.Fatalf("event %s has %d tries, want at least three 503s and the delivery: %v", held, len(tries), tries)
	}
	charged, notCharged := 0, 0
	for i, a := range tries {
		last := i == len(tries)-1
		switch {
		case a.GetTry() != int32(i+1):
			t.Errorf("try %d is numbered %d", i+1, a.GetTry())
		case a.Charged == nil:
			t.Errorf("try %d does not say whether it was charged", i+1)
		case last:
			if !a.GetCharged() || a.GetStatusCode() != 200 || a.GetNumber() != int32(charged+1) {
				t.Errorf("the delivering try = %v, want 200, charged, attempt %d", a, charged+1)
			}
		case a.GetStatusCode() != 503 || a.GetNumber() != int32(charged+1):
			t.Errorf("try %d = %v, want a 503 sent as attempt %d", i+1, a, charged+1)
		case a.GetCharged():
			charged++
			if i > 0 {
				t.Errorf("try %d = %v was charged: only the first 503 may be, the destination degraded then", i+1, a)
			}
		case a.GetNotChargedReason() != "destination down":
			t.Errorf("try %d = %v, want not charged: destination down", i+1, a)
		default:
			notCharged++
		}
	}
	if notCharged < 2 {
		t.Errorf("%d tries not charged, want every 503 after the destination degraded (at least 2): %v", notCharged, tries)
	}
	out := rivoractl(t, d, "events", "get", held)
	if !strings.Contains(out, "not charged: destination down") || !regexp.MustCompile(fmt.Sprintf(`(?m)^TRIES +%d$`, len(tries))).MatchString(out) {
		t.Errorf("events get %s does not show its tries plainly:\n%s", held, out)
	}
}

// publishCLI publishes one order.created event for acme's lane user_42 to
// orders and returns its id.
func publishCLI(t *testing.T, d *devProc, data string) string {
	t.Helper()
	out := rivoractl(t, d, "publish", "--destination", "orders", "--customer", "acme", "--lane", "user_42", "--type", "order.created", "--data", data)
	id := eventIDPattern.FindString(out)
	if id == "" {
		t.Fatalf("publish printed no event id: %q", out)
	}
	return id
}

func getEventJSON(t *testing.T, d *devProc, id string) *rivorav1.GetEventResponse {
	t.Helper()
	ev := &rivorav1.GetEventResponse{}
	if err := protojson.Unmarshal([]byte(rivoractl(t, d, "events", "get", id, "-o", "json")), ev); err != nil {
		t.Fatalf("events get -o json: %v", err)
	}
	return ev
}

// postForged sends listen a request signed with a secret that is not the
// destination's, and returns its webhook-id.
func postForged(t *testing.T, addr string) string {
	t.Helper()
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := webhook.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	id, body, ts := "msg_forged_1", []byte(`{"order": 99}`), time.Now().Unix()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/hook", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", signer.Sign(id, ts, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST a forged request to listen: %v", err)
	}
	resp.Body.Close()
	return id
}
