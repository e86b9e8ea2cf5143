package e2e

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// TestSecondCtrlCStopsAtOnce: Ctrl-C starts rivora dev's graceful stop,
// which waits for an attempt in flight (here one the partner holds for a
// minute); a second Ctrl-C ends the process at once, and nothing it
// acknowledged is lost: started again, it delivers the event.
func TestSecondCtrlCStopsAtOnce(t *testing.T) {
	d := startDev(t, devOptions{})
	d.watchExit = false // the test ends it with signals of its own
	// A held attempt counts as delivered only once answered: the one the
	// killed process sent never is.
	p := partner.New(t, partner.Options{Verify: true, HangUpLoses: true})
	p.SetDelay(time.Minute)
	createDestination(t, d, "held", p, "", &rivorav1.Limits{RatePerSecond: 10, Burst: 1, MaxInFlight: 1, Timeout: durationpb.New(2 * time.Minute)})
	id, err := d.SDK().Publish(ctxTimeout(t, 10*time.Second), sdk.Event{Destination: "held", Customer: "acme", Lane: "u1", Type: "t", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the partner holds the attempt", 30*time.Second, func() bool { return p.Count() > 0 })

	d.signal(syscall.SIGINT)
	// Both lines come from their own goroutines, in no set order.
	poll.True(t, "the graceful stop starts, waits for the attempt and says a second Ctrl-C stops at once", 30*time.Second, func() bool {
		log := d.Tail(64 << 10)
		return strings.Contains(log, "draining: waiting for attempts in flight") && strings.Contains(log, "a second Ctrl-C")
	})
	d.signal(syscall.SIGINT)
	poll.True(t, "rivora dev exits on the second Ctrl-C", 10*time.Second, func() bool { return !d.running() })
	exitErr, _ := d.Exited()
	var status *exec.ExitError
	if !errors.As(exitErr, &status) || !status.Sys().(syscall.WaitStatus).Signaled() || status.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
		t.Fatalf("rivora dev exited with %v; want ended by the second SIGINT (a finished drain exits 0)", exitErr)
	}

	p.SetDelay(0)
	d.Restart()
	p.WaitDelivered(t, []string{id}, 60*time.Second)
}
