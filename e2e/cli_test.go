package e2e

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// rivoractl runs the CLI against d and returns stdout; a non-zero exit fails
// the test with stderr.
func rivoractl(t testing.TB, d *devProc, args ...string) string {
	t.Helper()
	return ctlAt(t, d.URL(), args...)
}

func runRivoractl(d *devProc, args ...string) (string, string, error) {
	return runCtl(d.URL(), args...)
}

var eventIDPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// rivoractl drives a real dev server: flags before or after the positional
// id, publish, events get and destinations list as JSON.
func TestRivoractlSmoke(t *testing.T) {
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
	d := startDev(t, devOptions{})
	p := newPartner(t)

	// Flags after the positional id, then before it; the second waits until
	// the agent applied the change (and so the first too).
	created := &rivorav1.Destination{}
	if out := rivoractl(t, d, "destinations", "create", "d1", "--url", p.URL(), "-o", "json"); protojson.Unmarshal([]byte(out), created) != nil {
		t.Fatalf("destinations create -o json is not a Destination:\n%s", out)
	}
	rivoractl(t, d, "destinations", "create", "--url", p.URL(), "d2", "--wait")

	for _, id := range []string{"d1", "d2"} {
		got := getDestination(t, d, id)
		if got.GetUrl() != p.URL() {
			t.Errorf("destination %s has url %q, want %q", id, got.GetUrl(), p.URL())
		}
	}
	// The secret is in create's answer only; get shows its fingerprint.
	secret := created.GetSecret()
	if err := p.SetSecret(secret); err != nil {
		t.Fatal(err)
	}
	if got := getDestination(t, d, "d1"); got.GetSecret() != "" || got.GetSecretFingerprint() != auth.Fingerprint(secret) {
		t.Errorf("destinations get d1: secret %q, fingerprint %q; want no secret, fingerprint %s", got.GetSecret(), got.GetSecretFingerprint(), auth.Fingerprint(secret))
	}

	out := rivoractl(t, d, "destinations", "list", "-o", "json")
	ids := parseDestinationList(t, out)
	if !ids["d1"] || !ids["d2"] {
		t.Errorf("destinations list -o json lists %v, want d1 and d2", ids)
	}

	out = rivoractl(t, d, "publish", "--destination", "d1", "--customer", "cli-cust", "--lane", "cli-lane",
		"--type", "cli.test", "--data", `{"from":"rivoractl"}`)
	id := eventIDPattern.FindString(out)
	if id == "" {
		t.Fatalf("publish printed no event id: %q", out)
	}
	p.WaitDelivered(t, []string{id}, 30*time.Second)
	for _, r := range p.Requests() {
		if r.ID == id && string(r.Payload) != `{"from":"rivoractl"}` {
			t.Errorf("partner got payload %q", r.Payload)
		}
	}

	// events get -o json shows it delivered (poll: the outcome is recorded
	// after the partner answered).
	var state rivorav1.EventState
	err := poll.Check(20*time.Second, 100*time.Millisecond, func() error {
		out = rivoractl(t, d, "events", "get", id, "-o", "json")
		ev := &rivorav1.GetEventResponse{}
		if err := protojson.Unmarshal([]byte(out), ev); err != nil {
			t.Fatalf("events get -o json is not a GetEventResponse: %v\n%s", err, out)
		}
		if ev.GetEventId() != id || ev.GetDestinationId() != "d1" || ev.GetLaneKey() != "cli-lane" {
			t.Fatalf("events get -o json = %s", out)
		}
		if state = ev.GetState(); state != rivorav1.EventState_EVENT_STATE_DELIVERED {
			return errNotYet
		}
		return nil
	})
	if err != nil {
		t.Fatalf("events get: state %v, want DELIVERED", state)
	}

	// A mistake is reported with a non-zero exit.
	if _, errOut, err := runRivoractl(d, "destinations", "create", "Bad/Id", "--url", p.URL()); err == nil {
		t.Errorf("destinations create with an invalid id exited 0")
	} else if strings.TrimSpace(errOut) == "" {
		t.Errorf("destinations create with an invalid id printed nothing on stderr")
	}
}

// parseDestinationList accepts either a ListDestinationsResponse object or a
// plain array of destinations.
func parseDestinationList(t testing.TB, out string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	trimmed := strings.TrimSpace(out)
	if strings.HasPrefix(trimmed, "[") {
		var arr []json.RawMessage
		if err := json.Unmarshal([]byte(trimmed), &arr); err != nil {
			t.Fatalf("destinations list -o json: %v\n%s", err, out)
		}
		for _, raw := range arr {
			dst := &rivorav1.Destination{}
			if err := protojson.Unmarshal(raw, dst); err != nil {
				t.Fatalf("destinations list -o json element: %v\n%s", err, raw)
			}
			ids[dst.GetId()] = true
		}
		return ids
	}
	resp := &rivorav1.ListDestinationsResponse{}
	if err := protojson.Unmarshal([]byte(trimmed), resp); err != nil {
		t.Fatalf("destinations list -o json: %v\n%s", err, out)
	}
	for _, dst := range resp.GetDestinations() {
		ids[dst.GetId()] = true
	}
	return ids
}
