package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/poll"
)

// What the Grafana dashboard (deploy/grafana/rivora.json) reads besides
// the budget gauges: 429 answers counted apart from other 4xx, and every
// attempt's duration in a histogram, per destination.
func TestThrottledAndAttemptDurationMetrics(t *testing.T) {
	d := startDev(t, devOptions{})
	var answered atomic.Int32
	p := newGatedPartner(t, func(time.Time) int {
		if answered.Add(1) <= 2 {
			return http.StatusTooManyRequests
		}
		return 0 // the partner's own answer: 200
	})
	createDestination(t, d, "metered", p, "", nil)
	id, err := d.SDK().Publish(ctxTimeout(t, 10*time.Second), sdk.Event{
		Destination: "metered", Customer: "acme", Lane: "u1", Type: "t", Payload: []byte(`{}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	p.WaitDelivered(t, []string{id}, 60*time.Second)
	err = poll.Check(10*time.Second, 20*time.Millisecond, func() error {
		throttled := metricValue(t, d, `rivora_delivery_throttled_total{destination="metered"}`)
		timed := metricValue(t, d, `rivora_delivery_attempt_duration_seconds_count{destination="metered"}`)
		ok := metricValue(t, d, `rivora_delivery_attempts_total{class="2xx",destination="metered"}`)
		fourxx := metricValue(t, d, `rivora_delivery_attempts_total{class="4xx",destination="metered"}`)
		if throttled != 2 || fourxx != 2 || ok != 1 || timed != 3 {
			return fmt.Errorf("throttled %v, 4xx %v, 2xx %v, timed attempts %v; want 2, 2, 1 and 3", throttled, fourxx, ok, timed)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Every metric the dashboard queries is one the server exports (a
	// vector once it has a sample: a dead letter, and a backlog, here
	// an event held by a paused destination).
	held := newPartner(t)
	createDestination(t, d, "held", held, "", nil)
	paused, err := d.Admin().PauseDestination(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "held", Reason: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	waitConfigApplied(t, d, paused.Msg.GetVersion())
	if _, err := d.SDK().Publish(ctxTimeout(t, 10*time.Second), sdk.Event{Destination: "held", Customer: "acme", Lane: "a", Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	dead := newPartner(t)
	dead.SetStatus(http.StatusBadRequest)
	createDestination(t, d, "refusing", dead, "", &rivorav1.Limits{MaxAttempts: 1})
	for _, lane := range []string{"a", "b"} {
		if _, err := d.SDK().Publish(ctxTimeout(t, 10*time.Second), sdk.Event{Destination: "refusing", Customer: "acme", Lane: lane, Type: "t", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dashboard, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "rivora.json"))
	if err != nil {
		t.Fatal(err)
	}
	var parsed map[string]any
	if err := json.Unmarshal(dashboard, &parsed); err != nil {
		t.Fatalf("deploy/grafana/rivora.json is not JSON: %v", err)
	}
	queried := map[string]bool{}
	for _, name := range regexp.MustCompile(`rivora_[a-z_]+`).FindAllString(string(dashboard), -1) {
		queried[strings.TrimSuffix(name, "_bucket")] = true
	}
	if len(queried) < 10 {
		t.Fatalf("the dashboard queries only %d metrics: %v", len(queried), queried)
	}
	err = poll.Check(30*time.Second, 50*time.Millisecond, func() error {
		text := metricsText(t, d)
		var missing []string
		for name := range queried {
			if !strings.Contains(text, "\n# HELP "+name+" ") {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("the dashboard queries metrics /metrics does not export: %v", missing)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
