package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Ctrl-C is the same for every command (Run). The first ends the
// command's context: a call in flight is cancelled, and a long-running
// command stops gracefully and says how (a replay where it resumes, --wait
// that the change is made, listen what it still waits for: stopping). The
// second stops rivoractl at once, whatever the command still waits on
// (stdin, a server that does not let go), unless the command is in its
// graceful stop: it then cuts that short and returns at once itself
// (listen prints the requests it cut short), and only a third stops
// rivoractl.

// exitInterrupted is the exit code of a stop at once (128 + SIGINT, as a
// shell reports a process its Ctrl-C ended).
const exitInterrupted = 130

// interrupt is the second Ctrl-C, as commands see it.
type interrupt struct {
	again chan struct{} // closed at the second Ctrl-C
	once  sync.Once
	// stopping counts the commands in their graceful stop (env.stopping),
	// which a second Ctrl-C cuts short.
	stopping atomic.Int32
}

func newInterrupt() *interrupt { return &interrupt{again: make(chan struct{})} }

// second closes again and reports whether a command is in its graceful
// stop, which it now cuts short. It counts the graceful stops before it
// closes again: a stop that again ends leaves at once (env.stopping), and
// counted after the close it could have left already, so that rivoractl
// stopped at once instead of waiting for the command's own exit code.
func (i *interrupt) second() bool {
	inStop := i.stopping.Load() > 0
	i.once.Do(func() { close(i.again) })
	return inStop
}

// awaitExit returns the command's exit code (code), cancelling it at the
// first Ctrl-C (sigs) and returning exitInterrupted at the next one that
// no graceful stop takes (interrupt.second) without waiting for it.
func awaitExit(code <-chan int, sigs <-chan os.Signal, cancel func(), intr *interrupt, stderr io.Writer) int {
	for n := 1; ; n++ {
		select {
		case c := <-code:
			return c
		case <-sigs:
		}
		switch {
		case n == 1:
			cancel()
		case n == 2 && intr.second():
			// The command cuts its stop short and returns.
		default:
			fmt.Fprintln(stderr, "rivoractl: stopped at once (Ctrl-C again)")
			return exitInterrupted
		}
	}
}

// stopping is a long-running command's graceful stop, once the first
// Ctrl-C ended its context: it says on stderr what the command does now
// (doing: "waiting up to 5s for 1 request being answered"), then waits
// until done is closed, limit has passed, or a second Ctrl-C, after which
// the command stops what is left at once. It reports whether done closed
// first.
func (e *env) stopping(doing string, done <-chan struct{}, limit time.Duration) bool {
	var again <-chan struct{} // nil (never) without Run's interrupts: RunContext
	if e.intr != nil {
		e.intr.stopping.Add(1)
		defer e.intr.stopping.Add(-1)
		again = e.intr.again
	}
	fmt.Fprintf(e.errOut, "Stopping: %s; Ctrl-C again to stop now.\n", doing)
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
	case <-again:
	}
	return false
}
