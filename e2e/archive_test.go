package e2e

// Tier 3 acceptance (issue 6): dead letters archived to the local directory
// and to a real MinIO server, inspected with `rivoractl dlq`, replayed with
// `rivoractl replay` (in lane order, marked replayed, resumable), and kept
// safe in the pending store while the object store is down.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"

	"github.com/rivora/rivora/e2e/creds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// ---------------------------------------------------------------------------
// A switchable partner address

// hookServer is one partner address whose answers come from a partner that
// the test can swap (a failing one, then a recovered one), so that each
// phase's requests are checked on their own (checkLaneOrder sees only the
// replay). It records the rivora-replay header of every request and, when
// asked, holds a request as long as its payload says ({"delay_ms":N}).
type hookServer struct {
	srv *httptest.Server

	mu     sync.Mutex
	cur    *partner.Partner
	delays bool // honour {"delay_ms":N} in payloads
	seen   []hookRequest
}

type hookRequest struct {
	ID     string
	Lane   string // rivora-lane
	Replay string // rivora-replay header
	To     *partner.Partner
}

func newHookServer(t testing.TB) *hookServer {
	t.Helper()
	h := &hookServer{}
	h.srv = listenLocal(t, "hook", http.HandlerFunc(h.serve))
	return h
}

func (h *hookServer) URL() string { return h.srv.URL + "/hook" }

func (h *hookServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	h.mu.Lock()
	p := h.cur
	var delay time.Duration
	if h.delays {
		var spec struct {
			DelayMS int `json:"delay_ms"`
		}
		if json.Unmarshal(body, &spec) == nil {
			delay = time.Duration(spec.DelayMS) * time.Millisecond
		}
	}
	h.seen = append(h.seen, hookRequest{ID: r.Header.Get(webhook.HeaderID), Lane: r.Header.Get("rivora-lane"), Replay: r.Header.Get("rivora-replay"), To: p})
	h.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		}
	}
	p.ServeHTTP(w, r)
}

// use makes p answer from now on.
func (h *hookServer) use(p *partner.Partner) {
	h.mu.Lock()
	h.cur = p
	h.mu.Unlock()
}

// holdByPayload turns the {"delay_ms":N} payload delays on or off.
func (h *hookServer) holdByPayload(on bool) {
	h.mu.Lock()
	h.delays = on
	h.mu.Unlock()
}

// requestsTo returns the requests p answered.
func (h *hookServer) requestsTo(p *partner.Partner) []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hookRequest
	for _, r := range h.seen {
		if r.To == p {
			out = append(out, r)
		}
	}
	return out
}

// register creates destination id at this address (as createDestination
// does for a partner) and gives every partner the secret.
func (h *hookServer) register(t testing.TB, d *devProc, id string, limits *rivorav1.Limits, partners ...*partner.Partner) {
	t.Helper()
	resp, err := d.Admin().CreateDestination(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.CreateDestinationRequest{
		Id: id, Url: h.URL(), Limits: limits,
	}))
	if err != nil {
		t.Fatalf("CreateDestination %s: %v", id, err)
	}
	dst := resp.Msg.GetDestination()
	if dst.GetId() != id || dst.GetUrl() != h.URL() {
		t.Fatalf("CreateDestination %s answered id=%q url=%q", id, dst.GetId(), dst.GetUrl())
	}
	for _, p := range partners {
		if err := p.SetSecret(dst.GetSecret()); err != nil {
			t.Fatal(err)
		}
		p.SetAlive(d.diedErr)
	}
	waitConfigApplied(t, d, resp.Msg.GetVersion())
}

// ---------------------------------------------------------------------------
// rivoractl dlq / health / replay, parsed

func requireRivoractl(t testing.TB) {
	t.Helper()
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
}

// dlqEntry is one object of `rivoractl dlq list -o json`.
type dlqEntry struct {
	EventID       string `json:"eventId"`
	DestinationID string `json:"destinationId"`
	CustomerID    string `json:"customerId"`
	LaneKey       string `json:"laneKey"`
	Attempts      int    `json:"attempts"`
	LastStatus    int    `json:"lastStatus"`
	LastError     string `json:"lastError"`
	Reason        string `json:"reason"`
	DeadAt        string `json:"deadAt"`

	keys map[string]bool
}

var dlqListFields = []string{"eventId", "destinationId", "customerId", "laneKey", "attempts", "lastStatus", "lastError", "reason", "deadAt"}

// dlqList runs `rivoractl dlq list --destination dest -o json`.
func dlqList(d *devProc, dest string) ([]dlqEntry, error) {
	out, errOut, err := runRivoractl(d, "dlq", "list", "--destination", dest, "--limit", "100000", "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("rivoractl dlq list: %v: %s", err, strings.TrimSpace(errOut))
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		return nil, fmt.Errorf("rivoractl dlq list -o json is not a JSON array of objects: %v\n%s", err, out)
	}
	var list []dlqEntry
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("rivoractl dlq list -o json: %v\n%s", err, out)
	}
	for i := range list {
		list[i].keys = map[string]bool{}
		for k := range raw[i] {
			list[i].keys[k] = true
		}
	}
	return list, nil
}

// waitDLQ polls `dlq list` until it lists n dead letters of dest; more than
// n fails at once (an event archived twice, or one that should not be).
func waitDLQ(t testing.TB, d *devProc, dest string, n int, timeout time.Duration) []dlqEntry {
	t.Helper()
	var list []dlqEntry
	err := poll.Check(timeout, 250*time.Millisecond, func() error {
		var err error
		list, err = dlqList(d, dest)
		switch {
		case err != nil:
		case len(list) > n:
			t.Fatalf("dlq list --destination %s shows %d dead letters, want %d (%d distinct event ids)", dest, len(list), n, len(distinctIDs(list)))
		case len(list) == n:
			return nil
		default:
			err = fmt.Errorf("%d of %d listed", len(list), n)
		}
		if died := d.diedErr(); died != nil {
			t.Fatal(died)
		}
		return err
	})
	if err != nil {
		t.Fatalf("dlq list --destination %s: not %d dead letters within %s (last: %v)", dest, n, timeout, err)
	}
	return list
}

func distinctIDs(list []dlqEntry) map[string]int {
	out := map[string]int{}
	for _, e := range list {
		out[e.EventID]++
	}
	return out
}

// dlqStats runs `rivoractl dlq stats --destination dest -o json`.
func dlqStats(t testing.TB, d *devProc, dest string) *rivorav1.DeadLetterStatsResponse {
	t.Helper()
	out := rivoractl(t, d, "dlq", "stats", "--destination", dest, "-o", "json")
	st := &rivorav1.DeadLetterStatsResponse{}
	if err := protojson.Unmarshal([]byte(out), st); err != nil {
		t.Fatalf("dlq stats -o json is not a DeadLetterStatsResponse: %v\n%s", err, out)
	}
	return st
}

// unarchived reads unarchivedDeadLetters of dest from
// `rivoractl destinations health dest -o json`.
func unarchived(t testing.TB, d *devProc, dest string) int64 {
	t.Helper()
	out := rivoractl(t, d, "destinations", "health", dest, "-o", "json")
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("destinations health -o json is not a JSON array: %v\n%s", err, out)
	}
	for _, r := range raw {
		h := &rivorav1.DestinationHealth{}
		if err := protojson.Unmarshal(r, h); err != nil {
			t.Fatalf("destinations health -o json element: %v\n%s", err, r)
		}
		if h.GetDestinationId() == dest {
			return h.GetUnarchivedDeadLetters()
		}
	}
	t.Fatalf("destinations health %s -o json does not list %s:\n%s", dest, dest, out)
	return 0
}

func waitUnarchived(t testing.TB, d *devProc, dest string, want int64, timeout time.Duration) {
	t.Helper()
	var got int64
	err := poll.Check(timeout, 200*time.Millisecond, func() error {
		if got = unarchived(t, d, dest); got != want {
			return errNotYet
		}
		return nil
	})
	if err != nil {
		t.Fatalf("destinations health %s: unarchivedDeadLetters = %d, want %d within %s", dest, got, want, timeout)
	}
}

var (
	replayDone     = regexp.MustCompile(`Replayed (\d+) of (\d+) dead letters in \S+ \((\d+) skipped: [^)]*\)`)
	replayProgress = regexp.MustCompile(`^replay: (\d+)/(\d+) \((\d+) replayed, (\d+) skipped\)`)
)

// replayResult parses the last line of a finished `rivoractl replay`.
func replayResult(t testing.TB, out string) (replayed, total, skipped int) {
	t.Helper()
	m := replayDone.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("rivoractl replay did not report \"Replayed N of M dead letters … (K skipped …)\":\n%s", out)
	}
	replayed, _ = strconv.Atoi(m[1])
	total, _ = strconv.Atoi(m[2])
	skipped, _ = strconv.Atoi(m[3])
	return
}

// metricsText reads the server's /metrics.
func metricsText(t testing.TB, d *devProc) string {
	t.Helper()
	resp, err := http.Get(d.URL() + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	return string(body)
}

// metricValue reads one sample from the server's /metrics.
func metricValue(t testing.TB, d *devProc, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(metricsText(t, d), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("/metrics %s: %v", line, err)
			}
			return v
		}
	}
	return 0 // a counter never incremented is not exported
}

// laneOf maps event id → lane key, from what was published.
func laneOf(pub *published) map[string]string {
	out := map[string]string{}
	for lane, ids := range pub.ByLane {
		_, key, _ := strings.Cut(lane, "/")
		for _, id := range ids {
			out[id] = key
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// 1. dead letters after max_attempts, inspected and replayed in lane order

const replayBucket = "rivora-e2e-deadletters"

func TestDeadLetterReplayLocalArchive(t *testing.T) {
	requireRivoractl(t)
	d := startDev(t, devOptions{})
	const dest = "dlq-local"
	runDeadLetterReplay(t, d, dest)

	// The local directory holds them, gzip NDJSON under <yyyy>/<mm>/<dd>/<hh>/.
	root := filepath.Join(d.DataDir(), "archive", "deadletter", dest)
	n := 0
	filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			rel, _ := filepath.Rel(root, path)
			if !archivePath.MatchString(filepath.ToSlash(rel)) {
				t.Errorf("archive file %s is not at <yyyy>/<mm>/<dd>/<hh>/*.ndjson.gz", rel)
			}
			dls, err := readArchive(path)
			if err != nil {
				t.Errorf("archive file %s: %v", rel, err)
			}
			n += len(dls)
		}
		return nil
	})
	if n != 30 {
		t.Errorf("local archive %s holds %d dead letters, want 30", root, n)
	}
}

func TestDeadLetterReplayMinIOArchive(t *testing.T) {
	requireRivoractl(t)
	m := startMinIO(t)
	if m.BucketExists(replayBucket) {
		t.Fatalf("bucket %s exists before rivora started", replayBucket)
	}
	d := startDev(t, devOptions{Args: m.DevArgs(replayBucket)})
	const dest = "dlq-s3"
	runDeadLetterReplay(t, d, dest)

	if !m.BucketExists(replayBucket) {
		t.Fatalf("rivora did not create bucket %s", replayBucket)
	}
	prefix := "deadletter/" + dest + "/"
	keys := m.Objects(replayBucket, prefix)
	if len(keys) == 0 {
		t.Errorf("no objects under s3://%s/%s", replayBucket, prefix)
	}
	for _, k := range keys {
		if !archivePath.MatchString(strings.TrimPrefix(k, prefix)) {
			t.Errorf("object %s is not at %s<yyyy>/<mm>/<dd>/<hh>/*.ndjson.gz", k, prefix)
		}
	}
	// Nothing went to the local directory instead.
	filepath.WalkDir(filepath.Join(d.DataDir(), "archive"), func(path string, de fs.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			t.Errorf("with --s3-endpoint, a dead letter file appeared in the local archive: %s", path)
		}
		return nil
	})
}

// runDeadLetterReplay: max_attempts 2, partner answering 400, 30 events
// over 3 lanes → exactly 60 attempts, 30 dead letters with last status 400;
// partner recovers; `rivoractl replay` delivers all 30 in lane order,
// marked replayed.
func runDeadLetterReplay(t *testing.T, d *devProc, dest string) {
	t.Helper()
	const customer = "cust-replay"
	h := newHookServer(t)
	failing, recovered := newPartner(t), newPartner(t)
	failing.SetStatus(http.StatusBadRequest)
	h.use(failing)
	h.register(t, d, dest, &rivorav1.Limits{MaxAttempts: 2}, failing, recovered)

	before := time.Now()
	pub := newPublished()
	publishLanes(t, d.SDK(), plan{Destination: dest, Customer: customer, Lanes: lanesNamed("user", 3), PerLane: 10, PayloadSize: 96}, pub)
	ids := pub.all()
	lanes := laneOf(pub)

	list := waitDLQ(t, d, dest, len(ids), 90*time.Second)
	// No attempt after the second: the count stays at 60.
	time.Sleep(1500 * time.Millisecond)
	if n := failing.Count(); n != 60 {
		t.Errorf("the failing partner saw %d attempts, want exactly 60 (30 events × max_attempts 2)", n)
	}
	for _, id := range ids {
		if n := failing.Sent(id); n != 2 {
			t.Errorf("event %s attempted %d times, want 2", id, n)
		}
	}
	for _, r := range failing.Requests() {
		if r.Attempt < 1 || r.Attempt > 2 {
			t.Errorf("event %s carried rivora-attempt %d with max_attempts 2", r.ID, r.Attempt)
		}
	}

	// dlq list -o json: one object per event, with the documented fields.
	after := time.Now()
	seen := distinctIDs(list)
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("dlq list shows event %s %d times, want once", id, seen[id])
		}
	}
	for _, e := range list {
		for _, k := range dlqListFields {
			if !e.keys[k] {
				t.Errorf("dlq list entry %s has no %q field", e.EventID, k)
			}
		}
		if e.DestinationID != dest || e.CustomerID != customer || e.LaneKey != lanes[e.EventID] {
			t.Errorf("dlq list entry %s: destination %q customer %q lane %q, want %q %q %q", e.EventID, e.DestinationID, e.CustomerID, e.LaneKey, dest, customer, lanes[e.EventID])
		}
		if e.Attempts != 2 || e.LastStatus != 400 {
			t.Errorf("dlq list entry %s: attempts %d lastStatus %d, want 2 and 400", e.EventID, e.Attempts, e.LastStatus)
		}
		if e.Reason != "max_attempts" {
			t.Errorf("dlq list entry %s: reason %q, want max_attempts", e.EventID, e.Reason)
		}
		at, err := time.Parse(time.RFC3339Nano, e.DeadAt)
		if err != nil || at.Before(before.Add(-time.Second)) || at.After(after.Add(time.Second)) {
			t.Errorf("dlq list entry %s: deadAt %q not a time between %s and %s (%v)", e.EventID, e.DeadAt, before.UTC(), after.UTC(), err)
		}
	}

	// dlq show: the payload is included.
	for _, id := range []string{pub.ByLane[customer+"/user-000"][0], pub.ByLane[customer+"/user-002"][9]} {
		out := rivoractl(t, d, "dlq", "show", id, "-o", "json")
		resp := &rivorav1.GetDeadLetterResponse{}
		if err := protojson.Unmarshal([]byte(out), resp); err != nil {
			t.Fatalf("dlq show %s -o json: %v\n%s", id, err, out)
		}
		dl := resp.GetDeadLetter()
		if dl.GetEvent().GetEventId() != id || !bytes.Equal(dl.GetEvent().GetPayload(), pub.Payloads[id]) {
			t.Errorf("dlq show %s -o json: event %q payload %q, want payload %q", id, dl.GetEvent().GetEventId(), dl.GetEvent().GetPayload(), pub.Payloads[id])
		}
		if dl.GetAttempts() != 2 || dl.GetLastStatus() != 400 {
			t.Errorf("dlq show %s: attempts %d last status %d, want 2 and 400", id, dl.GetAttempts(), dl.GetLastStatus())
		}
		text := rivoractl(t, d, "dlq", "show", id)
		if !strings.Contains(text, string(pub.Payloads[id])) {
			t.Errorf("dlq show %s does not print the payload %q:\n%s", id, pub.Payloads[id], text)
		}
	}

	// dlq stats counts 30.
	st := dlqStats(t, d, dest)
	if st.GetTotal() != 30 {
		t.Errorf("dlq stats --destination %s: total %d, want 30", dest, st.GetTotal())
	}
	var counted int64
	for _, c := range st.GetCounts() {
		counted += c.GetCount()
		if c.GetDestinationId() != dest || c.GetCustomerId() != customer || c.GetReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS {
			t.Errorf("dlq stats row %v, want %s/%s/max_attempts", c, dest, customer)
		}
	}
	if counted != 30 {
		t.Errorf("dlq stats rows sum to %d, want 30", counted)
	}
	if text := rivoractl(t, d, "dlq", "stats"); !strings.Contains(text, "30 dead letters") {
		t.Errorf("dlq stats does not say \"30 dead letters\":\n%s", text)
	}
	// The reason filter: all 30 ran out of attempts, none of their window.
	for reason, want := range map[string]int64{"max_attempts": 30, "window": 0} {
		st := &rivorav1.DeadLetterStatsResponse{}
		out := rivoractl(t, d, "dlq", "stats", "--destination", dest, "--reason", reason, "-o", "json")
		if err := protojson.Unmarshal([]byte(out), st); err != nil || st.GetTotal() != want {
			t.Errorf("dlq stats --reason %s: total %d (%v), want %d:\n%s", reason, st.GetTotal(), err, want, out)
		}
	}
	if n := unarchived(t, d, dest); n != 0 {
		t.Errorf("destinations health: unarchivedDeadLetters = %d after archiving, want 0", n)
	}

	// The partner recovers; replay delivers all 30, in lane order.
	h.use(recovered)
	out := rivoractl(t, d, "replay", "--destination", dest)
	replayed, total, skipped := replayResult(t, out)
	if replayed != 30 || total != 30 || skipped != 0 {
		t.Errorf("replay reported %d replayed of %d, %d skipped; want 30 of 30, 0 skipped:\n%s", replayed, total, skipped, out)
	}
	// The replay is in the audit log, under the caller's token.
	var audit []struct{ Action, DestinationID, Detail, Author string }
	if err := json.Unmarshal([]byte(rivoractl(t, d, "audit", "-o", "json")), &audit); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(audit, func(e struct{ Action, DestinationID, Detail, Author string }) bool {
		return e.Action == "deadletters.replay"
	}); i < 0 || audit[i].DestinationID != dest || !strings.Contains(audit[i].Detail, "30 of 30 matching dead letters replayed") || audit[i].Author == "" {
		t.Errorf("audit has no deadletters.replay entry for %s with \"30 of 30\" and an author: %+v", dest, audit)
	}
	if !slices.ContainsFunc(audit, func(e struct{ Action, DestinationID, Detail, Author string }) bool {
		return e.Action == "deadletters.replay.began" && e.DestinationID == dest && strings.Contains(e.Detail, "replaying 30 matching dead letters") && e.Author != ""
	}) {
		t.Errorf("audit has no deadletters.replay.began entry for %s (recorded as the replay begins, so that a replay whose agent dies is on record): %+v", dest, audit)
	}
	recovered.WaitDelivered(t, ids, 60*time.Second)
	time.Sleep(500 * time.Millisecond) // let a stray duplicate show
	rep := checkLaneOrder(t, recovered, pub.ByLane, pub.Payloads, nil)
	if rep.Events != 30 || rep.Duplicates != 0 {
		t.Errorf("replay: %d events checked, %d duplicate deliveries; want 30 and 0", rep.Events, rep.Duplicates)
	}
	replays := h.requestsTo(recovered)
	if len(replays) != 30 {
		t.Errorf("the recovered partner got %d requests, want 30", len(replays))
	}
	for _, r := range replays {
		if r.Replay != "true" {
			t.Errorf("replayed delivery of %s carried rivora-replay %q, want \"true\"", r.ID, r.Replay)
		}
	}
	for _, r := range h.requestsTo(failing) {
		if r.Replay != "" {
			t.Errorf("first delivery of %s carried rivora-replay %q", r.ID, r.Replay)
			break
		}
	}
	// Delivered by the replay, an event is dead no more.
	if ev := waitEventState(t, d, ids[0], rivorav1.EventState_EVENT_STATE_DELIVERED, 20*time.Second); ev.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED {
		t.Errorf("events get %s after its replay was delivered: dead reason %v, want none", ids[0], ev.GetDeadReason())
	}
}

// ---------------------------------------------------------------------------
// 2. object store down while events die

func TestMinIODownDeadLettersWaitThenArchivedOnce(t *testing.T) {
	requireRivoractl(t)
	m := startMinIO(t)
	d := startDev(t, devOptions{Args: m.DevArgs(replayBucket)})
	const dest, customer = "dlq-down", "cust-down"
	p := newPartner(t)
	p.SetStatus(http.StatusBadRequest)
	createDestination(t, d, dest, p, "", &rivorav1.Limits{MaxAttempts: 1})
	c := d.SDK()

	// While the store is up: 15 dead letters archived.
	pub := newPublished()
	publishLanes(t, c, plan{Destination: dest, Customer: customer, Lanes: lanesNamed("up", 3), PerLane: 5}, pub)
	waitDLQ(t, d, dest, 15, 60*time.Second)
	waitUnarchived(t, d, dest, 0, 10*time.Second)

	// Store down: 45 more die. Ingest and the lanes go on; the dead letters
	// wait in the pending store, counted.
	m.Stop()
	down := newPublished()
	publishLanes(t, c, plan{Destination: dest, Customer: customer, Lanes: lanesNamed("down", 3), PerLane: 15}, down)
	downIDs := down.all()
	poll.True(t, "every event published while MinIO is down to be attempted", 60*time.Second, func() bool {
		return len(missingAttempts(p, downIDs)) == 0
	})
	waitUnarchived(t, d, dest, 45, 30*time.Second)
	for _, id := range downIDs[:3] {
		waitEventState(t, d, id, rivorav1.EventState_EVENT_STATE_DEAD, 10*time.Second)
	}
	// It stays so while the store is down: none lost, none re-attempted.
	time.Sleep(3 * time.Second)
	if n := unarchived(t, d, dest); n != 45 {
		t.Errorf("with MinIO down for 3 s more: unarchivedDeadLetters = %d, want 45", n)
	}
	if n := p.Count(); n != 60 {
		t.Errorf("partner saw %d attempts, want 60 (max_attempts 1)", n)
	}
	if err := d.diedErr(); err != nil {
		t.Fatal(err)
	}

	// Store back on the same directory and port: all archived, none twice.
	m.Start()
	waitDLQ(t, d, dest, 60, 90*time.Second)
	waitUnarchived(t, d, dest, 0, 30*time.Second)
	time.Sleep(2 * time.Second) // a late second write of a batch would show now
	list := waitDLQ(t, d, dest, 60, 10*time.Second)
	seen := distinctIDs(list)
	if len(seen) != len(list) {
		t.Errorf("dlq list: %d lines but %d distinct event ids", len(list), len(seen))
	}
	for _, id := range append(pub.all(), downIDs...) {
		if seen[id] != 1 {
			t.Errorf("event %s is in the archive %d times, want once", id, seen[id])
		}
	}
	for _, e := range list {
		if e.Attempts != 1 || e.LastStatus != 400 || e.Reason != "max_attempts" {
			t.Errorf("dead letter %s: attempts %d lastStatus %d reason %q, want 1, 400, max_attempts", e.EventID, e.Attempts, e.LastStatus, e.Reason)
		}
	}
	if st := dlqStats(t, d, dest); st.GetTotal() != 60 {
		t.Errorf("dlq stats: total %d, want 60", st.GetTotal())
	}
	if v := metricValue(t, d, "rivora_deadletters_unarchived"); v != 0 {
		t.Errorf("metric rivora_deadletters_unarchived = %v after MinIO returned, want 0", v)
	}
}

// missingAttempts returns the ids p has not seen at all.
func missingAttempts(p *partner.Partner, ids []string) []string {
	var out []string
	for _, id := range ids {
		if p.Sent(id) == 0 {
			out = append(out, id)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// 3. interrupted replay resumed

func TestReplayInterruptedResumesWithoutResending(t *testing.T) {
	requireRivoractl(t)
	m := startMinIO(t)
	d := startDev(t, devOptions{Args: m.DevArgs(replayBucket)})
	const dest, customer, total = "dlq-resume", "cust-resume", 3000
	h := newHookServer(t)
	failing, recovered := newPartner(t), newPartner(t)
	failing.SetStatus(http.StatusBadRequest)
	h.use(failing)
	h.register(t, d, dest, &rivorav1.Limits{MaxAttempts: 1, RatePerSecond: 5000, Burst: 5000, MaxInFlight: 64}, failing, recovered)

	pub := newPublished()
	publishLanes(t, d.SDK(), plan{Destination: dest, Customer: customer, Lanes: lanesNamed("user", 30), PerLane: total / 30}, pub)
	ids := pub.all()
	poll.True(t, fmt.Sprintf("%d dead letters in dlq stats", total), 120*time.Second, func() bool {
		return dlqStats(t, d, dest).GetTotal() >= total
	})
	if got := dlqStats(t, d, dest).GetTotal(); got != total {
		t.Fatalf("dlq stats: %d dead letters, want %d", got, total)
	}
	if n := failing.Count(); n != total {
		t.Errorf("failing partner saw %d attempts, want %d", n, total)
	}

	// The partner recovers; a paced replay is interrupted with SIGINT.
	h.use(recovered)
	args := []string{"replay", "--destination", dest, "--rate", "500"}
	cmd := exec.Command(rivoractlBin, append(args, "--server", d.URL())...)
	cmd.Env = append(os.Environ(), "RIVORA_SERVER=http://127.0.0.1:1", "RIVORA_TOKEN="+creds.For(d.URL()))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start rivoractl replay: %v", err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	exited := make(chan error, 1)
	var firstOut []string
	progressAtSignal := -1
	deadline := time.After(30 * time.Second)
read:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break read
			}
			firstOut = append(firstOut, line)
			if pm := replayProgress.FindStringSubmatch(line); pm != nil && progressAtSignal < 0 {
				if n, _ := strconv.Atoi(pm[3]); n >= 600 {
					progressAtSignal = n
					if err := cmd.Process.Signal(os.Interrupt); err != nil {
						t.Fatalf("SIGINT rivoractl: %v", err)
					}
				}
			}
		case <-deadline:
			cmd.Process.Kill()
			for range lines {
			}
			cmd.Wait()
			t.Fatalf("rivoractl replay: no progress line with ≥ 600 replayed within 30 s, or no exit after SIGINT; stdout:\n%s\nstderr:\n%s", strings.Join(firstOut, "\n"), stderr.String())
		}
	}
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("rivoractl replay did not exit within 15 s of SIGINT")
	}
	firstText := strings.Join(firstOut, "\n")
	if progressAtSignal < 0 {
		t.Fatalf("rivoractl replay ended before it was interrupted (err %v); stdout:\n%s\nstderr:\n%s", err, firstText, stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Errorf("interrupted rivoractl replay exited with %v, want a non-zero status", err)
	}
	if !strings.Contains(stderr.String(), "replay stopped (Ctrl-C)") || !strings.Contains(stderr.String(), "run the same command again to resume") {
		t.Errorf("interrupted rivoractl replay did not say so, and how to resume, on stderr:\n%s", stderr.String())
	}
	if replayDone.MatchString(firstText) {
		t.Fatalf("the replay finished before SIGINT took effect; stdout:\n%s", firstText)
	}

	// What the first run re-accepted gets delivered; wait until it settles.
	var firstRun int
	stable := time.Now()
	poll.True(t, "deliveries of the interrupted replay to settle", 30*time.Second, func() bool {
		if n := recovered.Delivered(); n != firstRun {
			firstRun, stable = n, time.Now()
		}
		return time.Since(stable) > 1500*time.Millisecond
	})
	t.Logf("interrupted at %d replayed (progress line); %d delivered from the first run", progressAtSignal, firstRun)
	if firstRun < progressAtSignal || firstRun >= total {
		t.Errorf("first run: %d events delivered, want at least the %d it reported and fewer than %d", firstRun, progressAtSignal, total)
	}

	// The same command again resumes and completes.
	out := rivoractl(t, d, args...)
	replayed, matched, skipped := replayResult(t, out)
	t.Logf("second run: replayed %d of %d, %d skipped", replayed, matched, skipped)
	if matched != total || replayed+skipped != total {
		t.Errorf("second run: %d replayed + %d skipped of %d, want a sum of %d", replayed, skipped, matched, total)
	}
	if replayed != total-firstRun {
		t.Errorf("second run re-accepted %d events; %d were left after the first run delivered %d", replayed, total-firstRun, firstRun)
	}

	recovered.WaitDelivered(t, ids, 90*time.Second)
	time.Sleep(time.Second) // let a stray duplicate show
	if n := recovered.Count(); n != total {
		t.Errorf("the partner got %d requests over both runs, want %d (each event once)", n, total)
	}
	if n := recovered.Duplicates(); n != 0 {
		t.Errorf("%d events were delivered more than once over both runs", n)
	}
	var twice []string
	for _, id := range ids {
		if n := recovered.Sent(id); n != 1 {
			twice = append(twice, fmt.Sprintf("%s×%d", id, n))
		}
	}
	if len(twice) > 0 {
		t.Errorf("%d events not received exactly once, e.g. %v", len(twice), twice[:min(len(twice), 5)])
	}
	if v := metricValue(t, d, `rivora_ingest_events_total{result="replayed"}`); v != total {
		t.Errorf(`metric rivora_ingest_events_total{result="replayed"} = %v, want %d (each dead letter re-accepted once)`, v, total)
	}
	for _, r := range h.requestsTo(recovered) {
		if r.Replay != "true" {
			t.Errorf("replayed delivery of %s carried rivora-replay %q", r.ID, r.Replay)
			break
		}
	}
	rep := checkLaneOrder(t, recovered, pub.ByLane, pub.Payloads, nil)
	if rep.Events != total {
		t.Errorf("lane order checked %d events, want %d", rep.Events, total)
	}
}

// ---------------------------------------------------------------------------
// 4. lane order across archive objects written at different times

// Dead letters of one lane die in lane order but land in different archive
// objects, mixed with other lanes' dead letters. Replay must still re-ingest
// each lane in its original order, whatever the objects are named after.
// Two timelines (max_attempts 1, partner 400, payloads say how long the
// partner holds each attempt; the archiver batches what died within about a
// second):
//
//	a: A0, A1 (held 700 ms each), then B0 (answered at once): B0 and A0 die
//	   in one batch, A1 in the next.
//	b: B0 (held 1.5 s), then A0 (at once), A1 (held 1.2 s): A0 dies alone,
//	   A1 and B0 die in the next batch.
//
// In both, A0 must be replayed (and delivered) before A1.
func TestReplayLaneOrderAcrossArchiveBatches(t *testing.T) {
	requireRivoractl(t)
	d := startDev(t, devOptions{})
	type ev struct {
		lane  string
		delay int
	}
	timelines := map[string][]ev{
		"order-a": {{"A", 700}, {"A", 700}, {"B", 0}},
		"order-b": {{"B", 1500}, {"A", 0}, {"A", 1200}},
	}
	for _, dest := range []string{"order-a", "order-b"} {
		t.Run(dest, func(t *testing.T) {
			const customer = "cust-order"
			h := newHookServer(t)
			failing, recovered := newPartner(t), newPartner(t)
			failing.SetStatus(http.StatusBadRequest)
			h.use(failing)
			h.holdByPayload(true)
			h.register(t, d, dest, &rivorav1.Limits{MaxAttempts: 1}, failing, recovered)

			pub := newPublished()
			ctx := ctxTimeout(t, time.Minute)
			for i, e := range timelines[dest] {
				payload := fmt.Appendf(nil, `{"delay_ms":%d,"lane":%q,"n":%d}`, e.delay, e.lane, i)
				id, err := d.SDK().Publish(ctx, sdk.Event{Destination: dest, Customer: customer, Lane: e.lane, Type: "t.order", Payload: payload, ContentType: "application/json"})
				if err != nil {
					t.Fatalf("publish #%d: %v", i, err)
				}
				pub.add(customer+"/"+e.lane, id, payload)
			}
			waitDLQ(t, d, dest, 3, 30*time.Second)

			h.holdByPayload(false)
			h.use(recovered)
			out := rivoractl(t, d, "replay", "--destination", dest)
			if replayed, total, _ := replayResult(t, out); replayed != 3 || total != 3 {
				t.Errorf("replay: %d of %d replayed, want 3 of 3:\n%s", replayed, total, out)
			}
			recovered.WaitDelivered(t, pub.all(), 30*time.Second)
			checkLaneOrder(t, recovered, pub.ByLane, pub.Payloads, nil)
		})
	}
}
