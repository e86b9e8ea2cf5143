package agent_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/agent/owner"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk/eventid"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// ---- harness ---------------------------------------------------------------

// running is one `rivora dev` in process (rig.Dev): a control plane
// and an agent named "test" following it, with this package's helpers.
type running struct {
	*rig.Dev
	t *testing.T
}

const agentName = "test"

func startAgent(t *testing.T, dir string) *running {
	t.Helper()
	return &running{Dev: rig.StartDev(t, dir, rig.Options{Name: agentName, Workers: 8}), t: t}
}

// stop ends the control plane and the agent; idempotent.
func (r *running) stop() { r.Stop() }

// create registers destinations through the admin API and waits until the
// agent has applied them.
func (r *running) create(dests ...*rivorav1.CreateDestinationRequest) { r.Create(dests...) }

func (r *running) publish(dest, customer, lane string) string {
	r.t.Helper()
	resp, err := r.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{
		DestinationId: dest, CustomerId: customer, LaneKey: lane, Type: "test.event",
		Payload: fmt.Appendf(nil, `{"lane":%q,"at":%d}`, lane, time.Now().UnixNano()),
	}))
	if err != nil {
		r.t.Fatalf("publish to %s/%s/%s: %v", dest, customer, lane, err)
	}
	return resp.Msg.GetEventId()
}

func (r *running) getEvent(id string) (*rivorav1.GetEventResponse, error) {
	resp, err := r.Events.GetEvent(context.Background(), connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// waitEvent polls GetEvent until cond holds.
func (r *running) waitEvent(id, what string, cond func(*rivorav1.GetEventResponse) bool) *rivorav1.GetEventResponse {
	r.t.Helper()
	var last *rivorav1.GetEventResponse
	var lastErr error
	if poll.Within(15*time.Second, func() bool {
		last, lastErr = r.getEvent(id)
		return lastErr == nil && cond(last)
	}) != nil {
		r.t.Fatalf("event %s: timed out waiting for %s; last answer %v, err %v", id, what, last, lastErr)
	}
	return last
}

func (r *running) health(dest string) *rivorav1.DestinationHealth {
	r.t.Helper()
	hs, err := r.Agent.Health(context.Background(), dest, false)
	if err != nil {
		r.t.Fatalf("Health: %v", err)
	}
	if len(hs) != 1 {
		r.t.Fatalf("Health(%s) returned %d destinations, want 1", dest, len(hs))
	}
	return hs[0]
}

func destination(id, url string, maxAttempts int32) *rivorav1.CreateDestinationRequest {
	return &rivorav1.CreateDestinationRequest{Id: id, Url: url, Secret: secret, Limits: &rivorav1.Limits{
		RatePerSecond: 1000, Burst: 1000, MaxAttempts: maxAttempts, MaxInFlight: 16,
		Window: durationpb.New(time.Hour), Timeout: durationpb.New(2 * time.Second),
	}}
}

// ---- partner ---------------------------------------------------------------

// newPartner starts a partner (testkit/partner) that verifies every
// request with this package's secret and answers as answer says (nil or
// 0: 200), with "partner says no" as the body of a refusal.
func newPartner(t *testing.T, answer func(r partner.Request) int) *partner.Partner {
	return partner.New(t, partner.Options{Secret: secret, RefusalBody: "partner says no", Answer: answer})
}

// allDelivered reports whether every id of want was answered 2xx.
func allDelivered(p *partner.Partner, want map[string][]string) bool {
	got := p.DeliveredByLane()
	for lane, ids := range want {
		for _, id := range ids {
			if !slices.Contains(got[lane], id) {
				return false
			}
		}
	}
	return true
}

// checkOrder asserts lane order over the whole request log: no event of a
// lane is sent before every earlier event of that lane was answered 2xx,
// so each lane's first successes come in publish order. Requests for ids
// in ignore (dead letters) are skipped.
func checkOrder(t *testing.T, p *partner.Partner, want map[string][]string, ignore ...string) {
	t.Helper()
	okSoFar := make(map[string]map[string]bool) // lane → delivered ids
	for i, r := range p.Requests() {
		ids, ok := want[r.LaneKey]
		if !ok || slices.Contains(ignore, r.ID) {
			continue
		}
		pos := slices.Index(ids, r.ID)
		if pos < 0 {
			t.Fatalf("request %d: unknown event %s in lane %s", i, r.ID, r.LaneKey)
		}
		for _, earlier := range ids[:pos] {
			if !okSoFar[r.LaneKey][earlier] {
				t.Fatalf("request %d: lane %s sent %s (#%d) before %s was delivered", i, r.LaneKey, r.ID, pos, earlier)
			}
		}
		if r.Status < 300 {
			if okSoFar[r.LaneKey] == nil {
				okSoFar[r.LaneKey] = make(map[string]bool)
			}
			okSoFar[r.LaneKey][r.ID] = true
		}
	}
}

// ---- archive ---------------------------------------------------------------

// deadLetters reads every archived dead letter of dest under dataDir.
func deadLetters(t *testing.T, dataDir, dest string) ([]string, []*rivorav1.DeadLetter) {
	t.Helper()
	root := filepath.Join(dataDir, "archive", "deadletter", dest)
	var paths []string
	var out []*rivorav1.DeadLetter
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".ndjson.gz") {
			return nil
		}
		paths = append(paths, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%s is not gzip: %w", path, err)
		}
		sc := bufio.NewScanner(zr)
		for sc.Scan() {
			dl := &rivorav1.DeadLetter{}
			if err := protojson.Unmarshal(sc.Bytes(), dl); err != nil {
				return fmt.Errorf("%s: line is not a protojson DeadLetter: %w", path, err)
			}
			out = append(out, dl)
		}
		return sc.Err()
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return paths, out
}

// ---- tests -----------------------------------------------------------------

// Lanes are FIFO; a lane whose head keeps failing holds only itself: the
// other lanes of the same destination and customer flow meanwhile.
func TestLaneOrderAndFailingHeadWaits(t *testing.T) {
	t.Parallel()
	want := make(map[string][]string)
	var mu sync.Mutex
	othersDone := false
	p := newPartner(t, func(r partner.Request) int {
		if r.LaneKey != "blocked" {
			return 200
		}
		mu.Lock()
		defer mu.Unlock()
		if !othersDone {
			return 400
		}
		return 200
	})
	ag := startAgent(t, t.TempDir())
	ag.create(destination("orders", p.URL(), 50))
	for i := range 5 {
		for _, l := range []struct{ customer, lane string }{{"acme", "blocked"}, {"acme", "u1"}, {"globex", "u2"}} {
			if l.lane == "blocked" && i >= 3 {
				continue
			}
			want[l.lane] = append(want[l.lane], ag.publish("orders", l.customer, l.lane))
		}
	}
	// The other lanes finish while the blocked head is failing.
	poll.True(t, "unblocked lanes delivered", 15*time.Second, func() bool {
		return allDelivered(p, map[string][]string{"u1": want["u1"], "u2": want["u2"]})
	})
	if got := p.DeliveredByLane()["blocked"]; len(got) != 0 {
		t.Fatalf("blocked lane delivered %v while its partner answered 400", got)
	}
	head := ag.waitEvent(want["blocked"][0], "failed head pending with a retry time", func(r *rivorav1.GetEventResponse) bool {
		return r.GetState() == rivorav1.EventState_EVENT_STATE_PENDING && len(r.GetAttempts()) >= 1 && r.GetNextAttemptAt() != nil
	})
	if a := head.GetAttempts()[0]; a.GetStatusCode() != 400 || a.GetError() != "HTTP 400: partner says no" || a.GetNumber() != 1 {
		t.Fatalf("first attempt recorded as %v", a)
	}
	second := ag.waitEvent(want["blocked"][1], "second event waiting behind the head", func(r *rivorav1.GetEventResponse) bool {
		return r.GetState() == rivorav1.EventState_EVENT_STATE_PENDING
	})
	if second.GetAheadInLane() != 1 || len(second.GetAttempts()) != 0 || second.GetLaneKey() != "blocked" || second.GetCustomerId() != "acme" || second.GetType() != "test.event" {
		t.Fatalf("event behind a failing head: %v", second)
	}
	mu.Lock()
	othersDone = true
	mu.Unlock()
	poll.True(t, "blocked lane delivered after its head recovers", 15*time.Second, func() bool { return allDelivered(p, want) })
	checkOrder(t, p, want)
	// The head was retried with increasing attempt numbers.
	var attempts []int
	for _, r := range p.Requests() {
		if r.ID == want["blocked"][0] {
			attempts = append(attempts, r.Attempt)
		}
	}
	if len(attempts) < 2 || attempts[len(attempts)-1] != len(attempts) {
		t.Fatalf("head's rivora-attempt headers %v, want 1, 2, …", attempts)
	}
	for i, a := range attempts {
		if a != i+1 {
			t.Fatalf("head's rivora-attempt headers %v, want 1, 2, …", attempts)
		}
	}
	for _, r := range p.Requests() {
		if r.LaneKey == "u2" && r.Customer != "globex" || r.LaneKey == "u1" && r.Customer != "acme" {
			t.Fatalf("rivora-customer %q on lane %s", r.Customer, r.LaneKey)
		}
	}
	done := ag.waitEvent(want["u1"][0], "delivered", func(r *rivorav1.GetEventResponse) bool {
		return r.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
	})
	if len(done.GetAttempts()) != 1 || done.GetAttempts()[0].GetStatusCode() != 200 || done.GetDestinationId() != "orders" {
		t.Fatalf("delivered event: %v", done)
	}
	// The partner logs a request before it answers: the last deliveries
	// leave their lanes once the agent read the answers.
	poll.True(t, "nothing pending after everything was delivered", 10*time.Second, func() bool { return ag.health("orders").GetPendingEvents() == 0 })
}

// max_attempts 2: the head dies after its second 400, is archived as a
// dead letter under DataDir/archive, and the lane continues.
func TestDeadLetterArchivedAndLaneContinues(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var deadID string
	p := newPartner(t, func(r partner.Request) int {
		mu.Lock()
		defer mu.Unlock()
		if r.ID == deadID {
			return 400
		}
		return 200
	})
	dir := t.TempDir()
	ag := startAgent(t, dir)
	ag.create(destination("flaky", p.URL(), 2))
	mu.Lock()
	deadID = ag.publish("flaky", "acme", "u1")
	mu.Unlock()
	after := []string{ag.publish("flaky", "acme", "u1"), ag.publish("flaky", "acme", "u1")}
	poll.True(t, "lane continues after the dead letter", 15*time.Second, func() bool {
		return allDelivered(p, map[string][]string{"u1": after})
	})
	checkOrder(t, p, map[string][]string{"u1": after}, deadID)
	// Nothing behind the dead event went out before its last attempt.
	reqs := p.Requests()
	lastDead := slices.IndexFunc(reqs, func(r partner.Request) bool { return r.ID == deadID && r.Attempt == 2 })
	firstAfter := slices.IndexFunc(reqs, func(r partner.Request) bool { return r.ID == after[0] })
	if lastDead < 0 || firstAfter < lastDead {
		t.Fatalf("request log %v: %s went out before the head's last attempt", reqs, after[0])
	}
	if n := p.Sent(deadID); n != 2 {
		t.Fatalf("dead event sent %d times, want 2", n)
	}
	var paths []string
	var letters []*rivorav1.DeadLetter
	poll.True(t, "dead letter archived", 15*time.Second, func() bool {
		paths, letters = deadLetters(t, dir, "flaky")
		return len(letters) > 0
	})
	if len(letters) != 1 {
		t.Fatalf("archive holds %d dead letters, want 1", len(letters))
	}
	dl := letters[0]
	if dl.GetEvent().GetEventId() != deadID || dl.GetAttempts() != 2 || dl.GetLastStatus() != 400 ||
		dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS || dl.GetLastError() != "HTTP 400: partner says no" ||
		dl.GetEvent().GetLaneKey() != "u1" || len(dl.GetEvent().GetPayload()) == 0 || dl.GetFirstAttemptAt() == nil || dl.GetDeadAt() == nil {
		t.Fatalf("dead letter = %v", dl)
	}
	rel, err := filepath.Rel(filepath.Join(dir, "archive"), paths[0])
	if err != nil {
		t.Fatal(err)
	}
	at := dl.GetDeadAt().AsTime().UTC()
	if wantPrefix := filepath.Join("deadletter", "flaky", at.Format("2006"), at.Format("01"), at.Format("02"), at.Format("15")); !strings.HasPrefix(rel, wantPrefix+string(filepath.Separator)) {
		t.Fatalf("object %s not under %s", rel, wantPrefix)
	}
	dead := ag.waitEvent(deadID, "dead", func(r *rivorav1.GetEventResponse) bool {
		return r.GetState() == rivorav1.EventState_EVENT_STATE_DEAD && len(r.GetAttempts()) == 2
	})
	if dead.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS {
		t.Fatalf("GetEvent(dead) = %v", dead)
	}
}

// A restart rebuilds pending lanes and attempt state from the store:
// events accepted while the partner was down are delivered, in order, once
// the restarted agent finds it up; the head's attempt count carries over.
func TestRestartResumesFromStore(t *testing.T) {
	t.Parallel()
	// 400: the event's fault, so each failure is a charged attempt (a
	// destination that is down would cost none).
	p := newPartner(t, func(partner.Request) int { return http.StatusBadRequest })
	dir := t.TempDir()
	ag := startAgent(t, dir)
	ag.create(destination("orders", p.URL(), 50))
	want := make(map[string][]string)
	for range 4 {
		want["main"] = append(want["main"], ag.publish("orders", "acme", "main"))
	}
	want["side"] = append(want["side"], ag.publish("orders", "globex", "side"))
	head := want["main"][0]
	ag.waitEvent(head, "two recorded failures and a scheduled retry", func(r *rivorav1.GetEventResponse) bool {
		return len(r.GetAttempts()) >= 2 && r.GetState() == rivorav1.EventState_EVENT_STATE_PENDING && r.GetNextAttemptAt() != nil
	})
	// Keep publishing to the lane while the agent stops: some of these are
	// accepted but not yet moved into their lane when it goes down.
	var mu sync.Mutex
	var accepted, uncertain []string
	publisherDone := make(chan struct{})
	go func() {
		defer close(publisherDone)
		for i := range 300 {
			key := fmt.Sprintf("late-%03d", i)
			id := eventid.FromKey("orders", "acme", key)
			_, err := ag.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{
				DestinationId: "orders", CustomerId: "acme", LaneKey: "main", Type: "test.event", Payload: []byte(`{}`), IdempotencyKey: key,
			}))
			mu.Lock()
			if err != nil {
				// Stored or not: the agent went down while answering.
				uncertain = append(uncertain, id)
				mu.Unlock()
				return
			}
			accepted = append(accepted, id)
			mu.Unlock()
		}
	}()
	poll.True(t, "publisher running", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted) >= 3
	})
	ag.stop()
	<-publisherDone
	want["main"] = append(want["main"], accepted...)
	failures := p.Sent(head)
	if failures < 2 {
		t.Fatalf("head sent %d times before the stop", failures)
	}
	if got := p.DeliveredByLane(); len(got) != 0 {
		t.Fatalf("delivered %v while the partner was down", got)
	}

	// The partner is back; the destination is in the control plane's state.
	p.SetAnswer(nil)
	ag2 := startAgent(t, dir)
	// Accepted after the restart: goes after everything accepted before.
	want["main"] = append(want["main"], ag2.publish("orders", "acme", "main"))
	// Well within INGEST's 30 s ack wait: nothing the first run had
	// fetched but not moved may wait for it.
	poll.True(t, "everything delivered after the restart", 20*time.Second, func() bool { return allDelivered(p, want) })
	checkOrder(t, p, want, uncertain...)
	var resumed []int
	for _, r := range p.Requests() {
		if r.ID == head && r.Status < 300 {
			resumed = append(resumed, r.Attempt)
		}
	}
	if resumed[0] != failures+1 {
		t.Fatalf("after the restart the head went out as attempt %d, want %d (its %d failed attempts survive)", resumed[0], failures+1, failures)
	}
	got := ag2.waitEvent(head, "delivered with its whole history", func(r *rivorav1.GetEventResponse) bool {
		return r.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
	})
	if n := len(got.GetAttempts()); n != failures+1 {
		t.Fatalf("GetEvent lists %d attempts, want %d", n, failures+1)
	}
	for i, a := range got.GetAttempts() {
		wantStatus := int32(400)
		if i == failures {
			wantStatus = 200
		}
		if a.GetNumber() != int32(i+1) || a.GetStatusCode() != wantStatus {
			t.Fatalf("attempt %d = %v, want number %d status %d", i, a, i+1, wantStatus)
		}
	}
	poll.True(t, "nothing pending", 10*time.Second, func() bool { return ag2.health("orders").GetPendingEvents() == 0 })
}

// ArchivePending dead-letters what is pending (reason deleted); Health
// reports the per-customer backlog before that.
func TestArchivePendingAndBacklog(t *testing.T) {
	t.Parallel()
	p := newPartner(t, nil)
	dir := t.TempDir()
	slow := destination("slow", p.URL(), 8)
	slow.Limits.RatePerSecond, slow.Limits.Burst = 0.001, 1 // one token, then none for ~17 minutes
	ag := startAgent(t, dir)
	ag.create(slow)
	w := 3.0
	resp, err := ag.Admin.SetPriority(context.Background(), connect.NewRequest(&rivorav1.SetPriorityRequest{DestinationId: "slow", CustomerId: "globex", Weight: &w}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(resp.Msg.GetVersion())
	ids := map[string][]string{}
	for range 3 {
		ids["x"] = append(ids["x"], ag.publish("slow", "acme", "x"))
	}
	for range 2 {
		ids["y"] = append(ids["y"], ag.publish("slow", "globex", "y"))
	}
	poll.True(t, "one delivery, then nothing in flight", 10*time.Second, func() bool {
		h := ag.health("slow")
		return len(p.Requests()) == 1 && h.GetInFlight() == 0 && h.GetPendingEvents() == 4
	})
	first := p.Requests()[0]
	if first.ID != ids["x"][0] && first.ID != ids["y"][0] {
		t.Fatalf("first delivery %s is not a lane head", first.ID)
	}
	h := ag.health("slow")
	if h.GetState() != "healthy" || h.GetConfiguredRate() != 0.001 || h.GetMaxInFlight() != 16 || h.GetPriorityClass() != rivorav1.PriorityClass_PRIORITY_CLASS_NORMAL || !slices.Equal(h.GetLastStatuses(), []int32{200}) {
		t.Fatalf("health = %v", h)
	}
	backlog := map[string]*rivorav1.CustomerBacklog{}
	for _, c := range h.GetCustomers() {
		backlog[c.GetCustomerId()] = c
	}
	wantPending := map[string]int64{"acme": 3, "globex": 2}
	if first.LaneKey == "x" {
		wantPending["acme"]--
	} else {
		wantPending["globex"]--
	}
	for cust, want := range wantPending {
		c := backlog[cust]
		if c == nil || c.GetPendingEvents() != want || c.GetDueLanes() != 1 || c.GetWaitingLanes() != 0 || c.GetInFlight() != 0 {
			t.Fatalf("backlog of %s = %v, want %d pending in 1 due lane", cust, c, want)
		}
	}
	if backlog["globex"].GetWeight() != 3 || backlog["acme"].GetWeight() != 1 {
		t.Fatalf("weights: globex %v acme %v", backlog["globex"].GetWeight(), backlog["acme"].GetWeight())
	}
	last := ids["x"][2]
	pend := ag.waitEvent(last, "pending", func(r *rivorav1.GetEventResponse) bool { return true })
	wantAhead := int32(2)
	if first.LaneKey == "x" {
		wantAhead = 1
	}
	if pend.GetState() != rivorav1.EventState_EVENT_STATE_PENDING || pend.GetAheadInLane() != wantAhead || pend.GetNextAttemptAt() != nil {
		t.Fatalf("GetEvent(pending) = %v, want pending with %d ahead", pend, wantAhead)
	}

	n, err := ag.Agent.ArchivePending(context.Background(), "slow")
	if err != nil || n != (owner.Archived{Now: 4}) {
		t.Fatalf("ArchivePending = %+v, %v; want 4 archived now", n, err)
	}
	if pending, _ := ag.Agent.Pending(context.Background(), "slow"); pending != 0 {
		t.Fatalf("pending after ArchivePending = %d", pending)
	}
	var letters []*rivorav1.DeadLetter
	poll.True(t, "4 dead letters archived", 15*time.Second, func() bool {
		_, letters = deadLetters(t, dir, "slow")
		return len(letters) >= 4
	})
	if len(letters) != 4 {
		t.Fatalf("archive holds %d letters, want 4", len(letters))
	}
	archived := map[string][]string{}
	for _, dl := range letters {
		if dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_DELETED {
			t.Fatalf("dead letter reason %v, want DELETED", dl.GetReason())
		}
		archived[dl.GetEvent().GetLaneKey()] = append(archived[dl.GetEvent().GetLaneKey()], dl.GetEvent().GetEventId())
	}
	for lane, all := range ids {
		rest := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id == first.ID })
		got := archived[lane]
		slices.Sort(got)
		slices.Sort(rest)
		if !slices.Equal(got, rest) {
			t.Fatalf("lane %s archived %v, want %v", lane, got, rest)
		}
	}
	dead := ag.waitEvent(last, "dead after ArchivePending", func(r *rivorav1.GetEventResponse) bool {
		return r.GetState() == rivorav1.EventState_EVENT_STATE_DEAD
	})
	if dead.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_DELETED {
		t.Fatalf("GetEvent after ArchivePending = %v, want dead (deleted)", dead)
	}
	if n := len(p.Requests()); n != 1 {
		t.Fatalf("partner got %d requests, want only the first", n)
	}
}

// A lane's head that was tried before its destination's pending events
// were archived keeps its tries in its dead letter (attempts, last status
// and error); the event behind it was never tried.
func TestArchivedHeadKeepsItsAttempts(t *testing.T) {
	t.Parallel()
	p := newPartner(t, func(partner.Request) int { return 400 })
	dir := t.TempDir()
	ag := startAgent(t, dir)
	ag.create(destination("refusing", p.URL(), 100))
	head := ag.publish("refusing", "acme", "l1")
	behind := ag.publish("refusing", "acme", "l1")
	ag.waitEvent(head, "head tried", func(r *rivorav1.GetEventResponse) bool { return len(r.GetAttempts()) >= 1 })

	// A lane whose head is in flight is not taken: archive until both are.
	var archived int64
	poll.True(t, "both events archived", 15*time.Second, func() bool {
		n, err := ag.Agent.ArchivePending(context.Background(), "refusing")
		if err != nil {
			t.Fatalf("ArchivePending: %v", err)
		}
		archived += int64(n.Now)
		return archived == 2
	})
	var letters []*rivorav1.DeadLetter
	poll.True(t, "2 dead letters archived", 15*time.Second, func() bool {
		_, letters = deadLetters(t, dir, "refusing")
		return len(letters) >= 2
	})
	byID := map[string]*rivorav1.DeadLetter{}
	for _, dl := range letters {
		byID[dl.GetEvent().GetEventId()] = dl
	}
	if dl := byID[head]; dl.GetAttempts() < 1 || dl.GetLastStatus() != 400 || dl.GetLastError() != "HTTP 400: partner says no" || dl.GetFirstAttemptAt() == nil {
		t.Errorf("the tried head's dead letter = %v; want its attempts (>= 1), last status 400 and error", dl)
	}
	if dl := byID[behind]; dl == nil || dl.GetAttempts() != 0 || dl.GetLastStatus() != 0 || dl.GetLastError() != "" {
		t.Errorf("the untried event's dead letter = %v; want no attempts", dl)
	}
	dead := ag.waitEvent(head, "head dead", func(r *rivorav1.GetEventResponse) bool {
		return r.GetState() == rivorav1.EventState_EVENT_STATE_DEAD
	})
	if dead.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_DELETED {
		t.Errorf("the head after archiving = %v, want dead (deleted)", dead)
	}
}

func TestGetEventErrors(t *testing.T) {
	t.Parallel()
	ag := startAgent(t, t.TempDir())
	_, err := ag.getEvent("bad id")
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "event_id") {
		t.Fatalf("GetEvent(bad id): %v, want InvalidArgument naming event_id", err)
	}
	_, err = ag.getEvent("")
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("GetEvent(empty): %v, want InvalidArgument", err)
	}
	_, err = ag.getEvent("0190a0c0-0000-7000-8000-000000000000")
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("GetEvent(unknown): %v, want NotFound", err)
	}
	_, err = ag.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "nope", CustomerId: "c", LaneKey: "k", Type: "t"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), `destination "nope" is not registered`) {
		t.Fatalf("Publish over HTTP to an unknown destination: %v", err)
	}
}

// A destination answering 503 is degraded at once and parked after 20 s
// without a success (probe mode); when it answers again a probe brings it
// back and its backlog drains. The park threshold is the budget's real
// 20 s: this test takes that long, in parallel with the others.
func TestHealthDegradedThenParked(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 20 s park threshold")
	}
	t.Parallel()
	p := newPartner(t, func(partner.Request) int { return http.StatusServiceUnavailable })
	ag := startAgent(t, t.TempDir())
	ag.create(destination("down", p.URL(), 1000))
	var ids []string
	ids = append(ids, ag.publish("down", "acme", "l0"))
	poll.True(t, "degraded", 10*time.Second, func() bool { return ag.health("down").GetState() == "degraded" })
	h := ag.health("down")
	if tr := h.GetLastTransition(); tr.GetFrom() != "healthy" || tr.GetTo() != "degraded" || !strings.Contains(tr.GetCause(), "HTTP 503") {
		t.Fatalf("transition = %v", tr)
	}
	if h.GetCurrentRate() >= h.GetConfiguredRate() || !slices.Contains(h.GetLastStatuses(), 503) {
		t.Fatalf("degraded health = %v", h)
	}
	// Keep new lanes coming so that attempts (and failures) continue until
	// the park threshold passes.
	last := time.Now()
	if poll.Within(40*time.Second, func() bool {
		if ag.health("down").GetState() == "parked" {
			return true
		}
		if time.Since(last) > 300*time.Millisecond {
			ids = append(ids, ag.publish("down", "acme", fmt.Sprintf("l%d", len(ids))))
			last = time.Now()
		}
		return false
	}) != nil {
		t.Fatalf("not parked after 40s of 503s: %v", ag.health("down"))
	}
	h = ag.health("down")
	if tr := h.GetLastTransition(); tr.GetTo() != "parked" || !strings.Contains(tr.GetCause(), "no success for") {
		t.Fatalf("parked transition = %v", tr)
	}
	if c := h.GetCustomers(); len(c) != 1 || c[0].GetCustomerId() != "acme" || c[0].GetPendingEvents() != int64(len(ids)) || c[0].GetWaitingLanes()+c[0].GetDueLanes()+c[0].GetInFlight() != int64(len(ids)) {
		t.Fatalf("parked backlog = %v, want %d events in %d lanes", c, len(ids), len(ids))
	}
	p.SetAnswer(nil)
	poll.True(t, "backlog drained after the destination recovered", 20*time.Second, func() bool {
		return ag.health("down").GetPendingEvents() == 0
	})
	h = ag.health("down")
	if h.GetState() == "parked" {
		t.Fatalf("still parked after deliveries succeeded: %v", h)
	}
	for i, id := range ids {
		got := ag.waitEvent(id, "delivered", func(r *rivorav1.GetEventResponse) bool {
			return r.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
		})
		if i == 0 && len(got.GetAttempts()) < 2 {
			t.Fatalf("first event delivered after %d attempts; it failed first", len(got.GetAttempts()))
		}
	}
}

// A paused destination gets no attempt; events keep being accepted and
// wait in their lanes; on resume they go out in lane order.
func TestPauseHoldsResumeDrains(t *testing.T) {
	t.Parallel()
	p := newPartner(t, nil)
	ag := startAgent(t, t.TempDir())
	ag.create(destination("orders", p.URL(), 8))
	pause, err := ag.Admin.PauseDestination(context.Background(), connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "orders", Reason: "partner maintenance"}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(pause.Msg.GetVersion())
	want := map[string][]string{}
	for i := range 6 {
		lane := fmt.Sprintf("u%d", i%2)
		want[lane] = append(want[lane], ag.publish("orders", "acme", lane))
	}
	poll.True(t, "6 events pending", 10*time.Second, func() bool {
		n, err := ag.Agent.Pending(context.Background(), "orders")
		return err == nil && n == 6
	})
	if n := len(p.Requests()); n != 0 {
		t.Fatalf("paused destination got %d requests", n)
	}
	head := ag.waitEvent(want["u0"][0], "pending", func(*rivorav1.GetEventResponse) bool { return true })
	if head.GetState() != rivorav1.EventState_EVENT_STATE_PENDING || len(head.GetAttempts()) != 0 {
		t.Fatalf("head of a paused lane: %v", head)
	}
	resume, err := ag.Admin.ResumeDestination(context.Background(), connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	if resume.Msg.GetDestination().GetPaused() {
		t.Fatal("resumed destination still marked paused")
	}
	poll.True(t, "backlog delivered after resume", 10*time.Second, func() bool { return allDelivered(p, want) })
	checkOrder(t, p, want)
	if n := len(p.Requests()); n != 6 {
		t.Fatalf("partner got %d requests for 6 events that never failed", n)
	}
}

// A replay rate that is not a number (NaN, ±Inf), negative, or outside
// the rates of a destination (under 0.001/s the pacer overflowed or
// stalled for years: issue 22) is refused before anything is read, not a
// panic of the stream.
func TestReplayRefusesABadRate(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	archive := rivorav1connect.NewArchiveServiceClient(d.HTTPClient(), d.URL, d.As(d.AdminToken))
	for _, rate := range []float64{0, math.NaN(), math.Inf(1), math.Inf(-1), -1, -1e-300, 2e6, 5e-324, 1e-300, 1e-10, 1.1e-10, 0.000999} {
		stream, err := archive.Replay(context.Background(), connect.NewRequest(&rivorav1.ReplayRequest{
			Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}, RatePerSecond: proto.Float64(rate),
		}))
		if err == nil {
			for stream.Receive() {
			}
			err = stream.Err()
			stream.Close()
		}
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "rate must be a number of events per second at least 0.001") {
			t.Errorf("replay at rate %v: %v, want invalid_argument about the rate", rate, err)
		}
	}
}

// An event held by a pause has no next attempt to show: its retry time
// (past, soon) says nothing while the pause holds it. One whose
// destination is degraded (not held: only a parked destination holds its
// lanes) does.
func TestHeldEventShowsNoNextAttempt(t *testing.T) {
	t.Parallel()
	p := newPartner(t, func(partner.Request) int { return http.StatusServiceUnavailable })
	ag := startAgent(t, t.TempDir())
	ag.create(destination("orders", p.URL(), 8))
	id := ag.publish("orders", "acme", "u1")
	// On its degraded destination, it is tried again at its retry time:
	// that is shown.
	degraded := ag.waitEvent(id, "waiting for its retry on its degraded destination", func(e *rivorav1.GetEventResponse) bool {
		return strings.HasPrefix(e.GetWaiting(), "retry at ") && strings.Contains(e.GetWaiting(), "(destination degraded since ")
	})
	if degraded.GetNextAttemptAt() == nil {
		t.Fatalf("event waiting for its retry on its degraded destination (%s) shows no next attempt", degraded.GetWaiting())
	}
	pause, err := ag.Admin.PauseDestination(context.Background(), connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "orders", Reason: "partner maintenance"}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(pause.Msg.GetVersion())
	held := ag.waitEvent(id, "held by the pause", func(e *rivorav1.GetEventResponse) bool {
		return strings.HasPrefix(e.GetWaiting(), "held: ") && strings.Contains(e.GetWaiting(), "destination paused")
	})
	if held.GetNextAttemptAt() != nil {
		t.Fatalf("held event %v shows a next attempt at %v", held.GetWaiting(), held.GetNextAttemptAt().AsTime())
	}
}
