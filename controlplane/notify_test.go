package controlplane_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/controlplane/notices"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// operator is an operator webhook endpoint that keeps the notices whose
// signature verifies with its secret, and counts the others.
type operator struct {
	srv *httptest.Server

	mu       sync.Mutex
	notices  []map[string]any
	unsigned int
}

func newOperator(t *testing.T, secret string) *operator {
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	o := &operator{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		o.mu.Lock()
		defer o.mu.Unlock()
		var n map[string]any
		if err := v.Verify(r.Header, body); err != nil || json.Unmarshal(body, &n) != nil {
			o.unsigned++
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if n["type"] != r.Header.Get("rivora-event-type") {
			o.unsigned++
		}
		n["webhook-id"] = r.Header.Get("webhook-id")
		o.notices = append(o.notices, n)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

// of returns the notices of one type about one destination.
func (o *operator) of(typ, destination string) []map[string]any {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []map[string]any
	for _, n := range o.notices {
		if n["type"] == typ && n["destinationId"] == destination {
			out = append(out, n)
		}
	}
	return out
}

func TestOperatorNotices(t *testing.T) {
	opSecret, _ := webhook.NewSecret()
	op := newOperator(t, opSecret)
	d := rig.StartDev(t, t.TempDir(), rig.Options{ControlPlane: func(c *controlplane.Config) {
		c.OperatorWebhook, c.OperatorWebhookSecret = op.srv.URL+"/ops", opSecret
	}})
	ctx := context.Background()

	// The reserved destination exists and is the operator's, not a user's.
	poll.True(t, "reserved destination created", 10*time.Second, func() bool {
		_, err := d.Admin.GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: notices.DestinationID}))
		return err == nil
	})
	_, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: notices.DestinationID, Url: sink(t).URL}))
	wantCode(t, "create the reserved destination", err, connect.CodeInvalidArgument, notices.DestinationID, "--operator-webhook")
	_, err = d.Admin.DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: notices.DestinationID}))
	wantCode(t, "delete the reserved destination", err, connect.CodeInvalidArgument, "reserved")
	_, err = d.Admin.UpdateDestination(ctx, connect.NewRequest(&rivorav1.UpdateDestinationRequest{Id: notices.DestinationID, Url: proto.String(sink(t).URL)}))
	wantCode(t, "update the reserved destination", err, connect.CodeInvalidArgument, "reserved")

	// Dead letters: a partner refusing every payload (400), one attempt each → one
	// batched notice with the count and the ids.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadRequest) }))
	t.Cleanup(bad.Close)
	d.Create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: bad.URL, Limits: &rivorav1.Limits{MaxAttempts: 1}})
	ids := map[string]bool{}
	for range 3 {
		resp, err := d.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "l", Type: "t", Payload: []byte(`{}`)}))
		if err != nil {
			t.Fatal(err)
		}
		ids[resp.Msg.GetEventId()] = true
	}
	poll.True(t, "deadletter.created notice", 30*time.Second, func() bool { return len(op.of(notices.DeadLetterCreated, "orders")) > 0 })
	n := op.of(notices.DeadLetterCreated, "orders")[0]
	got, _ := n["eventIds"].([]any)
	if n["count"] != 3.0 || len(got) != 3 {
		t.Fatalf("deadletter notice %v, want count 3 and 3 ids", n)
	}
	for _, id := range got {
		if !ids[id.(string)] {
			t.Errorf("notice names %v, not one of the dead letters %v", id, ids)
		}
	}

	// An override that expires.
	if _, err := d.Admin.SetLimitsOverride(ctx, connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{
		DestinationId: "orders", RatePerSecond: proto.Float64(5), Reason: "test", Author: "me", Ttl: durationpb.New(time.Second),
	})); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "override.expired notice", 15*time.Second, func() bool { return len(op.of(notices.OverrideExpired, "orders")) == 1 })

	// A destination Rivora disabled: an agent reports a 410 Gone.
	gone, err := d.Agents.ReportGone(ctx, connect.NewRequest(&rivorav1.ReportGoneRequest{
		AgentName: d.Name, DestinationId: "orders", EventId: "ev-1", Status: 410, At: timestamppb.Now(),
	}))
	if err != nil || !gone.Msg.GetDisabled() {
		t.Fatalf("ReportGone: %v, %v", gone, err)
	}
	poll.True(t, "destination.disabled notice", 15*time.Second, func() bool { return len(op.of(notices.DestinationDisabled, "orders")) == 1 })
	if dn := op.of(notices.DestinationDisabled, "orders")[0]; dn["reason"] != "partner answered 410 Gone" || dn["message"] == "" || dn["at"] == "" {
		t.Errorf("disabled notice %v", dn)
	}
	// The same trigger again (a re-derivation) is stored once: a later
	// notice about the same destination (same lane, so delivered after any
	// copy) arrives, and no copy came before it.
	first := op.of(notices.DestinationDisabled, "orders")[0]["webhook-id"]
	controlplane.NotifyDestinationDisabled(d.CP, "orders", controlplane.GoneReason, gone.Msg.GetVersion())
	controlplane.NotifyDestinationDisabled(d.CP, "orders", controlplane.GoneReason, gone.Msg.GetVersion()+1)
	poll.True(t, "a later notice", 15*time.Second, func() bool { return len(op.of(notices.DestinationDisabled, "orders")) >= 2 })
	if all := op.of(notices.DestinationDisabled, "orders"); len(all) != 2 || all[1]["webhook-id"] == first {
		t.Errorf("disabled notices %v: want the first once, then the later one", all)
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.unsigned != 0 {
		t.Errorf("%d notices did not verify with the operator secret", op.unsigned)
	}
}
