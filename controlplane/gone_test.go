package controlplane_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/controlplane"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// An agent's 410 report disables the destination once — paused with the
// exact reason, audited with author rivora — a repeated or stale report
// changes nothing, and resume re-enables it.
func TestReportGoneDisablesOnce(t *testing.T) {
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL, Secret: secret})
	agents := d.Agents
	ctx := context.Background()
	report := func(at time.Time) *rivorav1.ReportGoneResponse {
		t.Helper()
		resp, err := agents.ReportGone(ctx, connect.NewRequest(&rivorav1.ReportGoneRequest{
			AgentName: "a1", DestinationId: "orders", EventId: "ev-1", Status: 410, At: timestamppb.New(at),
		}))
		if err != nil {
			t.Fatalf("ReportGone: %v", err)
		}
		return resp.Msg
	}
	get := func() *rivorav1.Destination {
		t.Helper()
		// List, not Get: Get also asks the (absent) agents for pending.
		resp, err := d.Admin.ListDestinations(ctx, connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
		if err != nil || len(resp.Msg.GetDestinations()) != 1 {
			t.Fatalf("list destinations: %v, %v", resp, err)
		}
		return resp.Msg.GetDestinations()[0]
	}
	goneAt := time.Now()
	first := report(goneAt)
	if !first.GetDisabled() || first.GetVersion() == 0 {
		t.Fatalf("first report: %v, want disabled with a version", first)
	}
	got := get()
	if !got.GetPaused() || !got.GetDisabled() || got.GetPauseReason() != "partner answered 410 Gone" {
		t.Fatalf("after the report: paused %v, disabled %v, reason %q", got.GetPaused(), got.GetDisabled(), got.GetPauseReason())
	}
	if p := got.GetPauses()[len(got.GetPauses())-1]; p.GetAuthor() != controlplane.RivoraAuthor || p.GetReason() != controlplane.GoneReason {
		t.Fatalf("open pause: %v", p)
	}

	again := report(goneAt.Add(time.Millisecond))
	if again.GetDisabled() || again.GetVersion() != first.GetVersion() {
		t.Fatalf("second report: %v, want a no-op at version %d", again, first.GetVersion())
	}
	if n := countAudit(t, d, "destination.disable"); n != 1 {
		t.Fatalf("%d destination.disable audit entries after two reports, want 1", n)
	}
	_, err := d.Admin.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "orders", Reason: "x"}))
	wantCode(t, "pause a disabled destination", err, connect.CodeFailedPrecondition, "disabled: partner answered 410 Gone", "destinations resume orders")

	if _, err := d.Admin.ResumeDestination(ctx, connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: "orders", Author: "ops"})); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.GetPaused() || got.GetDisabled() || got.GetPauseReason() != "" {
		t.Fatalf("after resume: paused %v, disabled %v, reason %q", got.GetPaused(), got.GetDisabled(), got.GetPauseReason())
	}
	// A retry of a report the control plane had already handled, arriving
	// after the operator resumed: stale, it must not disable again.
	if stale := report(goneAt); stale.GetDisabled() || get().GetPaused() {
		t.Fatalf("stale report after resume: %v; destination paused %v", stale, get().GetPaused())
	}
	// The partner answers 410 again after the resume: disabled again.
	if fresh := report(time.Now()); !fresh.GetDisabled() || !get().GetDisabled() {
		t.Fatalf("report after resume: %v", fresh)
	}
	if n := countAudit(t, d, "destination.disable"); n != 2 {
		t.Fatalf("%d destination.disable audit entries, want 2", n)
	}
}

func TestReportGoneValidation(t *testing.T) {
	d := startDev(t, t.TempDir(), false)
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL, Secret: secret})
	agents := d.Agents
	now := timestamppb.Now()
	for _, c := range []struct {
		name     string
		req      *rivorav1.ReportGoneRequest
		code     connect.Code
		mentions string
	}{
		{"not a 410", &rivorav1.ReportGoneRequest{DestinationId: "orders", Status: 404, At: now}, connect.CodeInvalidArgument, "410"},
		{"no time", &rivorav1.ReportGoneRequest{DestinationId: "orders", Status: 410}, connect.CodeInvalidArgument, "at"},
		{"unknown destination", &rivorav1.ReportGoneRequest{DestinationId: "nope", Status: 410, At: now}, connect.CodeNotFound, "nope"},
		{"no destination", &rivorav1.ReportGoneRequest{Status: 410, At: now}, connect.CodeInvalidArgument, "destination_id"},
	} {
		_, err := agents.ReportGone(context.Background(), connect.NewRequest(c.req))
		wantCode(t, c.name, err, c.code, c.mentions)
	}
	if n := countAudit(t, d, "destination.disable"); n != 0 {
		t.Fatalf("refused reports left %d audit entries", n)
	}
}

func countAudit(t *testing.T, d *dev, action string) int {
	t.Helper()
	resp, err := d.Admin.ListAudit(context.Background(), connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range resp.Msg.GetEntries() {
		if e.GetAction() != action {
			continue
		}
		n++
		if e.GetAuthor() != "rivora" || e.GetReason() != "partner answered 410 Gone" {
			t.Errorf("audit %s: author %q reason %q", action, e.GetAuthor(), e.GetReason())
		}
	}
	return n
}
