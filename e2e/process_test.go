package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is the one wrapper of a child process the e2e tests start: rivora
// (any subcommand) or MinIO. Every run appends its output to one log file,
// so a restarted process keeps its history. The process is killed when the
// test ends and its log is printed when the test failed; with watchExit set
// an exit the test did not ask for (stop, kill) fails the test.
//
// It keeps: cmd and done belong to the current run; done is closed once
// that run has exited, after waitErr (and died, when it was not asked to
// stop) were set.
type proc struct {
	t       testing.TB
	name    string // for messages: "rivora dev", "rivora agent a1", "minio"
	bin     string
	args    []string
	env     []string // added to the test's environment
	addr    string   // HOST:PORT it serves on
	logPath string
	logTail int // bytes of the log printed when the test failed
	// watchExit: an exit nobody asked for fails the test at cleanup.
	watchExit bool
	runs      int

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	stopping bool  // the test asked the process to end
	died     error // set when it ended without being asked
}

// newProc prepares bin with args, serving on addr (start runs it), and
// registers its cleanup. Callers may adjust the fields before start.
func newProc(t testing.TB, name, bin, addr string, args []string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, bin: bin, args: args, addr: addr, logTail: 32 << 10, watchExit: true,
		logPath: filepath.Join(t.TempDir(), strings.ReplaceAll(name, " ", "-")+".log")}
	t.Cleanup(func() {
		p.kill()
		if err := p.diedErr(); err != nil && p.watchExit {
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
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatalf("open %s log: %v", p.name, err)
	}
	p.runs++
	run := p.runs
	fmt.Fprintf(f, "==== run %d: %s %s\n", run, filepath.Base(p.bin), strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.waitErr, p.stopping = cmd, done, nil, false
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		if !p.stopping && p.died == nil {
			p.died = fmt.Errorf("%s (run %d) exited on its own while the test needed it: %v (ProcessState %v)", p.name, run, err, cmd.ProcessState)
		}
		p.mu.Unlock()
		f.Close()
		close(done)
	}()
}

func (p *proc) URL() string { return "http://" + p.addr }

// current returns the current run's command and exit channel.
func (p *proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

func (p *proc) running() bool {
	_, done := p.current()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// exitErr is how the last run ended (nil while it runs or for status 0).
func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// diedErr reports an exit the test did not ask for.
func (p *proc) diedErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.died
}

// markStopping records that the test is ending the process.
func (p *proc) markStopping() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
}

// signal sends sig to the process (SIGSTOP freezes it, SIGCONT thaws it).
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	cmd, _ := p.current()
	if err := cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to %s: %v", sig, p.name, err)
	}
}

// terminate sends SIGTERM and waits up to timeout for the exit; then it
// kills the process and reports exited=false.
func (p *proc) terminate(timeout time.Duration) (exitErr error, exited bool) {
	p.t.Helper()
	p.markStopping()
	cmd, done := p.current()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatalf("SIGTERM %s: %v", p.name, err)
	}
	select {
	case <-done:
		return p.exitErr(), true
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		return nil, false
	}
}

// stop sends SIGTERM and waits for the process to exit (rivora drains and
// hands its work off); after timeout it is killed and the test fails.
func (p *proc) stop(timeout time.Duration) {
	p.t.Helper()
	if _, exited := p.terminate(timeout); !exited {
		p.t.Fatalf("%s did not exit within %s of SIGTERM", p.name, timeout)
	}
}

// kill9 kills the running process with SIGKILL and fails the test unless
// it is gone within timeout.
func (p *proc) kill9(timeout time.Duration) {
	p.t.Helper()
	if !p.running() {
		p.t.Fatalf("kill -9: %s is not running", p.name)
	}
	p.markStopping()
	cmd, done := p.current()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatalf("kill -9 %s: %v", p.name, err)
	}
	select {
	case <-done:
	case <-time.After(timeout):
		p.t.Fatalf("%s still alive %s after SIGKILL", p.name, timeout)
	}
}

// kill ends the process, if it runs, with SIGKILL and waits for it.
func (p *proc) kill() {
	p.markStopping()
	cmd, done := p.current()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// waitReady polls ready until it returns nil; the test fails when the
// process exits first or timeout passes.
func (p *proc) waitReady(timeout time.Duration, ready func() error) {
	p.t.Helper()
	_, done := p.current()
	err := poll(timeout, 50*time.Millisecond, func() error {
		select {
		case <-done:
			p.t.Fatalf("%s exited before it was ready: %v", p.name, p.exitErr())
		default:
		}
		return ready()
	})
	if err != nil {
		p.t.Fatalf("%s on %s not ready after %s (last: %v)", p.name, p.addr, timeout, err)
	}
}

// waitHealthy waits until GET /healthz answers 200.
func (p *proc) waitHealthy(timeout time.Duration) {
	p.t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	p.waitReady(timeout, func() error { return getOK(client, p.URL()+"/healthz") })
}

// getOK is nil when GET url answers 200.
func getOK(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func (p *proc) dumpLog() {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		p.t.Logf("read %s log: %v", p.name, err)
		return
	}
	if len(b) > p.logTail {
		b = append([]byte("…(truncated)…\n"), b[len(b)-p.logTail:]...)
	}
	p.t.Logf("---- %s output (%s) ----\n%s\n---- end of %s output ----", p.name, p.logPath, b, p.name)
}

// poll is the one poll loop of the e2e tests: it calls check every
// interval until check returns nil, and returns check's last error when
// timeout passes first. check may fail the test itself for what no
// waiting can fix.
func poll(timeout, interval time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}

// errNotYet is a waitFor condition that does not hold yet.
var errNotYet = errors.New("not yet")

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := poll(timeout, 20*time.Millisecond, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}
