// Package process is the one wrapper of the child processes the e2e tests
// and the benchmarks start (rivora in any role, MinIO), and the one poll
// loop they wait with. It returns errors and never fails a test itself:
// the tests wrap it with testing.TB, the benchmarks report what it says.
package process

import (
	"context"
	"crypto/tls"
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
	"time"

	"github.com/rivora/rivora/testkit/poll"
)

// Options describe a process.
type Options struct {
	Name    string   // for messages: "rivora dev", "rivora agent a1", "minio"
	Bin     string   // the executable
	Args    []string // its arguments
	Env     []string // added to this process's environment
	Addr    string   // HOST:PORT it serves on
	LogPath string   // every run appends its output here
	// OwnGroup puts it in its own process group: a Ctrl-C reaches only
	// the program that started it, which then stops it itself.
	OwnGroup bool
	// TLS: it serves HTTPS, verified with this config (nil: plain HTTP).
	TLS *tls.Config
}

// Proc is one child process that may run several times (Start after it
// ended), its output appended to one log file so a restart keeps the
// history.
//
// It keeps: cmd and done belong to the current run; done is closed once
// that run has exited, after waitErr (and died, when the exit was not
// asked for) were set.
type Proc struct {
	Options

	mu       sync.Mutex
	runs     int
	started  time.Time
	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	stopping bool  // the owner asked the process to end
	died     error // set when a run ended without being asked
}

// New prepares a process; Start runs it.
func New(opts Options) *Proc { return &Proc{Options: opts} }

// Start runs the process (again) and returns at once.
func (p *Proc) Start() error {
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s log: %w", p.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs++
	run := p.runs
	fmt.Fprintf(f, "==== run %d: %s %s\n", run, filepath.Base(p.Bin), strings.Join(p.Args, " "))
	cmd := exec.Command(p.Bin, p.Args...)
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	if p.OwnGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	cmd.Stdout, cmd.Stderr = f, f
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.waitErr, p.stopping = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		if !p.stopping && p.died == nil {
			p.died = fmt.Errorf("%s (run %d) exited on its own while it was needed: %v (ProcessState %v)", p.Name, run, err, cmd.ProcessState)
		}
		p.mu.Unlock()
		f.Close()
		close(done)
	}()
	return nil
}

// URL is http://Addr.
func (p *Proc) URL() string {
	if p.TLS != nil {
		return "https://" + p.Addr
	}
	return "http://" + p.Addr
}

// Started is when the current run started.
func (p *Proc) Started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// Pid is the current run's process id (0 before the first run).
func (p *Proc) Pid() int {
	cmd, _ := p.current()
	if cmd == nil {
		return 0
	}
	return cmd.Process.Pid
}

func (p *Proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// Exited reports whether the current run has exited, and how (nil for
// status 0). A process that never started has not exited.
func (p *Proc) Exited() (error, bool) {
	_, done := p.current()
	if done == nil {
		return nil, false
	}
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.waitErr, true
	default:
		return nil, false
	}
}

// Running reports whether a run is going on.
func (p *Proc) Running() bool {
	_, done := p.current()
	if done == nil {
		return false
	}
	_, exited := p.Exited()
	return !exited
}

// Died reports the first exit nobody asked for (Terminate, Kill).
func (p *Proc) Died() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.died
}

func (p *Proc) markStopping() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
}

// Signal sends sig to the current run (SIGSTOP freezes it, SIGCONT thaws
// it).
func (p *Proc) Signal(sig syscall.Signal) error {
	cmd, _ := p.current()
	if cmd == nil {
		return fmt.Errorf("signal %v to %s: not started", sig, p.Name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, p.Name, err)
	}
	return nil
}

// Terminate sends SIGTERM and waits up to timeout for the exit; then it
// kills the process and reports exited=false. exitErr is how it exited.
func (p *Proc) Terminate(timeout time.Duration) (exitErr error, exited bool, err error) {
	p.markStopping()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return nil, false, err
	}
	cmd, done := p.current()
	select {
	case <-done:
		exitErr, _ = p.Exited()
		return exitErr, true, nil
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		return nil, false, nil
	}
}

// Kill9 sends SIGKILL and waits up to timeout for the process to be gone.
func (p *Proc) Kill9(timeout time.Duration) error {
	if !p.Running() {
		return fmt.Errorf("kill -9: %s is not running", p.Name)
	}
	p.markStopping()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	_, done := p.current()
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s still alive %s after SIGKILL", p.Name, timeout)
	}
}

// Quit sends SIGQUIT, on which a Go program writes every goroutine's
// stack to its standard error (the log) and exits, and waits up to
// timeout; then it kills the process.
func (p *Proc) Quit(timeout time.Duration) {
	p.markStopping()
	cmd, done := p.current()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-done:
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
	}
}

// Kill ends the current run, if any, with SIGKILL and waits for it.
func (p *Proc) Kill() {
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

// Tail returns the last n bytes of the log, from a line start.
func (p *Proc) Tail(n int) string {
	b, _ := os.ReadFile(p.LogPath)
	if len(b) > n {
		b = b[len(b)-n:]
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// WaitReady polls ready every interval until it returns nil; it fails when
// the run exits first, ctx ends or limit passes (0: only ctx bounds it).
func (p *Proc) WaitReady(ctx context.Context, limit, interval time.Duration, ready func() error) error {
	err := poll.Until(ctx, limit, interval, func() error {
		if err, exited := p.Exited(); exited {
			return poll.GiveUp(fmt.Errorf("%s exited before it was ready: %v; its last output:\n%s", p.Name, err, p.Tail(800)))
		}
		return ready()
	})
	var timeout *poll.TimeoutError
	if errors.As(err, &timeout) {
		return fmt.Errorf("%s on %s not ready after %s (last: %v)", p.Name, p.Addr, limit, timeout.Last)
	}
	return err
}

// WaitHealthy waits until GET /healthz answers 200.
func (p *Proc) WaitHealthy(ctx context.Context, limit, interval time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	if p.TLS != nil {
		client.Transport = &http.Transport{TLSClientConfig: p.TLS}
	}
	return p.WaitReady(ctx, limit, interval, func() error { return GetOK(ctx, client, p.URL()+"/healthz") })
}

// GetOK is nil when GET url answers 200.
func GetOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
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
