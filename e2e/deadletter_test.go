package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// A lane head that keeps failing is attempted exactly max_attempts times,
// archived with its last status, and the lane moves on.
func TestDeadLetterArchivedAndLaneAdvances(t *testing.T) {
	d := startDev(t, devOptions{})
	c := d.SDK()
	ctx := ctxTimeout(t, 2*time.Minute)

	p := newPartner(t)
	p.SetStatus(http.StatusBadRequest)
	createDestination(t, d, "dl", p, "", &rivorav1.Limits{MaxAttempts: 3})

	const customer, lane = "cust-dl", "user-42"
	firstPayload := []byte(`{"n":1,"note":"this one dies"}`)
	first, err := c.Publish(ctx, sdk.Event{Destination: "dl", Customer: customer, Lane: lane, Type: "t.dead", Payload: firstPayload, ContentType: "application/json"})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}

	poll.True(t, "3 attempts at the failing partner", 60*time.Second, func() bool { return p.Sent(first) >= 3 })
	dl := waitDeadLetter(t, d.DataDir(), "dl", first, 60*time.Second)

	if got := dl.GetAttempts(); got != 3 {
		t.Errorf("dead letter attempts = %d, want 3", got)
	}
	if got := dl.GetLastStatus(); got != 400 {
		t.Errorf("dead letter last_status = %d, want 400", got)
	}
	if got := dl.GetReason(); got != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS {
		t.Errorf("dead letter reason = %v, want DEAD_REASON_MAX_ATTEMPTS", got)
	}
	ev := dl.GetEvent()
	if ev.GetDestinationId() != "dl" || ev.GetCustomerId() != customer || ev.GetLaneKey() != lane || ev.GetType() != "t.dead" {
		t.Errorf("dead letter event = dest %q customer %q lane %q type %q", ev.GetDestinationId(), ev.GetCustomerId(), ev.GetLaneKey(), ev.GetType())
	}
	if !bytes.Equal(ev.GetPayload(), firstPayload) {
		t.Errorf("dead letter payload = %q, want %q", ev.GetPayload(), firstPayload)
	}

	// The partner saw attempts 1, 2, 3, spaced by the backoff (1 s, 2 s,
	// each jittered to at least half).
	var seen []partner.Request
	for _, r := range p.Requests() {
		if r.ID == first {
			seen = append(seen, r)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("partner saw %d attempts of the dead event, want exactly 3", len(seen))
	}
	for i, r := range seen {
		if r.Attempt != i+1 {
			t.Errorf("attempt %d carried rivora-attempt %d", i+1, r.Attempt)
		}
	}
	if gap := seen[1].At.Sub(seen[0].At); gap < 450*time.Millisecond {
		t.Errorf("retry 1 came %s after attempt 1; backoff is at least 500ms", gap)
	}
	if gap := seen[2].At.Sub(seen[1].At); gap < 950*time.Millisecond {
		t.Errorf("retry 2 came %s after attempt 2; backoff is at least 1s", gap)
	}

	// The lane moves on once the partner is healthy again.
	p.SetHealthy()
	pub := newPublished()
	pub.add(customer+"/"+lane, first, firstPayload)
	var later []string
	for i := 2; i <= 4; i++ {
		payload := fmt.Appendf(nil, `{"n":%d}`, i)
		id, err := c.Publish(ctx, sdk.Event{Destination: "dl", Customer: customer, Lane: lane, Type: "t.live", Payload: payload, ContentType: "application/json"})
		if err != nil {
			t.Fatalf("publish #%d: %v", i, err)
		}
		pub.add(customer+"/"+lane, id, payload)
		later = append(later, id)
	}
	p.WaitDelivered(t, later, 30*time.Second)
	checkLaneOrder(t, p, pub.ByLane, pub.Payloads, map[string]bool{first: true})
	if n := p.Sent(first); n != 3 {
		t.Errorf("dead event attempted %d times in total, want 3", n)
	}
	if n := p.OK(first); n != 0 {
		t.Errorf("dead event was answered 2xx %d times", n)
	}

	deadResp := waitEventState(t, d, first, rivorav1.EventState_EVENT_STATE_DEAD, 20*time.Second)
	if deadResp.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS {
		t.Errorf("GetEvent(dead).dead_reason = %v, want MAX_ATTEMPTS", deadResp.GetDeadReason())
	}
	if n := len(deadResp.GetAttempts()); n != 3 {
		t.Errorf("GetEvent(dead) lists %d attempts, want 3", n)
	}
	for i, a := range deadResp.GetAttempts() {
		if a.GetStatusCode() != 400 {
			t.Errorf("GetEvent(dead) attempt %d status %d, want 400", i+1, a.GetStatusCode())
		}
	}
	if deadResp.GetDestinationId() != "dl" || deadResp.GetLaneKey() != lane || deadResp.GetCustomerId() != customer {
		t.Errorf("GetEvent(dead) = dest %q customer %q lane %q", deadResp.GetDestinationId(), deadResp.GetCustomerId(), deadResp.GetLaneKey())
	}
	okResp := waitEventState(t, d, later[0], rivorav1.EventState_EVENT_STATE_DELIVERED, 20*time.Second)
	if n := len(okResp.GetAttempts()); n < 1 {
		t.Errorf("GetEvent(delivered) lists no attempts")
	}
}

var archivePath = regexp.MustCompile(`^\d{4}/\d{2}/\d{2}/\d{2}/[^/]+\.ndjson\.gz$`)

// waitDeadLetter polls the local archive of a destination until a dead letter
// for id appears, and returns it. Files that do not (yet) decode are retried.
func waitDeadLetter(t testing.TB, dataDir, dest, id string, timeout time.Duration) *rivorav1.DeadLetter {
	t.Helper()
	root := filepath.Join(dataDir, "archive", "deadletter", dest)
	var dl *rivorav1.DeadLetter
	var lastErr error
	err := poll.Check(timeout, 100*time.Millisecond, func() error {
		var err error
		if dl, err = findDeadLetter(root, id); dl != nil {
			return nil
		}
		if err != nil {
			lastErr = err
		}
		return errNotYet
	})
	if err != nil {
		var files []string
		filepath.WalkDir(filepath.Join(dataDir, "archive"), func(path string, de fs.DirEntry, err error) error {
			if err == nil && !de.IsDir() {
				files = append(files, path)
			}
			return nil
		})
		t.Fatalf("no dead letter for %s under %s within %s (last error: %v; files under archive/: %v)", id, root, timeout, lastErr, files)
	}
	return dl
}

func findDeadLetter(root, id string) (*rivorav1.DeadLetter, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !de.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		if !archivePath.MatchString(filepath.ToSlash(rel)) {
			if filepath.Ext(f) == ".gz" {
				return nil, fmt.Errorf("archive object %s is not at <yyyy>/<mm>/<dd>/<hh>/*.ndjson.gz", rel)
			}
			continue // temp files being written
		}
		dls, err := readArchive(f)
		if err != nil {
			return nil, err
		}
		for _, dl := range dls {
			if dl.GetEvent().GetEventId() == id {
				// The object lives under the (UTC) hour it died in, or the
				// next one when its batch was written across the hour.
				if at := dl.GetDeadAt(); at != nil {
					dir, err := time.Parse("2006/01/02/15", filepath.ToSlash(filepath.Dir(rel)))
					died := at.AsTime().UTC().Truncate(time.Hour)
					if err != nil || dir.Before(died) || dir.After(died.Add(time.Hour)) {
						return nil, fmt.Errorf("dead letter %s died at %s but is stored under %s", id, at.AsTime().UTC(), rel)
					}
				}
				return dl, nil
			}
		}
	}
	return nil, nil
}

func readArchive(path string) ([]*rivorav1.DeadLetter, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []*rivorav1.DeadLetter
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		dl := &rivorav1.DeadLetter{}
		if err := protojson.Unmarshal(line, dl); err != nil {
			return nil, fmt.Errorf("%s: line is not a rivora.v1.DeadLetter: %w", path, err)
		}
		out = append(out, dl)
	}
	return out, sc.Err()
}
