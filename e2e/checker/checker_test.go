package checker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/e2e/checker"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// clean is a history with nothing wrong: two lanes of three events on
// partition 0, owned by a1 (epoch 1) until it handed off at 10 s and by
// a2 (epoch 2) from 11 s.
func clean() checker.History {
	h := checker.History{Terms: []checker.Term{
		{Partition: 0, Agent: "a1", Epoch: 1, From: at(0), To: at(10)},
		{Partition: 0, Agent: "a2", Epoch: 2, From: at(11)},
	}}
	for lane, name := range []string{"u1", "u2"} {
		for seq := range 3 {
			id := name + "-" + string(rune('a'+seq))
			h.Acked = append(h.Acked, checker.Publish{ID: id, Destination: "d", Customer: "c", Lane: name, Seq: seq})
			agent, when := "a1", at(float64(1+seq+lane))
			if seq == 2 {
				agent, when = "a2", at(float64(12+lane))
			}
			h.Deliveries = append(h.Deliveries, checker.Delivery{ID: id, Destination: "d", Agent: agent, Status: 200, At: when})
		}
	}
	return h
}

func TestCleanHistoryPasses(t *testing.T) {
	v := checker.Check(clean())
	if err := v.OK(); err != nil {
		t.Fatalf("clean history: %v", err)
	}
	if v.Acked != 6 || v.Delivered != 6 || v.Lost != 0 || v.Duplicates != 0 {
		t.Fatalf("verdict %s", v.JSON())
	}
	if !strings.HasPrefix(v.JSON(), `{"acked":6,"delivered":6,`) || strings.Contains(v.JSON(), "\n") {
		t.Fatalf("JSON() = %s; want one line starting with acked and delivered", v.JSON())
	}
}

func TestCatchesAPlantedLoss(t *testing.T) {
	h := clean()
	h.Deliveries = h.Deliveries[1:] // u1-a never arrived
	// Its successors arrived regardless: that is also a reorder.
	v := checker.Check(h)
	if v.Lost != 1 || v.OK() == nil || !strings.Contains(v.OK().Error(), "u1-a acknowledged, never delivered") {
		t.Fatalf("a planted loss: %s", v.JSON())
	}
	// An archived event is not lost.
	h.Archived = []string{"u1-a"}
	if v := checker.Check(h); v.Lost != 0 || v.Archived != 1 || v.OK() != nil {
		t.Fatalf("the missing event archived: %s", v.JSON())
	}
}

func TestCatchesAPlantedReorder(t *testing.T) {
	h := clean()
	// u2-b (#1) is sent before u2-a (#0) was answered 2xx.
	for i := range h.Deliveries {
		switch h.Deliveries[i].ID {
		case "u2-a":
			h.Deliveries[i].At = at(3.5)
		case "u2-b":
			h.Deliveries[i].At = at(2.5)
		}
	}
	v := checker.Check(h)
	if v.ReorderedLanes != 1 || v.OK() == nil || !strings.Contains(v.OK().Error(), "lane d/c/u2: #1") {
		t.Fatalf("a planted reorder: %s", v.JSON())
	}
	// A failed attempt of the head does not let the next one go either.
	h = clean()
	h.Deliveries = append(h.Deliveries, checker.Delivery{ID: "u1-b", Destination: "d", Agent: "a1", Status: 500, At: at(0.5)})
	if v := checker.Check(h); v.ReorderedLanes != 1 {
		t.Fatalf("#1 attempted before #0 was delivered: %s", v.JSON())
	}
}

func TestCatchesAPlantedDoubleWriter(t *testing.T) {
	h := clean()
	// a1 keeps sending after a2 got epoch 2, without noticing it lost.
	h.Terms[0].To = time.Time{}
	h.Deliveries = append(h.Deliveries, checker.Delivery{ID: "u1-c", Destination: "d", Agent: "a1", Status: 200, At: at(12.5)})
	v := checker.Check(h)
	if v.OverlappingWriters != 1 || v.OK() == nil || !strings.Contains(v.OK().Error(), "a1 (epoch 1) sent u1-c") {
		t.Fatalf("a planted double writer: %s", v.JSON())
	}
}

func TestCatchesADeliveryAfterTheOwnerStopped(t *testing.T) {
	h := clean()
	h.Terms = h.Terms[:1] // a1 stopped at 10 s; nobody took over yet
	h.Terms = append(h.Terms, checker.Term{Partition: 0, Agent: "a2", Epoch: 2, From: at(11)})
	h.Deliveries = append(h.Deliveries, checker.Delivery{ID: "u2-c", Destination: "d", Agent: "a1", Status: 500, At: at(10.5)}) // in flight: allowed
	if v := checker.Check(h); v.StaleDeliveries != 0 {
		t.Fatalf("a request within StopGrace of the stop: %s", v.JSON())
	}
	h.Deliveries = append(h.Deliveries, checker.Delivery{ID: "u2-c", Destination: "d", Agent: "a1", Status: 500, At: at(10.9)}, checker.Delivery{ID: "u2-c", Destination: "d", Agent: "a3", Status: 500, At: at(5)})
	h.StopGrace = 500 * time.Millisecond
	v := checker.Check(h)
	if v.StaleDeliveries != 2 || v.OK() == nil {
		t.Fatalf("a request 0.9 s after the stop (grace 0.5 s) and one by an agent that never owned: %s", v.JSON())
	}
}

func TestDuplicatesAreExplainedByAChangeOfOwner(t *testing.T) {
	h := clean()
	// u1-b's 200 reached the partner, a1's outcome was lost with it, a2
	// sent it again.
	h.Deliveries = append(h.Deliveries, checker.Delivery{ID: "u1-b", Destination: "d", Agent: "a2", Status: 200, At: at(11.5)})
	v := checker.Check(h)
	if v.Duplicates != 1 || v.DuplicatesExplained != 1 || v.OK() != nil {
		t.Fatalf("a duplicate across owners: %s", v.JSON())
	}
	// The same owner sending a delivered event again is not explained.
	h.Deliveries = append(h.Deliveries, checker.Delivery{ID: "u1-a", Destination: "d", Agent: "a1", Status: 200, At: at(4)})
	v = checker.Check(h)
	if v.Duplicates != 2 || v.DuplicatesExplained != 1 || v.OK() == nil {
		t.Fatalf("a duplicate within one term: %s", v.JSON())
	}
}

func TestExpiredEventsMustBeArchived(t *testing.T) {
	h := clean()
	h.Acked = append(h.Acked, checker.Publish{ID: "x", Destination: "d", Customer: "c", Lane: "u3"}, checker.Publish{ID: "y", Destination: "d", Customer: "c", Lane: "u4"})
	h.Expired = []string{"x", "y"}
	h.Archived = []string{"x"}
	v := checker.Check(h)
	if v.Unarchived != 1 || v.Lost != 1 || v.OK() == nil {
		t.Fatalf("one expired event archived, one not: %s", v.JSON())
	}
}

func TestParseTerms(t *testing.T) {
	log := `==== run 1: rivora agent --name a1
time=2026-12-03T12:00:01.000Z level=INFO msg="partition owned" component=agent agent=a1 partition=3 epoch=7
time=2026-12-03T12:00:02.000Z level=INFO msg="partition owned" component=agent agent=a1 partition=4 epoch=2
time=2026-12-03T12:00:05.500Z level=WARN msg="partition ownership lost; stopped" component=agent agent=a1 partition=3 error="fenced"
time=2026-12-03T12:00:06.000Z level=INFO msg="partition reassigned; handing it off" component=agent agent=a1 partition=4
==== run 2: rivora agent --name a1
time=2026-12-03T12:00:09.000Z level=INFO msg="partition owned" component=agent agent=a1 partition=3 epoch=9
`
	terms, err := checker.ParseTerms("a1", strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []checker.Term{
		{Partition: 3, Agent: "a1", Epoch: 7, From: at(1), To: at(5.5)},
		{Partition: 4, Agent: "a1", Epoch: 2, From: at(2), To: at(6)},
		{Partition: 3, Agent: "a1", Epoch: 9, From: at(9)},
	}
	if len(terms) != len(want) {
		t.Fatalf("terms %+v, want %+v", terms, want)
	}
	for i := range want {
		if terms[i] != want[i] {
			t.Errorf("term %d: %+v, want %+v", i, terms[i], want[i])
		}
	}
}

func TestRecovery(t *testing.T) {
	h := clean() // heal at 10.5: u1-c moves at 12, u2-c at 13
	took, slowest, stuck := checker.Recovery(h, at(10.5), nil)
	if took != 2500*time.Millisecond || slowest != "d/c/u2" || stuck != "" {
		t.Fatalf("Recovery = %s, %q, %q; want 2.5s, d/c/u2, none", took, slowest, stuck)
	}
	h.Acked = append(h.Acked, checker.Publish{ID: "z", Destination: "e", Customer: "c", Lane: "u9"})
	if _, _, stuck := checker.Recovery(h, at(10.5), nil); stuck != "e/c/u9" {
		t.Fatalf("a lane that never moved: stuck %q", stuck)
	}
	if _, _, stuck := checker.Recovery(h, at(10.5), map[string]bool{"e": true}); stuck != "" {
		t.Fatalf("a skipped destination's lane: stuck %q", stuck)
	}
}
