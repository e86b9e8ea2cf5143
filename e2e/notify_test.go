package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/poll"
)

// operatorEndpoint is an --operator-webhook receiver: it verifies each
// notice's Standard Webhooks signature with the secret it is given and
// keeps, per request, the notice and the status it answered.
type operatorEndpoint struct {
	url string

	mu       sync.Mutex
	verifier *webhook.Verifier
	status   int
	seen     []operatorNotice
	problems []string
}

type operatorNotice struct {
	id     string // webhook-id
	status int    // what the endpoint answered
	body   map[string]any
}

func newOperatorEndpoint(t *testing.T) *operatorEndpoint {
	o := &operatorEndpoint{status: http.StatusOK}
	srv := listenLocal(t, "operator webhook", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		o.mu.Lock()
		defer o.mu.Unlock()
		var body map[string]any
		switch {
		case o.verifier == nil:
			o.problems = append(o.problems, "a notice before the secret was known")
		case o.verifier.Verify(r.Header, raw) != nil:
			o.problems = append(o.problems, "bad signature on "+string(raw))
		case json.Unmarshal(raw, &body) != nil:
			o.problems = append(o.problems, "not JSON: "+string(raw))
		}
		for _, f := range []string{"type", "destinationId", "at", "message"} {
			if s, _ := body[f].(string); s == "" {
				o.problems = append(o.problems, "no "+f+" in "+string(raw))
			}
		}
		o.seen = append(o.seen, operatorNotice{id: r.Header.Get("webhook-id"), status: o.status, body: body})
		w.WriteHeader(o.status)
	}))
	t.Cleanup(func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.problems) > 0 {
			t.Errorf("operator endpoint: %d bad notices, first: %s", len(o.problems), o.problems[0])
		}
	})
	o.url = srv.URL + "/rivora"
	return o
}

func (o *operatorEndpoint) setSecret(t *testing.T, secret string) {
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	o.verifier = v
	o.mu.Unlock()
}

func (o *operatorEndpoint) setStatus(code int) {
	o.mu.Lock()
	o.status = code
	o.mu.Unlock()
}

// accepted returns the notices of a type about a destination that the
// endpoint answered 2xx, one per webhook-id.
func (o *operatorEndpoint) accepted(typ, destination string) []map[string]any {
	return o.matching(typ, destination, func(n operatorNotice) bool { return n.status < 300 })
}

// attempted counts the requests of a type about a destination.
func (o *operatorEndpoint) attempted(typ, destination string) int {
	return len(o.matching(typ, destination, func(operatorNotice) bool { return true }))
}

func (o *operatorEndpoint) matching(typ, destination string, keep func(operatorNotice) bool) []map[string]any {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []map[string]any
	ids := map[string]bool{}
	for _, n := range o.seen {
		if n.body["type"] != typ || n.body["destinationId"] != destination || !keep(n) {
			continue
		}
		if n.status < 300 && ids[n.id] {
			continue // a redelivery after a crash (at-least-once): the same notice
		}
		ids[n.id] = true
		out = append(out, n.body)
	}
	return out
}

// TestOperatorWebhook runs `rivora dev --operator-webhook` against an
// endpoint that verifies signatures: a parked episode, its recovery, a run
// of dead letters and a 410 Gone each give one notice of their type; a
// notice stored before the endpoint accepted it survives kill -9.
func TestOperatorWebhook(t *testing.T) {
	op := newOperatorEndpoint(t)
	d := startDev(t, devOptions{Args: []string{"--operator-webhook", op.url, "--notify-parked-after", "2s"}})
	poll.True(t, "the reserved destination rivora-operator", 10*time.Second, func() bool {
		dst, err := d.Admin().GetDestination(ctxTimeout(t, 5*time.Second), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "rivora-operator"}))
		return err == nil && dst.Msg.GetDestination().GetUrl() == op.url && dst.Msg.GetDestination().GetSecret() == ""
	})
	// The API shows its fingerprint only; the generated secret is in
	// <data-dir>/operator-webhook.secret, mode 0600.
	secretPath := filepath.Join(d.DataDir(), "operator-webhook.secret")
	data, err := os.ReadFile(secretPath)
	if err != nil {
		t.Fatalf("the generated operator secret: %v", err)
	}
	if fi, err := os.Stat(secretPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v; want 0600", secretPath, err, fi.Mode().Perm())
	}
	secret := strings.TrimSpace(string(data))
	op.setSecret(t, secret)

	// Parked: a partner answering 503 holds one event; the budget parks it
	// after 20 s without a success, the notice follows 2 s later.
	flaky := newPartner(t)
	flaky.SetStatus(http.StatusServiceUnavailable)
	createDestination(t, d, "flaky", flaky, "", &rivorav1.Limits{MaxAttempts: 1000})
	publishOne(t, d, "flaky")
	poll.True(t, "destination.parked for flaky", 60*time.Second, func() bool { return len(op.accepted("destination.parked", "flaky")) > 0 })
	parked := op.accepted("destination.parked", "flaky")[0]
	if s, _ := parked["parkedSince"].(string); s == "" {
		t.Errorf("parked notice without parkedSince: %v", parked)
	}

	// Recovered: the partner answers again; the next probe gets through.
	flaky.SetHealthy()
	poll.True(t, "destination.recovered for flaky", 30*time.Second, func() bool { return len(op.accepted("destination.recovered", "flaky")) > 0 })

	// Dead letters: a partner refusing every payload (400) with max_attempts 1: five
	// events die at once and make one notice.
	broken := newPartner(t)
	broken.SetStatus(http.StatusBadRequest)
	createDestination(t, d, "broken", broken, "", &rivorav1.Limits{MaxAttempts: 1})
	dead := map[string]bool{}
	for range 5 {
		dead[publishOne(t, d, "broken")] = true
	}
	poll.True(t, "deadletter.created for broken", 30*time.Second, func() bool { return len(op.accepted("deadletter.created", "broken")) > 0 })
	dl := op.accepted("deadletter.created", "broken")[0]
	ids, _ := dl["eventIds"].([]any)
	if dl["count"] != 5.0 || len(ids) != 5 {
		t.Errorf("deadletter notice %v: want count 5 and 5 event ids", dl)
	}
	for _, id := range ids {
		if s, _ := id.(string); !dead[s] {
			t.Errorf("deadletter notice names %v, not one of the dead letters", id)
		}
	}
	// 410 Gone: the destination is disabled, and the operator hears why.
	gone := newPartner(t)
	gone.SetStatus(http.StatusGone)
	createDestination(t, d, "gone", gone, "", nil)
	publishOne(t, d, "gone")
	publishOne(t, d, "gone")
	poll.True(t, "destination.disabled for gone", 30*time.Second, func() bool { return len(op.accepted("destination.disabled", "gone")) > 0 })
	if dn := op.accepted("destination.disabled", "gone"); len(dn) != 1 || dn[0]["reason"] != "partner answered 410 Gone" {
		t.Errorf("disabled notices %v: want one with reason %q", dn, "partner answered 410 Gone")
	}

	// By now the parked episode's notices are all in: one of each.
	if p, r := len(op.accepted("destination.parked", "flaky")), len(op.accepted("destination.recovered", "flaky")); p != 1 || r != 1 {
		t.Errorf("flaky: %d parked and %d recovered notices, want 1 and 1", p, r)
	}

	// At-least-once: the endpoint answers 503; a second parked episode's
	// notice is stored and attempted, then rivora dev is killed. Restarted
	// with the partner healthy (so nothing re-derives the notice), the
	// stored notice still arrives.
	op.setStatus(http.StatusServiceUnavailable)
	flaky.SetStatus(http.StatusServiceUnavailable)
	publishOne(t, d, "flaky")
	poll.True(t, "second destination.parked attempted", 60*time.Second, func() bool { return op.attempted("destination.parked", "flaky") > 1 })
	d.Kill9()
	flaky.SetHealthy()
	op.setStatus(http.StatusOK)
	d.Restart()
	poll.True(t, "the stored destination.parked delivered after the restart", 60*time.Second, func() bool { return len(op.accepted("destination.parked", "flaky")) == 2 })

	// The restart re-reads the archive after the last notified dead
	// letter: a new one makes a notice of its own, not a repeat of the
	// five already notified.
	late := publishOne(t, d, "broken")
	poll.True(t, "deadletter.created after the restart", 30*time.Second, func() bool { return len(op.accepted("deadletter.created", "broken")) > 1 })
	if all := op.accepted("deadletter.created", "broken"); len(all) != 2 || all[1]["count"] != 1.0 || fmt.Sprint(all[1]["eventIds"]) != "["+late+"]" {
		t.Errorf("deadletter notices after the restart %v, want one more with only %s", all, late)
	}

	log, _ := os.ReadFile(d.LogPath)
	if n := strings.Count(string(log), secret); n != 0 {
		t.Errorf("the generated operator secret is in the log %d times over two runs, want never", n)
	}
	if again, _ := os.ReadFile(secretPath); strings.TrimSpace(string(again)) != secret {
		t.Errorf("the operator secret file changed over a restart")
	}
}

// The same notices with the control plane and the agent as two processes:
// the control plane polls the agent's health and archive over the network
// and publishes through its ingest.
func TestCellOperatorWebhook(t *testing.T) {
	op := newOperatorEndpoint(t)
	secret, _ := webhook.NewSecret()
	op.setSecret(t, secret)
	c := startCell(t, cellOptions{CPArgs: []string{"--operator-webhook", op.url, "--operator-webhook-secret", secret}})
	r := c.rig()

	broken := newPartner(t)
	broken.SetStatus(http.StatusBadRequest)
	r.createDestination(t, "broken", broken, &rivorav1.Limits{MaxAttempts: 1})
	gone := newPartner(t)
	gone.SetStatus(http.StatusGone)
	r.createDestination(t, "gone", gone, nil)
	ctx := ctxTimeout(t, time.Minute)
	dead := map[string]bool{}
	for range 3 {
		id, err := r.SDK().Publish(ctx, sdk.Event{Destination: "broken", Customer: "acme", Lane: "l1", Type: "test", Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		dead[id] = true
	}
	if _, err := r.SDK().Publish(ctx, sdk.Event{Destination: "gone", Customer: "acme", Lane: "l1", Type: "test", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "deadletter.created and destination.disabled", 30*time.Second, func() bool {
		return len(op.accepted("deadletter.created", "broken")) > 0 && len(op.accepted("destination.disabled", "gone")) > 0
	})
	dl := op.accepted("deadletter.created", "broken")
	ids, _ := dl[0]["eventIds"].([]any)
	named := map[string]bool{}
	for _, id := range ids {
		named[fmt.Sprint(id)] = true
	}
	if len(dl) != 1 || dl[0]["count"] != 3.0 || fmt.Sprint(named) != fmt.Sprint(dead) {
		t.Errorf("deadletter notices %v: want one, count 3, naming the dead events %v", dl, dead)
	}
}

// publishOne publishes one event to destination and returns its id.
func publishOne(t *testing.T, d *devProc, destination string) string {
	t.Helper()
	resp, err := d.Ingest().Publish(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.PublishRequest{
		DestinationId: destination, CustomerId: "acme", LaneKey: "l1", Type: "test", Payload: []byte(`{"n":1}`),
	}))
	if err != nil {
		t.Fatalf("publish to %s: %v", destination, err)
	}
	return resp.Msg.GetEventId()
}
