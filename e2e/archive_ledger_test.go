package e2e

// While MinIO is down, `rivoractl dlq list`, `dlq stats` and `dlq show`
// answer from the dead letters waiting in the agents' ledgers, marked and
// with a warning; once MinIO is back the same commands answer from the
// archive, unmarked. Against `rivora dev` (one agent owns every
// partition) and against a cell, where each agent's ledgers hold only its
// partitions' dead letters and the control plane merges them.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

func TestMinIODownDLQListsTheLedgersThenTheArchive(t *testing.T) {
	requireRivoractl(t)
	m := startMinIO(t)
	d := startDev(t, devOptions{Args: m.DevArgs(replayBucket)})
	ledgerOutage(t, devRig(d), m, []string{"ledger-a", "ledger-b"})
}

func TestClusterDLQListsEveryAgentsLedgerWhileMinIOIsDown(t *testing.T) {
	requireRivoractl(t)
	c := startClusterCell(t, 2, 8)
	owners := c.waitOwned(t, 30*time.Second, nil)
	// One destination in a partition of each agent: neither agent's
	// ledgers hold both.
	var dests []string
	for _, agent := range c.names {
		dests = append(dests, destinationOwnedBy(t, c, owners, "ledger", agent))
	}
	ledgerOutage(t, c.rig(c.names[0]), c.minio, dests)
}

// ledgerOutage: events of dests die while MinIO is down; the dlq
// commands show them from the ledgers, then, MinIO back, from the
// archive.
func ledgerOutage(t *testing.T, r *rig, m *minioServer, dests []string) {
	const customer, perDest = "cust-ledger", 6
	for _, dest := range dests {
		p := newPartner(t) // one each: a partner checks one destination's secret
		p.SetStatus(http.StatusBadRequest)
		r.createDestination(t, dest, p, &rivorav1.Limits{MaxAttempts: 1})
	}
	m.Stop()
	pub := newPublished()
	for _, dest := range dests {
		publishLanes(t, r.SDK(), plan{Destination: dest, Customer: customer, Lanes: lanesNamed(dest, 2), PerLane: perDest / 2}, pub)
	}
	ids := pub.all()
	total := len(ids)
	list := waitLedgerList(t, r.adminURL, ids, true, 90*time.Second)
	for _, e := range list {
		if !e.Unarchived || e.Attempts != 1 || e.LastStatus != 400 || e.Reason != "max_attempts" {
			t.Errorf("from the ledgers, %s: unarchived %v, attempts %d, last status %d, reason %q; want true, 1, 400, max_attempts", e.EventID, e.Unarchived, e.Attempts, e.LastStatus, e.Reason)
		}
	}

	text := r.ctl(t, "dlq", "list")
	first, _, _ := strings.Cut(text, "\n")
	if !strings.HasPrefix(first, "archive not readable (") || !strings.Contains(first, "connection refused") ||
		!strings.HasSuffix(first, fmt.Sprintf("): showing the %d matching dead letters still waiting in the agents' ledgers; they are archived once it is back (those archived before are listed again then)", total)) {
		t.Errorf("dlq list's first line with MinIO down: %q", first)
	}
	if !strings.Contains(text, "ARCHIVED") || strings.Count(text, "not yet") != total || strings.Contains(text, "not read:") {
		t.Errorf("dlq list with MinIO down: want an ARCHIVED column, %d rows \"not yet\", every ledger read:\n%s", total, text)
	}
	cut := r.ctl(t, "dlq", "list", "--destination", dests[0], "--limit", "2")
	if !strings.Contains(cut, fmt.Sprintf("showing 2 of the %d matching dead letters", perDest)) || !strings.Contains(cut, fmt.Sprintf("(%d more wait in the ledgers", perDest-2)) {
		t.Errorf("dlq list --limit 2 with MinIO down:\n%s", cut)
	}
	checkLedgerStats(t, r, total)
	show := r.ctl(t, "dlq", "show", ids[len(ids)-1])
	if !strings.Contains(show, "this dead letter still waits in its partition's ledger") || !strings.Contains(show, string(pub.Payloads[ids[len(ids)-1]])) {
		t.Errorf("dlq show %s with MinIO down: want it from its ledger, with its payload:\n%s", ids[len(ids)-1], show)
	}
	if out, errOut, err := runCtl(r.adminURL, "replay", "--destination", dests[0], "--dry-run"); err == nil || !strings.Contains(errOut, "connection refused") {
		t.Errorf("replay with MinIO down: err %v, want refused naming the archive's error\nstdout %s\nstderr %s", err, out, errOut)
	}

	m.Start()
	back := waitLedgerList(t, r.adminURL, ids, false, 90*time.Second)
	for _, e := range back {
		if e.Unarchived {
			t.Errorf("from the archive, %s is marked unarchived", e.EventID)
		}
	}
	if text := r.ctl(t, "dlq", "list"); strings.Contains(text, "ARCHIVED") || strings.Contains(text, "archive not readable") {
		t.Errorf("dlq list with MinIO back still reads the ledgers:\n%s", text)
	}
	if st := r.ctl(t, "dlq", "stats"); !strings.Contains(st, fmt.Sprintf("%d dead letters in ", total)) || strings.Contains(st, "archive not readable") {
		t.Errorf("dlq stats with MinIO back:\n%s", st)
	}
}

// checkLedgerStats: dlq stats with MinIO down counts the ledgers' dead
// letters and says so, in text and in JSON.
func checkLedgerStats(t *testing.T, r *rig, total int) {
	t.Helper()
	out, errOut, err := runCtl(r.adminURL, "dlq", "stats", "-o", "json")
	st := &rivorav1.DeadLetterStatsResponse{}
	if err != nil || protojson.Unmarshal([]byte(out), st) != nil {
		t.Fatalf("dlq stats -o json with MinIO down: %v\n%s\n%s", err, out, errOut)
	}
	if st.GetTotal() != int64(total) || !strings.Contains(st.GetArchiveUnavailable(), "connection refused") || len(st.GetUnreadLedgers()) != 0 || st.GetObjects() != 0 {
		t.Errorf("dlq stats -o json with MinIO down: total %d, archiveUnavailable %q, unread %v, objects %d; want %d, the archive's error, none, 0",
			st.GetTotal(), st.GetArchiveUnavailable(), st.GetUnreadLedgers(), st.GetObjects(), total)
	}
	if !strings.Contains(errOut, "archive not readable (") {
		t.Errorf("dlq stats -o json with MinIO down does not warn on stderr: %q", errOut)
	}
	text := r.ctl(t, "dlq", "stats")
	if !strings.HasPrefix(text, "archive not readable (") || !strings.Contains(text, fmt.Sprintf("%d dead letters waiting in the agents' ledgers", total)) {
		t.Errorf("dlq stats with MinIO down:\n%s", text)
	}
}

// ledgerEntry is one object of `dlq list -o json`, with unarchived.
type ledgerEntry struct {
	dlqEntry
	Unarchived bool `json:"unarchived"`
}

// waitLedgerList polls `dlq list -o json` until it lists exactly ids,
// from the ledgers (a warning on stderr) when fromLedgers, else from the
// archive (no warning).
func waitLedgerList(t *testing.T, server string, ids []string, fromLedgers bool, timeout time.Duration) []ledgerEntry {
	t.Helper()
	want := slices.Sorted(slices.Values(ids))
	var list []ledgerEntry
	var last string
	err := poll.Check(timeout, 500*time.Millisecond, func() error {
		out, errOut, err := runCtl(server, "dlq", "list", "--limit", "1000", "-o", "json")
		if err != nil {
			last = fmt.Sprintf("%v: %s", err, errOut)
			return errNotYet
		}
		list = nil
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("dlq list -o json: %v\n%s", err, out)
		}
		var got []string
		for _, e := range list {
			got = append(got, e.EventID)
		}
		slices.Sort(got)
		last = fmt.Sprintf("%d listed, stderr %q", len(got), errOut)
		if !slices.Equal(got, want) || strings.Contains(errOut, "archive not readable") != fromLedgers {
			return errNotYet
		}
		return nil
	})
	if err != nil {
		t.Fatalf("dlq list (from the ledgers: %v): not the %d dead letters within %s; last: %s", fromLedgers, len(ids), timeout, last)
	}
	return list
}
