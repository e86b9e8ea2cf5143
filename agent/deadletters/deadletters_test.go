package deadletters

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/internal/bounds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func TestHourPrefixes(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	got := hourPrefixes("orders", now.Add(-90*time.Minute), now)
	want := []string{"deadletter/orders/2026/12/01/08/", "deadletter/orders/2026/12/01/09/", "deadletter/orders/2026/12/01/10/"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("hourPrefixes = %v, want %v", got, want)
	}
	// Each prefix matches exactly the keys archive.Key gives for its hour.
	for i, h := range []time.Time{now.Add(-time.Hour), now, now.Add(time.Hour)} {
		if k := archive.Key("orders", h, 3, 1, 2); !strings.HasPrefix(k, got[i]) {
			t.Errorf("key %s does not start with %s", k, got[i])
		}
	}
	if p := hourPrefixes("orders", now.Add(-maxHourLists*time.Hour), now); p != nil {
		t.Errorf("a since %d hours back listed %d hours, want the whole prefix (nil)", maxHourLists, len(p))
	}
}

func TestMatchesReason(t *testing.T) {
	dl := &rivorav1.DeadLetter{Event: &rivorav1.Event{DestinationId: "orders"}, Reason: rivorav1.DeadReason_DEAD_REASON_WINDOW}
	for reason, want := range map[rivorav1.DeadReason]bool{
		rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED:  true,
		rivorav1.DeadReason_DEAD_REASON_WINDOW:       true,
		rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS: false,
		rivorav1.DeadReason_DEAD_REASON_MANUAL:       false,
	} {
		if got := matches(&rivorav1.DeadLetterFilter{DestinationId: "orders", Reason: reason}, dl); got != want {
			t.Errorf("a window dead letter matches reason %v: %v, want %v", reason, got, want)
		}
	}
}

// ListDeadLetters answers at most bounds.DeadLetterList dead letters
// whatever the limit asked (issue 22: the limit had no upper bound, and an
// answer grew with the archive), saying truncated when more match; a
// smaller limit is kept.
func TestListDeadLettersLimitIsBounded(t *testing.T) {
	rg := newReplayRig(t)
	arch := rg.arch
	deadAt := time.Now().Add(-time.Hour)
	var records []*rivorav1.DeadLetter
	for i := range bounds.DeadLetterList + 500 {
		records = append(records, &rivorav1.DeadLetter{
			Event:  &rivorav1.Event{EventId: fmt.Sprintf("ev-%05d", i), DestinationId: "orders", CustomerId: "acme", LaneKey: "l"},
			DeadAt: timestamppb.New(deadAt), Reason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS,
		})
	}
	if _, err := arch.Put(context.Background(), archive.Key("orders", deadAt, 0, 1, uint64(len(records))), records); err != nil {
		t.Fatal(err)
	}
	s := &Service{archive: arch, replay: rg.replay}
	for _, c := range []struct {
		limit     int32
		want      int
		truncated bool
	}{
		{0, bounds.DeadLetterList, true}, {5, 5, true}, {bounds.DeadLetterList, bounds.DeadLetterList, true},
		{bounds.DeadLetterList + 1, bounds.DeadLetterList, true}, {100000, bounds.DeadLetterList, true}, {math.MaxInt32, bounds.DeadLetterList, true},
	} {
		resp, err := s.ListDeadLetters(context.Background(), connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}, Limit: c.limit}))
		if err != nil {
			t.Fatalf("limit %d: %v", c.limit, err)
		}
		if got := len(resp.Msg.GetDeadLetters()); got != c.want || resp.Msg.GetTruncated() != c.truncated {
			t.Errorf("limit %d: %d dead letters, truncated %v; want %d, %v", c.limit, got, resp.Msg.GetTruncated(), c.want, c.truncated)
		}
	}
}

// Stats count the dead letters a replay handled apart (replayed), as dlq
// list shows them: a probe read every dead letter as still to replay.
func TestDeadLetterStatsCountReplayedApart(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, dead("a1", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS), dead("a2", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS), dead("g", "globex", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS))
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders", CustomerId: "acme"}}, nil); err != nil || end.Replayed != 2 {
		t.Fatalf("replay of acme's: %+v, %v", end, err)
	}
	s := &Service{archive: rg.arch, replay: rg.replay}
	stats, err := s.DeadLetterStats(context.Background(), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}))
	if err != nil {
		t.Fatal(err)
	}
	if stats.Msg.GetTotal() != 3 || stats.Msg.GetReplayed() != 2 {
		t.Errorf("stats: total %d, replayed %d; want 3, 2", stats.Msg.GetTotal(), stats.Msg.GetReplayed())
	}
	want := map[string][2]int64{"acme": {2, 2}, "globex": {1, 0}}
	for _, n := range stats.Msg.GetCounts() {
		if got := [2]int64{n.GetCount(), n.GetReplayed()}; got != want[n.GetCustomerId()] {
			t.Errorf("%s: count, replayed %v; want %v", n.GetCustomerId(), got, want[n.GetCustomerId()])
		}
		delete(want, n.GetCustomerId())
	}
	if len(want) != 0 {
		t.Errorf("no counts for %v", want)
	}
}

// The dead letters a replay handled say when (replayed_at), in lists and
// in show; the others, which the next replay sends, do not.
func TestDeadLettersSayWhenAReplayHandledThem(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, dead("a", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS), dead("g", "globex", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS))
	if _, end, err := rg.run(context.Background(), ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders", CustomerId: "acme"}}, nil); err != nil || end.Replayed != 1 {
		t.Fatalf("replay of acme's: %+v, %v", end, err)
	}
	s := &Service{archive: rg.arch, replay: rg.replay}
	list, err := s.ListDeadLetters(context.Background(), connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}))
	if err != nil {
		t.Fatal(err)
	}
	replayed := map[string]bool{}
	for _, dl := range list.Msg.GetDeadLetters() {
		replayed[dl.GetEvent().GetEventId()] = dl.GetReplayedAt() != nil
	}
	if !replayed["a"] || replayed["g"] || len(replayed) != 2 {
		t.Errorf("listed with replayed_at set: %v; want a's only", replayed)
	}
	got, err := s.GetDeadLetter(context.Background(), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "a", DestinationId: "orders"}))
	if err != nil || !got.Msg.GetDeadLetter().GetReplayedAt().AsTime().Equal(rg.now) {
		t.Errorf("show a: %v, %v; want replayed_at %v (the rig's clock when the replay ran)", got.Msg.GetDeadLetter().GetReplayedAt(), err, rg.now)
	}
}
