package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A second incarnation on the same bucket (a rebuilt node, a reset
// `rivora dev`: a fresh data directory, so ledger sequences start at 1
// again) names its first archive object as the first incarnation named
// its own, within the same hour. The archive used to replace the object:
// 40 died, 20 were left. Now both objects are kept (the second under a
// variant of the name), and every dead letter is listed once.
func TestFreshDataDirOnTheSameBucketKeepsEveryDeadLetter(t *testing.T) {
	requireRivoractl(t)
	m := startMinIO(t)
	const bucket, dest, customer = "rivora-e2e-incarnations", "dlq-twice", "cust-twice"
	p := newPartner(t)
	p.SetStatus(http.StatusBadRequest)

	var ids []string
	var last *devProc
	for round, prefix := range []string{"first", "second"} {
		d := startDev(t, devOptions{Partitions: 1, Args: m.DevArgs(bucket)})
		createDestination(t, d, dest, p, "", &rivorav1.Limits{MaxAttempts: 1})
		pub := newPublished()
		publishLanes(t, d.SDK(), plan{Destination: dest, Customer: customer, Lanes: lanesNamed(prefix, 2), PerLane: 10}, pub)
		ids = append(ids, pub.all()...)
		waitDLQ(t, d, dest, len(ids), 60*time.Second)
		waitUnarchived(t, d, dest, 0, 30*time.Second)
		if round == 0 {
			if err := d.Stop(30 * time.Second); err != nil {
				t.Fatalf("stop the first incarnation: %v", err)
			}
		}
		last = d
	}

	list := waitDLQ(t, last, dest, 40, 10*time.Second)
	seen := distinctIDs(list)
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("event %s is in the archive %d times, want once", id, seen[id])
		}
	}
	if len(list) != 40 {
		t.Errorf("dlq list: %d dead letters, want 40", len(list))
	}
	if st := dlqStats(t, last, dest); st.GetTotal() != 40 {
		t.Errorf("dlq stats: total %d, want 40", st.GetTotal())
	}
	// When both incarnations wrote in one hour, their first objects had one
	// name: the second's is a variant of it, listed right after it.
	keys := m.Objects(bucket, "deadletter/"+dest+"/")
	t.Logf("objects: %q", keys)
	base := map[string]bool{}
	for _, k := range keys {
		if i := strings.LastIndex(k, "_"); i > 0 && strings.HasSuffix(k, ".ndjson.gz") && len(k)-i == len("_002.ndjson.gz") {
			if !base[k[:i]+".ndjson.gz"] {
				t.Errorf("variant %s is listed without (or before) the object it is a variant of", k)
			}
			continue
		}
		base[k] = true
	}
}

// With a wrong --s3-secret-key the store answers (SignatureDoesNotMatch):
// not an outage, so `dlq list` and `dlq stats` answer from the ledgers
// saying what to fix, and a replay is refused (failed precondition)
// rather than "unavailable … try again shortly" (probe s5).
func TestWrongArchiveCredentialsSayWhatToFix(t *testing.T) {
	requireRivoractl(t)
	m := startMinIO(t)
	args := m.DevArgs("rivora-e2e-wrong-creds")
	for i := range args {
		if args[i] == "--s3-secret-key" {
			args[i+1] = "not-the-secret"
		}
	}
	d := startDev(t, devOptions{Args: args})
	const dest = "dlq-refused"
	p := newPartner(t)
	p.SetStatus(http.StatusBadRequest)
	createDestination(t, d, dest, p, "", &rivorav1.Limits{MaxAttempts: 1})
	pub := newPublished()
	publishLanes(t, d.SDK(), plan{Destination: dest, Customer: "cust-refused", Lanes: lanesNamed("r", 1), PerLane: 3}, pub)
	waitUnarchived(t, d, dest, 3, 60*time.Second)

	for _, cmd := range [][]string{{"dlq", "list", "--destination", dest}, {"dlq", "stats", "--destination", dest}} {
		out, errOut, err := runRivoractl(d, cmd...)
		all := out + errOut
		t.Logf("rivoractl %s:\n%s", strings.Join(cmd, " "), all)
		if err != nil || !strings.Contains(all, "refused access (SignatureDoesNotMatch)") || !strings.Contains(all, "--s3-secret-key") {
			t.Errorf("rivoractl %s: %v\n%s\nwant the ledgers' answer saying the archive refused access and which flags to check", strings.Join(cmd, " "), err, all)
		}
		if strings.Contains(all, "try again shortly") {
			t.Errorf("rivoractl %s says to try again shortly:\n%s", strings.Join(cmd, " "), all)
		}
	}
	out, errOut, err := runRivoractl(d, "replay", "--destination", dest, "--dry-run")
	t.Logf("rivoractl replay --dry-run: %v\n%s%s", err, out, errOut)
	if err == nil || !strings.Contains(out+errOut, "refused access (SignatureDoesNotMatch)") || strings.Contains(out+errOut, "try again shortly") {
		t.Errorf("rivoractl replay --dry-run: %v\n%s%s\nwant it refused, saying the archive refused access", err, out, errOut)
	}
}
