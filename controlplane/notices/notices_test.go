package notices_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/controlplane/notices"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func TestParkedOncePerEpisodeAfterThreshold(t *testing.T) {
	e := notices.NewEpisodes(5 * time.Minute)
	since := t0
	for s := 0; s < 299; s++ {
		if n, ok := e.Observe("orders", true, since, "no success for 20s", t0.Add(time.Duration(s)*time.Second)); ok {
			t.Fatalf("notice %s after %ds, before notify-parked-after", n.Type, s)
		}
	}
	n, ok := e.Observe("orders", true, since, "no success for 20s", t0.Add(5*time.Minute))
	if !ok || n.Type != notices.DestinationParked || n.DestinationID != "orders" || !n.ParkedSince.Equal(since) || n.Reason != "no success for 20s" {
		t.Fatalf("at 5m: %+v, %v; want one destination.parked since %s", n, ok, since)
	}
	for s := 1; s < 100; s++ {
		if n, ok := e.Observe("orders", true, since, "", t0.Add(5*time.Minute+time.Duration(s)*time.Second)); ok {
			t.Fatalf("second notice %s in one episode", n.Type)
		}
	}
	r, ok := e.Observe("orders", false, time.Time{}, "", t0.Add(10*time.Minute))
	if !ok || r.Type != notices.DestinationRecovered || !r.ParkedSince.Equal(since) {
		t.Fatalf("recovery: %+v, %v", r, ok)
	}
	if _, ok := e.Observe("orders", false, time.Time{}, "", t0.Add(11*time.Minute)); ok {
		t.Fatal("a second recovery notice")
	}
	// A new episode is notified again, under a new key.
	since2 := t0.Add(20 * time.Minute)
	n2, ok := e.Observe("orders", true, since2, "", since2.Add(5*time.Minute))
	if !ok || n2.Type != notices.DestinationParked || n2.Key == n.Key {
		t.Fatalf("second episode: %+v, %v (first key %s)", n2, ok, n.Key)
	}
}

func TestShortParkIsNotNotifiedNorRecovered(t *testing.T) {
	e := notices.NewEpisodes(time.Minute)
	e.Observe("orders", true, t0, "", t0)
	e.Observe("orders", true, t0, "", t0.Add(59*time.Second))
	if n, ok := e.Observe("orders", false, time.Time{}, "", t0.Add(70*time.Second)); ok {
		t.Fatalf("recovery %+v of an episode that was never notified", n)
	}
	// The threshold counts from the new episode's start, not the old one's.
	if n, ok := e.Observe("orders", true, t0.Add(80*time.Second), "", t0.Add(100*time.Second)); ok {
		t.Fatalf("notice %+v 20s into a new episode", n)
	}
	if len(e.Tracked()) != 1 {
		t.Fatalf("tracked %v", e.Tracked())
	}
	e.Forget("orders")
	if len(e.Tracked()) != 0 {
		t.Fatalf("tracked after Forget: %v", e.Tracked())
	}
}

// TestEpisodesModel drives random parked/not-parked observations and
// checks, against a model, that each episode of at least After gives
// exactly one parked notice at the first observation past After, and a
// recovered notice exactly for notified episodes.
func TestEpisodesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const after = 10 * time.Second
	for run := 0; run < 200; run++ {
		e := notices.NewEpisodes(after)
		now := t0
		var start time.Time
		parked, notified := false, false
		for step := 0; step < 200; step++ {
			now = now.Add(time.Duration(r.IntN(4000)) * time.Millisecond)
			p := r.IntN(4) != 0
			if p && !parked {
				start, notified = now, false
			}
			n, ok := e.Observe("d", p, start, "", now)
			var want string
			switch {
			case p && !notified && now.Sub(start) >= after:
				want, notified = notices.DestinationParked, true
			case !p && parked && notified:
				want = notices.DestinationRecovered
			}
			if got := map[bool]string{true: n.Type}[ok]; got != want {
				t.Fatalf("run %d step %d (parked %v since %s, now %s): notice %q, want %q", run, step, p, start, now, got, want)
			}
			parked = p
		}
	}
}

func TestBatcherGathersABurst(t *testing.T) {
	b := notices.NewBatcher(time.Minute, 5*time.Second)
	for i := range 4 {
		b.Add("orders", fmt.Sprintf("e%d", i), t0, t0.Add(time.Duration(i)*time.Second))
		if n := b.Due(t0.Add(time.Duration(i) * time.Second)); len(n) != 0 {
			t.Fatalf("notice %+v %ds into the gathering", n, i)
		}
	}
	n := b.Due(t0.Add(5 * time.Second))
	if len(n) != 1 || n[0].Count != 4 || strings.Join(n[0].EventIDs, ",") != "e0,e1,e2,e3" {
		t.Fatalf("after gathering: %+v, want one notice of 4", n)
	}
}

func TestBatcherAtMostOncePerMinute(t *testing.T) {
	b := notices.NewBatcher(time.Minute, 0)
	b.Add("orders", "e0", t0, t0)
	first := b.Due(t0)
	if len(first) != 1 || first[0].Count != 1 || len(first[0].EventIDs) != 1 || first[0].EventIDs[0] != "e0" {
		t.Fatalf("first dead letter after a quiet period: %+v, want it notified at once", first)
	}
	for i := 1; i <= 25; i++ {
		at := t0.Add(time.Duration(i) * 2 * time.Second)
		b.Add("orders", fmt.Sprintf("e%d", i), at, at)
		b.Add("billing", fmt.Sprintf("b%d", i), at, at)
		for _, n := range b.Due(at) {
			if n.DestinationID == "orders" {
				t.Fatalf("orders notified again %s after the last notice: %+v", at.Sub(t0), n)
			}
			if n.DestinationID == "billing" && n.Count != 1 {
				t.Fatalf("billing's first notice counts %d", n.Count)
			}
		}
	}
	due := b.Due(t0.Add(time.Minute))
	var orders *notices.Notice
	for i := range due {
		if due[i].DestinationID == "orders" {
			orders = &due[i]
		}
	}
	if orders == nil || orders.Count != 25 || len(orders.EventIDs) != notices.MaxEventIDs || orders.EventIDs[0] != "e1" || !orders.Through.Equal(t0.Add(50*time.Second)) {
		t.Fatalf("a minute on: %+v, want orders with count 25 and the first 10 ids", orders)
	}
	for _, n := range b.Due(t0.Add(2 * time.Minute)) {
		if n.DestinationID == "orders" {
			t.Fatalf("orders notice %+v with no new dead letters", n)
		}
	}
	// Quiet for a full period: the next dead letter goes at once.
	b.Add("orders", "late", t0.Add(3*time.Minute), t0.Add(3*time.Minute))
	if n := b.Due(t0.Add(3 * time.Minute)); len(n) != 1 || n[0].Count != 1 {
		t.Fatalf("after a quiet minute: %+v", n)
	}
}

// TestBatcherModel adds random dead letters and checks, per destination,
// that notices are a minute apart and their counts add up.
func TestBatcherModel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	b := notices.NewBatcher(time.Minute, 5*time.Second)
	added := map[string]int{}
	notified := map[string]int{}
	last := map[string]time.Time{}
	now := t0
	for step := 0; step < 5000; step++ {
		now = now.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
		for range r.IntN(5) {
			d := fmt.Sprintf("d%d", r.IntN(3))
			b.Add(d, fmt.Sprintf("%s-%d", d, added[d]), now, now)
			added[d]++
		}
		for _, n := range b.Due(now) {
			if l, ok := last[n.DestinationID]; ok && now.Sub(l) < time.Minute {
				t.Fatalf("%s notified %s after its last notice", n.DestinationID, now.Sub(l))
			}
			if n.Count < 1 || len(n.EventIDs) != min(n.Count, notices.MaxEventIDs) {
				t.Fatalf("notice count %d with %d ids", n.Count, len(n.EventIDs))
			}
			last[n.DestinationID] = now
			notified[n.DestinationID] += n.Count
		}
	}
	for _, n := range b.Due(now.Add(time.Minute)) {
		notified[n.DestinationID] += n.Count
	}
	if len(b.Due(now.Add(2*time.Minute))) != 0 {
		t.Error("notices with nothing added")
	}
	for d, n := range added {
		if notified[d] != n {
			t.Errorf("%s: %d dead letters, notices count %d", d, n, notified[d])
		}
	}
}

func TestPayloadShape(t *testing.T) {
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	e := notices.NewEpisodes(time.Second)
	n, _ := e.Observe("orders", true, since, "no success for 20s (last: HTTP 503)", since.Add(2*time.Second))
	body, err := n.Payload()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"type": "destination.parked", "destinationId": "orders", "at": "2026-12-01T09:00:02Z",
		"parkedSince": "2026-12-01T09:00:00Z", "reason": "no success for 20s (last: HTTP 503)",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (body %s)", k, got[k], v, body)
		}
	}
	if msg, _ := got["message"].(string); msg == "" {
		t.Errorf("no message: %s", body)
	}
	b := notices.NewBatcher(time.Minute, 0)
	b.Add("orders", "01J-x", since, since)
	dl := b.Due(since)[0]
	body, _ = dl.Payload()
	got = nil
	json.Unmarshal(body, &got)
	if got["type"] != "deadletter.created" || got["count"] != 1.0 || fmt.Sprint(got["eventIds"]) != "[01J-x]" {
		t.Errorf("deadletter payload %s", body)
	}
	for _, n := range []notices.Notice{notices.Disabled("orders", "partner answered 410 Gone", 7, since), notices.Expired("orders", 8, since), n, dl} {
		if n.Key == "" || n.Message == "" || n.At.IsZero() {
			t.Errorf("%s: key %q message %q at %s", n.Type, n.Key, n.Message, n.At)
		}
		for i := 0; i < len(n.Key); i++ {
			if c := n.Key[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':') {
				t.Errorf("key %q has %q, which an idempotency key refuses", n.Key, c)
			}
		}
	}
	if d := notices.Disabled("orders", "partner answered 410 Gone", 7, since); d.Type != notices.DestinationDisabled || d.Reason != "partner answered 410 Gone" {
		t.Errorf("disabled notice %+v", d)
	}
}

func TestScanReadsWhatMovedAndCountsOnce(t *testing.T) {
	s := notices.NewScan(t0, 2*time.Minute, 5*time.Minute)
	full, since, dests := s.Due(t0)
	if !full || !since.Equal(t0) || len(dests) != 0 {
		t.Fatalf("first Due: full %v since %s dests %v; want a full read from the floor", full, since, dests)
	}
	if s.New("orders", "old", t0.Add(-time.Second)) {
		t.Error("a dead letter before the floor is new")
	}
	if !s.New("orders", "e1", t0.Add(time.Minute)) || s.New("orders", "e1", t0.Add(time.Minute)) {
		t.Error("e1 must be new exactly once")
	}
	if !s.New("orders", "e1", t0.Add(2*time.Minute)) {
		t.Error("the same event dying again (replayed) is new")
	}
	s.Read("", t0.Add(time.Second))
	if full, _, dests := s.Due(t0.Add(2 * time.Second)); full || len(dests) != 0 {
		t.Fatalf("nothing moved: full %v dests %v", full, dests)
	}
	s.Archived(map[string]int64{"orders": 2})
	s.Archived(map[string]int64{"orders": 2, "billing": 1})
	_, _, dests = s.Due(t0.Add(3 * time.Second))
	if len(dests) != 2 || !dests["orders"].Equal(t0) || !dests["billing"].Equal(t0) {
		t.Fatalf("dests %v: want orders and billing from the floor", dests)
	}
	s.Read("orders", t0.Add(4*time.Second))
	if _, _, dests = s.Due(t0.Add(5 * time.Second)); len(dests) != 1 || dests["billing"].IsZero() {
		t.Fatalf("after reading orders: %v, want billing only", dests)
	}
	// A counter that restarts (partition reopened) is a move too.
	s.Read("billing", t0.Add(6*time.Second))
	s.Archived(map[string]int64{"billing": 1})
	if _, _, dests = s.Due(t0.Add(7 * time.Second)); len(dests) != 1 || dests["orders"].IsZero() {
		t.Fatalf("orders' counter vanished: %v, want orders read", dests)
	}
	// Reads start Slack behind the newest seen; what is older is never new
	// again, even once pruned.
	s.New("orders", "e9", t0.Add(10*time.Minute))
	s.Read("orders", t0.Add(10*time.Minute))
	s.Archived(map[string]int64{"orders": 3, "billing": 1})
	if _, _, dests = s.Due(t0.Add(10 * time.Minute)); !dests["orders"].Equal(t0.Add(8 * time.Minute)) {
		t.Fatalf("orders read from %s, want 2m behind its newest", dests["orders"])
	}
	if s.New("orders", "e1", t0.Add(time.Minute)) {
		t.Error("a pruned, counted dead letter came back as new")
	}
	if full, since, _ := s.Due(t0.Add(6 * time.Minute)); !full || !since.Equal(t0.Add(8*time.Minute)) {
		t.Fatalf("full read due after 5m from 2m behind the newest: %v %s", full, since)
	}
}
