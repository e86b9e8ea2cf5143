package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// fakeLanes serves LaneService, recording requests.
type fakeLanes struct {
	rivorav1connect.UnimplementedLaneServiceHandler
	mu    sync.Mutex
	lists []*rivorav1.ListLanesRequest
	skips []*rivorav1.SkipLaneHeadRequest
}

func startFakeLanes(t *testing.T) (*fakeLanes, string) {
	f := &fakeLanes{}
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewLaneServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeLanes) ListLanes(_ context.Context, req *connect.Request[rivorav1.ListLanesRequest]) (*connect.Response[rivorav1.ListLanesResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists = append(f.lists, proto.Clone(req.Msg).(*rivorav1.ListLanesRequest))
	if req.Msg.GetDestinationId() != "orders" {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("destination nope: not found"))
	}
	return connect.NewResponse(&rivorav1.ListLanesResponse{Matched: 3, Truncated: true, Lanes: []*rivorav1.LaneSummary{{
		DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42", Depth: 7, HeadEventId: "ev-1", HeadAttempts: 3,
		LastStatus: 500, LastError: "HTTP 500:\nboom", HeadSince: timestamppb.New(time.Now().Add(-90 * time.Second)),
		NextAttemptAt: fixedTime, State: rivorav1.LaneState_LANE_STATE_WAITING,
	}}}), nil
}

func (f *fakeLanes) SkipLaneHead(_ context.Context, req *connect.Request[rivorav1.SkipLaneHeadRequest]) (*connect.Response[rivorav1.SkipLaneHeadResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.skips = append(f.skips, proto.Clone(req.Msg).(*rivorav1.SkipLaneHeadRequest))
	return connect.NewResponse(&rivorav1.SkipLaneHeadResponse{EventId: "ev-1", Remaining: 6}), nil
}

func TestLanesList(t *testing.T) {
	f, url := startFakeLanes(t)
	r := mustSucceed(t, run(t, url, "", "lanes", "list", "--destination", "orders", "--customer", "acme", "--stuck", "--limit", "1"))
	want := &rivorav1.ListLanesRequest{DestinationId: "orders", CustomerId: "acme", Stuck: true, Limit: 1}
	if len(f.lists) != 1 || !proto.Equal(f.lists[0], want) {
		t.Fatalf("requests %v, want %v", f.lists, want)
	}
	for _, s := range []string{"CUSTOMER", "LAST STATUS", "WAITING", "NEXT ATTEMPT", "user-42", "ev-1", "500", "1m30s", "2026-03-01T12:00:00.000Z", "HTTP 500: boom", "3 lanes match"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("table lacks %q:\n%s", s, r.stdout)
		}
	}
	r = mustSucceed(t, run(t, url, "", "lanes", "list", "--destination", "orders", "-o", "json"))
	var got struct {
		Lanes []map[string]any `json:"lanes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.Lanes) != 1 {
		t.Fatalf("json %q: %v", r.stdout, err)
	}
	for _, k := range []string{"customerId", "laneKey", "depth", "headEventId", "headAttempts", "lastStatus", "lastError", "headSince", "nextAttemptAt"} {
		if _, ok := got.Lanes[0][k]; !ok {
			t.Errorf("json lane lacks %s: %v", k, got.Lanes[0])
		}
	}
	if f.lists[1].GetLimit() != 100 {
		t.Errorf("default limit sent = %d, want 100", f.lists[1].GetLimit())
	}
	for _, args := range [][]string{{"lanes", "list"}, {"lanes", "list", "--destination", "orders", "--limit", "0"}, {"lanes", "list", "orders"}} {
		if r := run(t, url, "", args...); r.code != exitUsage {
			t.Errorf("%v: exit %d (%s), want usage error", args, r.code, r.stderr)
		}
	}
	if r := run(t, url, "", "lanes", "list", "--destination", "nope"); r.code != exitError || !strings.Contains(r.stderr, "destinations list") {
		t.Errorf("unknown destination: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestLanesSkip(t *testing.T) {
	f, url := startFakeLanes(t)
	r := mustSucceed(t, run(t, url, "", "lanes", "skip", "orders", "--customer", "acme", "--lane", "user-42", "--reason", "poison", "--head", "ev-1"))
	want := &rivorav1.SkipLaneHeadRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42", Reason: "poison", HeadEventId: "ev-1"}
	if len(f.skips) != 1 || !proto.Equal(f.skips[0], want) {
		t.Fatalf("requests %v, want %v", f.skips, want)
	}
	if !strings.Contains(r.stdout, "ev-1") || !strings.Contains(r.stdout, "reason manual") || !strings.Contains(r.stdout, "6 events left") {
		t.Fatalf("output %q", r.stdout)
	}
	for _, args := range [][]string{
		{"lanes", "skip", "--customer", "acme", "--lane", "l", "--reason", "r"},
		{"lanes", "skip", "orders", "--lane", "l", "--reason", "r"},
		{"lanes", "skip", "orders", "--customer", "acme", "--reason", "r"},
		{"lanes", "skip", "orders", "--customer", "acme", "--lane", "l"},
	} {
		if r := run(t, url, "", args...); r.code != exitUsage {
			t.Errorf("%v: exit %d (%s), want usage error", args, r.code, r.stderr)
		}
	}
	if len(f.skips) != 1 {
		t.Fatalf("a refused command line still called the server: %v", f.skips)
	}
}

// NEXT ATTEMPT says what holds a paused lane rather than "due".
func TestNextAttemptOfAPausedLane(t *testing.T) {
	due := &rivorav1.LaneSummary{State: rivorav1.LaneState_LANE_STATE_DUE}
	if got := nextAttempt(due); got != "due" {
		t.Errorf("a due lane: %q", got)
	}
	due.Paused = "destination paused"
	if got := nextAttempt(due); got != "held: destination paused" {
		t.Errorf("a due lane of a paused destination: %q, want held: destination paused", got)
	}
	due.State = rivorav1.LaneState_LANE_STATE_IN_FLIGHT
	if got := nextAttempt(due); got != "in flight" {
		t.Errorf("an attempt in flight when the pause came: %q, want in flight", got)
	}
}

// NEXT ATTEMPT says "held: destination parked" for a lane its parked
// destination holds (held), due or waiting, and "due" for a due lane it
// does not hold.
func TestNextAttemptOfAHeldLane(t *testing.T) {
	for _, state := range []rivorav1.LaneState{rivorav1.LaneState_LANE_STATE_DUE, rivorav1.LaneState_LANE_STATE_WAITING} {
		if got := nextAttempt(&rivorav1.LaneSummary{State: state, Held: true}); got != "held: destination parked" {
			t.Errorf("a %v lane its parked destination holds: %q, want held: destination parked", state, got)
		}
	}
	if got := nextAttempt(&rivorav1.LaneSummary{State: rivorav1.LaneState_LANE_STATE_DUE, LastStatus: 429}); got != "due" {
		t.Errorf("a due lane whose head last got a 429: %q, want due", got)
	}
}
