package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// newPoisonPartner is a partner that answers 400 to every request whose
// payload contains poison and handles the rest as newPartner does.
func newPoisonPartner(t testing.TB, poison []byte) *partner.Partner {
	t.Helper()
	return partner.New(t, partner.Options{Verify: true, Answer: func(r partner.Request) int {
		if bytes.Contains(r.Payload, poison) {
			return http.StatusBadRequest
		}
		return 0
	}})
}

// A poison event holds its lane: `lanes list --stuck` shows the lane with
// its depth and the head's last status; `lanes skip` makes the head a dead
// letter (reason manual), audited, and the lane's next event is delivered.
func TestLanesListStuckAndSkip(t *testing.T) {
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
	d := startDev(t, devOptions{})
	c := d.SDK()
	ctx := ctxTimeout(t, 2*time.Minute)
	p := newPoisonPartner(t, []byte(`"poison":true`))
	// Many attempts: the poison head stays pending until it is skipped.
	createDestination(t, d, "lanes", p, "", &rivorav1.Limits{MaxAttempts: 1000})

	publish := func(lane, payload string) string {
		id, err := c.Publish(ctx, sdk.Event{Destination: "lanes", Customer: "acme", Lane: lane, Type: "t.lanes", Payload: []byte(payload), ContentType: "application/json"})
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		return id
	}
	poison := publish("user-42", `{"poison":true}`)
	next := publish("user-42", `{"n":2}`)
	other := publish("user-7", `{"n":1}`)
	p.WaitDelivered(t, []string{other}, 30*time.Second)

	var stuck *rivorav1.LaneSummary
	poll.True(t, "lanes list --stuck shows the poison lane", 30*time.Second, func() bool {
		resp := &rivorav1.ListLanesResponse{}
		if err := protojson.Unmarshal([]byte(rivoractl(t, d, "lanes", "list", "--destination", "lanes", "--stuck", "-o", "json")), resp); err != nil {
			t.Fatalf("lanes list -o json: %v", err)
		}
		if len(resp.GetLanes()) != 1 || resp.GetLanes()[0].GetLastStatus() != 400 {
			return false
		}
		stuck = resp.GetLanes()[0]
		return true
	})
	if stuck.GetCustomerId() != "acme" || stuck.GetLaneKey() != "user-42" || stuck.GetDepth() != 2 || stuck.GetHeadEventId() != poison || stuck.GetHeadAttempts() < 1 || stuck.GetHeadSince() == nil {
		t.Fatalf("stuck lane = %v, want acme/user-42 of depth 2 behind %s", stuck, poison)
	}
	table := rivoractl(t, d, "lanes", "list", "--destination", "lanes", "--stuck")
	for _, s := range []string{"CUSTOMER", "WAITING", "user-42", poison, "400"} {
		if !strings.Contains(table, s) {
			t.Errorf("lanes list table lacks %q:\n%s", s, table)
		}
	}

	var out string
	poll.True(t, "lanes skip between the head's attempts", 30*time.Second, func() bool {
		var errOut string
		var err error
		out, errOut, err = runRivoractl(d, "lanes", "skip", "lanes", "--customer", "acme", "--lane", "user-42", "--head", poison, "--reason", "poison payload")
		if err != nil && !strings.Contains(errOut, "in flight") {
			t.Fatalf("lanes skip: %v: %s", err, errOut)
		}
		return err == nil
	})
	if !strings.Contains(out, poison) || !strings.Contains(out, "1 event left") {
		t.Errorf("lanes skip printed %q, want the skipped event and 1 event left", out)
	}
	p.WaitDelivered(t, []string{next}, 30*time.Second)

	dl := waitDeadLetter(t, d.DataDir(), "lanes", poison, 30*time.Second)
	if dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_MANUAL || dl.GetLastStatus() != 400 {
		t.Errorf("dead letter = reason %v, last status %d; want manual, 400", dl.GetReason(), dl.GetLastStatus())
	}
	var dlq []struct{ EventID, Reason string }
	if err := json.Unmarshal([]byte(rivoractl(t, d, "dlq", "list", "--destination", "lanes", "-o", "json")), &dlq); err != nil {
		t.Fatalf("dlq list -o json: %v", err)
	}
	if len(dlq) != 1 || dlq[0].EventID != poison || dlq[0].Reason != "manual" {
		t.Errorf("dlq list = %+v, want %s with reason manual", dlq, poison)
	}

	var audit []struct{ Action, Author, Reason, Detail string }
	if err := json.Unmarshal([]byte(rivoractl(t, d, "audit", "--destination", "lanes", "-o", "json")), &audit); err != nil {
		t.Fatalf("audit -o json: %v", err)
	}
	found := false
	for _, e := range audit {
		if e.Action == "lane.skip" {
			found = true
			if e.Author != "bootstrap" || e.Reason != "poison payload" || !strings.Contains(e.Detail, poison) {
				t.Errorf("lane.skip audit entry = %+v", e)
			}
		}
	}
	if !found {
		t.Errorf("audit has no lane.skip: %+v", audit)
	}
}
