package cli

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/syncbuf"
)

// ctrlC runs command as Run does (awaitExit), with Ctrl-C sent on sigs.
type ctrlC struct {
	sigs   chan os.Signal
	exited chan int
	errOut *syncbuf.Buffer
}

func startCtrlC(errOut *syncbuf.Buffer, command func(ctx context.Context, intr *interrupt) int) *ctrlC {
	ctx, cancel := context.WithCancel(context.Background())
	r := &ctrlC{sigs: make(chan os.Signal), exited: make(chan int, 1), errOut: errOut}
	intr := newInterrupt()
	code := make(chan int, 1)
	go func() { code <- command(ctx, intr) }()
	go func() { r.exited <- awaitExit(code, r.sigs, cancel, intr, r.errOut); cancel() }()
	return r
}

// press sends a Ctrl-C, taken once awaitExit reads it (or lost if it
// returned).
func (r *ctrlC) press(t *testing.T) {
	t.Helper()
	select {
	case r.sigs <- os.Interrupt:
	case <-time.After(10 * time.Second):
		t.Fatal("a Ctrl-C not taken within 10s: rivoractl has exited")
	}
}

func (r *ctrlC) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case code := <-r.exited:
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("rivoractl did not exit within 10s")
		return 0
	}
}

// A command that waits on something Ctrl-C does not end (stdin, a server
// that does not let go) stops at the second Ctrl-C, at once: both were
// ignored, and only closing stdin or killing rivoractl ended it.
func TestASecondCtrlCStopsAtOnce(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	cancelled := make(chan struct{})
	r := startCtrlC(&syncbuf.Buffer{}, func(ctx context.Context, _ *interrupt) int {
		<-ctx.Done()
		close(cancelled)
		<-stuck // what it waits on does not see ctx
		return exitOK
	})
	r.press(t)
	<-cancelled // the first Ctrl-C cancels the command
	select {
	case code := <-r.exited:
		t.Fatalf("exited %d at the first Ctrl-C, while the command still ran", code)
	default:
	}
	r.press(t)
	if code := r.exitCode(t); code != exitInterrupted {
		t.Fatalf("exit %d after a second Ctrl-C, want %d", code, exitInterrupted)
	}
	if got := r.errOut.String(); got != "rivoractl: stopped at once (Ctrl-C again)\n" {
		t.Fatalf("stderr %q, want one line saying it stopped at once", got)
	}
}

// A command in its graceful stop (env.stopping) is told of the second
// Ctrl-C and returns by itself, with its own exit code (listen prints the
// requests it cut short first); a third Ctrl-C stops rivoractl at once
// if it does not.
func TestASecondCtrlCCutsAGracefulStopShort(t *testing.T) {
	for _, returns := range []bool{true, false} {
		stuck := make(chan struct{})
		errOut := &syncbuf.Buffer{}
		r := startCtrlC(errOut, func(ctx context.Context, intr *interrupt) int {
			<-ctx.Done()
			e := &env{errOut: errOut, intr: intr}
			if e.stopping("waiting for what it does", nil, time.Hour) {
				return exitError // done never closes
			}
			if !returns {
				<-stuck
			}
			return exitOK
		})
		r.press(t)
		poll.True(t, "the command in its graceful stop", 10*time.Second, func() bool {
			return strings.Contains(r.errOut.String(), "Stopping: waiting for what it does; Ctrl-C again to stop now.")
		})
		r.press(t)
		if !returns {
			r.press(t)
		}
		want := exitOK
		if !returns {
			want = exitInterrupted
		}
		if code := r.exitCode(t); code != want {
			t.Errorf("a graceful stop that returns after the second Ctrl-C: %v: exit %d, want %d", returns, code, want)
		}
		if strings.Contains(errOut.String(), "stopped at once") != !returns {
			t.Errorf("a graceful stop that returns: %v: stderr %q", returns, errOut.String())
		}
		close(stuck)
	}
}
