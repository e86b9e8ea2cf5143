package owner_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// Every attempt sent leaves its own record in the history, however the
// records are built: a failed first attempt's status and error, then the
// delivered retry's, with nothing of the failure carried into the
// delivery's record (nor of one event into another's).
func TestAttemptRecordsInHistory(t *testing.T) {
	var mu sync.Mutex
	failing := map[string]bool{}
	p := newPartner(t, http.StatusBadRequest, func(id string, n int) bool {
		mu.Lock()
		defer mu.Unlock()
		return failing[id] && n == 1
	})
	n := open(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", p.URL(), 5)})
	failed := n.publish("orders", "a")
	mu.Lock()
	failing[failed] = true
	mu.Unlock()
	clean := n.publish("orders", "b")
	n.run(true)

	outcomesOf := func(id string) []*rivorav1.EventOutcome {
		t.Helper()
		n.hist.Flush()
		got, err := n.hist.Lookup(context.Background(), id)
		if err != nil {
			t.Fatalf("lookup %s: %v", id, err)
		}
		return got
	}
	delivered := func(id string) func() bool {
		return func() bool {
			for _, o := range outcomesOf(id) {
				if o.GetKind() == rivorav1.EventOutcome_KIND_DELIVERED {
					return true
				}
			}
			return false
		}
	}
	poll.True(t, "both events delivered and recorded", 30*time.Second, func() bool { return delivered(failed)() && delivered(clean)() })

	type attempt struct {
		kind   rivorav1.EventOutcome_Kind
		number int32
		status int32
		err    string
	}
	check := func(id, lane string, want []attempt) {
		t.Helper()
		got := outcomesOf(id)
		if len(got) != len(want) {
			t.Fatalf("event %s has %d records, want %d: %v", id, len(got), len(want), got)
		}
		for i, o := range got {
			a := o.GetAttempt()
			g := attempt{o.GetKind(), a.GetNumber(), a.GetStatusCode(), a.GetError()}
			if g != want[i] {
				t.Errorf("event %s record %d = %+v, want %+v", id, i, g, want[i])
			}
			if o.GetEventId() != id || o.GetDestinationId() != "orders" || o.GetCustomerId() != "acme" || o.GetLaneKey() != lane || o.GetType() != "t" || o.GetAcceptedAt() == nil {
				t.Errorf("event %s record %d names %s/%s/%s/%s/%s accepted %v", id, i, o.GetEventId(), o.GetDestinationId(), o.GetCustomerId(), o.GetLaneKey(), o.GetType(), o.GetAcceptedAt())
			}
			if a.GetAt() == nil || a.GetAt().AsTime().Before(o.GetAcceptedAt().AsTime()) || a.GetDuration() == nil || a.GetDuration().AsDuration() <= 0 {
				t.Errorf("event %s record %d: attempt at %v (accepted %v), took %v", id, i, a.GetAt(), o.GetAcceptedAt(), a.GetDuration())
			}
		}
	}
	check(failed, "a", []attempt{
		{rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, 1, http.StatusBadRequest, "HTTP 400: boom"},
		{rivorav1.EventOutcome_KIND_DELIVERED, 2, http.StatusOK, ""},
	})
	check(clean, "b", []attempt{{rivorav1.EventOutcome_KIND_DELIVERED, 1, http.StatusOK, ""}})
}

// A try that fails while its destination fails everything uses none of
// the event's attempts, and its record says so, with why; the try that
// delivers it, and a 4xx (the event's own failure), each use one.
func TestAttemptRecordsSayWhetherCharged(t *testing.T) {
	// The partner answers by lane, so each failure is in place before its
	// event is published (the owner may send an event the moment it is
	// stored).
	statusOfLane := map[string]int{"a": http.StatusServiceUnavailable, "b": http.StatusBadRequest}
	p := partner.New(t, partner.Options{RefusalBody: "boom\n", Answer: func(r partner.Request) int {
		if r.Sent <= 2 {
			return statusOfLane[r.LaneKey]
		}
		return 0
	}})
	n := open(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", p.URL(), 5)})
	down := n.publish("orders", "a")
	n.run(true)

	type try struct {
		kind    rivorav1.EventOutcome_Kind
		number  int32
		charged bool
		reason  string
	}
	recordsOf := func(id string) []try {
		n.hist.Flush()
		got, err := n.hist.Lookup(context.Background(), id)
		if err != nil {
			t.Fatalf("lookup %s: %v", id, err)
		}
		var out []try
		for _, o := range got {
			a := o.GetAttempt()
			if a.Charged == nil {
				t.Fatalf("record %v says nothing of whether it was charged", o)
			}
			out = append(out, try{o.GetKind(), a.GetNumber(), a.GetCharged(), a.GetNotChargedReason()})
		}
		return out
	}
	poll.True(t, "the held event delivered and recorded", 30*time.Second, func() bool { return len(recordsOf(down)) == 3 })
	want := []try{
		{rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, 1, false, "destination down"},
		{rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, 1, false, "destination down"},
		{rivorav1.EventOutcome_KIND_DELIVERED, 1, true, ""},
	}
	if got := recordsOf(down); !slices.Equal(got, want) {
		t.Fatalf("records of an event its down destination held = %+v, want %+v", got, want)
	}

	// Now that the destination answers, a 400 is the event's own failure.
	poison := n.publish("orders", "b")
	poll.True(t, "the 400 event retried and delivered", 30*time.Second, func() bool { return len(recordsOf(poison)) == 3 })
	want = []try{
		{rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, 1, true, ""},
		{rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, 2, true, ""},
		{rivorav1.EventOutcome_KIND_DELIVERED, 3, true, ""},
	}
	if got := recordsOf(poison); !slices.Equal(got, want) {
		t.Fatalf("records of an event answered 400 twice = %+v, want %+v", got, want)
	}
}
