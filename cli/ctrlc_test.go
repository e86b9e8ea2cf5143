package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
	"github.com/rivora/rivora/testkit/syncbuf"
)

// interrupted runs rivoractl against d until until(stdout) holds, then
// presses Ctrl-C (its context ends) and returns what it printed and its
// exit code.
func interrupted(t *testing.T, d *rig.Dev, until func(stdout string) bool, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	code := make(chan int, 1)
	full := append([]string{"rivoractl", "--server", d.URL, "--token", d.AdminToken}, args...)
	go func() { code <- runContext(ctx, newInterrupt(), full, strings.NewReader(""), out, errOut) }()
	if err := poll.Within(20*time.Second, func() bool { return until(out.String()) || len(code) > 0 }); err != nil || len(code) > 0 {
		t.Fatalf("rivoractl %s not under way (%v): stdout %q, stderr %q", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	cancel()
	select {
	case c := <-code:
		return result{stdout: out.String(), stderr: errOut.String(), code: c}
	case <-time.After(10 * time.Second):
		t.Fatalf("rivoractl %s still running 10s after Ctrl-C", strings.Join(args, " "))
		return result{}
	}
}

// Ctrl-C stops a replay at once and says how far it got, and that the
// same command resumes: it said only "replay interrupted". The replay run
// again sends the rest, skipping what the first re-accepted.
func TestReplayCtrlCSaysWhereItResumes(t *testing.T) {
	p := partner.New(t, partner.Options{Answer: func(r partner.Request) int {
		if r.Header.Get("rivora-replay") == "true" {
			return 200
		}
		return 400 // each event dies at its first attempt
	}})
	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	d.Create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: p.URL(), Limits: &rivorav1.Limits{
		RatePerSecond: 100, Burst: 100, MaxAttempts: 1, MaxInFlight: 4, Window: durationpb.New(time.Hour), Timeout: durationpb.New(2 * time.Second)}})
	for i := range 3 {
		if _, err := d.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: "orders", CustomerId: "acme", LaneKey: fmt.Sprintf("user-%d", i), Type: "order.created", Payload: []byte(`{}`)})); err != nil {
			t.Fatal(err)
		}
	}
	archive := rivorav1connect.NewArchiveServiceClient(d.HTTPClient(), d.URL, d.As(d.AdminToken))
	poll.True(t, "3 dead letters archived", 20*time.Second, func() bool {
		resp, err := archive.DeadLetterStats(context.Background(), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}))
		return err == nil && resp.Msg.GetTotal() == 3
	})

	// At 0.001/s the first is sent at once, the next in 1,000 s.
	r := interrupted(t, d, func(out string) bool { return strings.Contains(out, "replay: 1/3") },
		"replay", "--destination", "orders", "--rate", "0.001")
	assertFailure(t, r, exitError, "replay stopped (Ctrl-C) with 1 of 3 dead letters done (1 replayed, 0 skipped")
	if !strings.Contains(r.stderr, "run the same command again to resume") {
		t.Errorf("stderr %q: want it to say the same command resumes", r.stderr)
	}

	again := mustSucceed(t, run(t, d.URL, "", "--token", d.AdminToken, "replay", "--destination", "orders"))
	if !strings.Contains(again.stdout, "Replayed 2 of 3 dead letters") || !strings.Contains(again.stdout, "(1 skipped") {
		t.Errorf("the replay run again printed %q; want the other 2 replayed and the first skipped", again.stdout)
	}
}

// Ctrl-C stops --wait, not the change, and says so: it said "wait for
// agents: interrupted before Rivora answered", as if the change might not
// be made.
func TestWaitCtrlCSaysTheChangeIsMade(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true}) // no agent applies anything: --wait waits
	d.Create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: "http://127.0.0.1:9/hook"})
	paused := func(out string) bool { return strings.Contains(out, "Paused destination orders") }
	r := interrupted(t, d, paused, "destinations", "pause", "orders", "--reason", "partner maintenance", "--wait")
	assertFailure(t, r, exitError, "stopped waiting (Ctrl-C); the change is made (config version")
}
