package ingest

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A publish that took slowPublishAfter or more is logged with each
// step's time; a quicker one is not.
func TestSlowPublishSaysWhereItsTimeWent(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))

	quick := startPhases()
	quick.done(phaseAdmit)
	var every slowLogs
	quick.logIfSlow(log, &every, 1, nil)
	if out.Len() != 0 {
		t.Fatalf("a quick publish was logged: %s", out.String())
	}

	slow := startPhases()
	slow.start = slow.start.Add(-3 * time.Second)
	slow.last = slow.start
	slow.done(phaseAdmit) // ~3 s: its turn, say
	slow.done(phaseRecord)
	slow.logIfSlow(log, &every, 2, errors.New("store event: deadline"))
	line := out.String()
	for _, want := range []string{"level=WARN", "slow publish", "events=2", "admit=3", "record=0s", "ended_in=precheck", "precheck=0s", `error="store event: deadline"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "store=") {
		t.Errorf("log line %q times a step the publish did not reach", line)
	}
}

// Slow publishes are logged a line a second at most, the next line
// counting those not logged.
func TestSlowPublishLogIsALineASecond(t *testing.T) {
	var every slowLogs
	start := time.Now()
	if ok, _ := every.take(start); !ok {
		t.Fatal("the first slow publish was not logged")
	}
	for range 3 {
		if ok, _ := every.take(start.Add(100 * time.Millisecond)); ok {
			t.Fatal("a second slow publish within the second was logged")
		}
	}
	ok, skipped := every.take(start.Add(slowLogEvery + time.Millisecond))
	if !ok || skipped != 3 {
		t.Fatalf("a slow publish a second later: logged %v, %d skipped; want logged, 3", ok, skipped)
	}
}
