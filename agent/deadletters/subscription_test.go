package deadletters

import (
	"context"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/archive"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// DeadLetterStats opens on what there is: counts per destination (and
// per subscription when asked), newest first; a subscription filter keeps
// that subscription's dead letters, in listings and counts.
func TestDeadLetterStatsBySubscriptionNewestFirst(t *testing.T) {
	rg := newReplayRig(t)
	arch := rg.arch
	now := time.Now().Add(-time.Hour).Truncate(time.Second)
	dead := func(id, dest, sub string, ago time.Duration) *rivorav1.DeadLetter {
		return &rivorav1.DeadLetter{
			Event:  &rivorav1.Event{EventId: id, DestinationId: dest, CustomerId: "c1", LaneKey: "l", SubscriptionId: sub},
			DeadAt: timestamppb.New(now.Add(-ago)), Reason: rivorav1.DeadReason_DEAD_REASON_DELETED,
		}
	}
	put := func(dest string, seq uint64, dls ...*rivorav1.DeadLetter) {
		if _, err := arch.Put(context.Background(), archive.Key(dest, now, 0, seq, seq+uint64(len(dls))), dls); err != nil {
			t.Fatal(err)
		}
	}
	put("billing", 1, dead("b1", "billing", "", 3*time.Minute))
	put("orders", 10, dead("o1", "orders", "sub_a", 5*time.Minute), dead("o2", "orders", "sub_b", time.Minute), dead("o3", "orders", "sub_a", 4*time.Minute))
	s := &Service{archive: arch, replay: rg.replay}
	stats := func(f *rivorav1.DeadLetterFilter, bySub bool) []string {
		t.Helper()
		resp, err := s.DeadLetterStats(context.Background(), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: f, BySubscription: bySub}))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range resp.Msg.GetCounts() {
			out = append(out, c.GetDestinationId()+"/"+c.GetSubscriptionId()+":"+string(rune('0'+c.GetCount())))
		}
		return out
	}
	if got, want := stats(&rivorav1.DeadLetterFilter{}, false), []string{"orders/:3", "billing/:1"}; !slices.Equal(got, want) {
		t.Errorf("per destination = %v, want %v (newest first)", got, want)
	}
	if got, want := stats(&rivorav1.DeadLetterFilter{}, true), []string{"orders/sub_b:1", "billing/:1", "orders/sub_a:2"}; !slices.Equal(got, want) {
		t.Errorf("per subscription = %v, want %v (newest first)", got, want)
	}
	if got, want := stats(&rivorav1.DeadLetterFilter{SubscriptionId: "sub_a"}, true), []string{"orders/sub_a:2"}; !slices.Equal(got, want) {
		t.Errorf("of sub_a = %v, want %v", got, want)
	}
	list, err := s.ListDeadLetters(context.Background(), connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: &rivorav1.DeadLetterFilter{SubscriptionId: "sub_a"}}))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, dl := range list.Msg.GetDeadLetters() {
		ids = append(ids, dl.GetEvent().GetEventId())
	}
	if !slices.Equal(ids, []string{"o1", "o3"}) {
		t.Errorf("ListDeadLetters(sub_a) = %v, want o1, o3", ids)
	}
	if _, err := s.DeadLetterStats(context.Background(), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: &rivorav1.DeadLetterFilter{SubscriptionId: "../x"}})); err == nil {
		t.Error("a subscription id that is no id was accepted")
	}
}
