package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivora/rivora/e2e/process"
)

// proc is a child process of a test (rivora in any role, MinIO): the
// shared process.Proc, whose errors fail the test. It is killed when the
// test ends and its log is printed when the test failed; with watchExit
// set an exit the test did not ask for (stop, kill) fails the test.
type proc struct {
	*process.Proc
	t       testing.TB
	logTail int // bytes of the log printed when the test failed
	// watchExit: an exit nobody asked for fails the test at cleanup.
	watchExit bool
}

// newProc prepares bin with args, serving on addr (start runs it), and
// registers its cleanup. Callers may adjust the fields before start.
func newProc(t testing.TB, name, bin, addr string, args []string) *proc {
	t.Helper()
	p := &proc{t: t, logTail: 32 << 10, watchExit: true, Proc: process.New(process.Options{
		Name: name, Bin: bin, Args: args, Addr: addr, TLS: tlsFor(args),
		LogPath: filepath.Join(t.TempDir(), strings.ReplaceAll(name, " ", "-")+".log"),
	})}
	t.Cleanup(func() {
		p.Kill()
		if err := p.Died(); err != nil && p.watchExit {
			t.Errorf("%v; a graceful \"shutting down\" in its log means it got SIGTERM/SIGINT from outside the test", err)
		}
		if t.Failed() {
			p.dumpLog()
		}
	})
	return p
}

// start runs the process (again) and returns at once.
func (p *proc) start() {
	p.t.Helper()
	if err := p.Start(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) running() bool  { return p.Running() }
func (p *proc) diedErr() error { return p.Died() }
func (p *proc) kill()          { p.Kill() }

// signal sends sig to the process (SIGSTOP freezes it, SIGCONT thaws it).
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// terminate sends SIGTERM and waits up to timeout for the exit; then it
// kills the process and reports exited=false.
func (p *proc) terminate(timeout time.Duration) (exitErr error, exited bool) {
	p.t.Helper()
	exitErr, exited, err := p.Terminate(timeout)
	if err != nil {
		p.t.Fatal(err)
	}
	return exitErr, exited
}

// stop sends SIGTERM and waits for the process to exit (rivora drains and
// hands its work off); after timeout it is killed and the test fails.
func (p *proc) stop(timeout time.Duration) {
	p.t.Helper()
	if _, exited := p.terminate(timeout); !exited {
		p.t.Fatalf("%s did not exit within %s of SIGTERM", p.Name, timeout)
	}
}

// kill9 kills the running process with SIGKILL and fails the test unless
// it is gone within timeout.
func (p *proc) kill9(timeout time.Duration) {
	p.t.Helper()
	if err := p.Kill9(timeout); err != nil {
		p.t.Fatal(err)
	}
}

// waitReady polls ready until it returns nil; the test fails when the
// process exits first or timeout passes.
func (p *proc) waitReady(timeout time.Duration, ready func() error) {
	p.t.Helper()
	if err := p.WaitReady(context.Background(), timeout, 50*time.Millisecond, ready); err != nil {
		p.t.Fatal(err)
	}
}

// waitHealthy waits until GET /healthz answers 200.
func (p *proc) waitHealthy(timeout time.Duration) {
	p.t.Helper()
	if err := p.WaitHealthy(context.Background(), timeout, 50*time.Millisecond); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) dumpLog() {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		p.t.Logf("read %s log: %v", p.Name, err)
		return
	}
	if len(b) > p.logTail {
		b = append([]byte("…(truncated)…\n"), b[len(b)-p.logTail:]...)
	}
	p.t.Logf("---- %s output (%s) ----\n%s\n---- end of %s output ----", p.Name, p.LogPath, b, p.Name)
	p.keepLog()
}

// keepLog copies the whole log of a failed test's process into the
// directory RIVORA_E2E_KEEP_LOGS names, if set (the test's own directory
// is removed with it, and the output keeps only the log's tail).
func (p *proc) keepLog() {
	dir := os.Getenv("RIVORA_E2E_KEEP_LOGS")
	if dir == "" {
		return
	}
	name := strings.NewReplacer("/", "_", " ", "-").Replace(p.t.Name() + "-" + p.Name + ".log")
	b, err := os.ReadFile(p.LogPath)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	if err != nil {
		p.t.Logf("keep %s log in %s: %v", p.Name, dir, err)
	}
}

// errNotYet is a poll.Check condition that does not hold yet.
var errNotYet = errors.New("not yet")
