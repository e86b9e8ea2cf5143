package api

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A bad listing request is refused with what to fix; a good one gets the
// defaults.
func TestParseListRequest(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		req  *rivorav1.ListEventsRequest
		want string
	}{
		{&rivorav1.ListEventsRequest{}, "destination_id"},
		{&rivorav1.ListEventsRequest{DestinationId: "orders", LaneKey: "u1"}, "lane_key needs customer_id"},
		{&rivorav1.ListEventsRequest{DestinationId: "orders", Limit: 1001}, "limit must be 1–1000"},
		{&rivorav1.ListEventsRequest{DestinationId: "orders", Limit: -1}, "limit must be 1–1000"},
		{&rivorav1.ListEventsRequest{DestinationId: "orders", Since: timestamppb.New(now), Until: timestamppb.New(now.Add(-time.Hour))}, "since (2026-12-01T10:00:00Z) is after until"},
		{&rivorav1.ListEventsRequest{DestinationId: "orders", State: 42}, "unknown state"},
	} {
		if _, err := parseListRequest(c.req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseListRequest(%v) = %v, want an error saying %q", c.req, err, c.want)
		}
	}
	q, err := parseListRequest(&rivorav1.ListEventsRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	if q.limit != 100 || !q.pending || !q.history.Delivered || !q.history.Dead || q.history.Lane != "u1" {
		t.Fatalf("default query = %+v; want limit 100, every state", q)
	}
	q, _ = parseListRequest(&rivorav1.ListEventsRequest{DestinationId: "orders", State: rivorav1.EventState_EVENT_STATE_DEAD})
	if q.pending || q.history.Delivered || !q.history.Dead {
		t.Fatalf("dead query = %+v; want dead only", q)
	}
}
