package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// proc is the one wrapper of a rivora process the benchmarks start (`rivora
// dev`, a control plane, an agent), with its output in a log file.
//
// It keeps: done is closed once the process exited, after waitErr was set;
// ended is set before the bench itself ends the process, so diedErr tells
// an exit the bench caused from one it did not.
type proc struct {
	name    string // for messages: "rivora dev", "rivora agent a1"
	addr    string
	logPath string
	started time.Time
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	ended   atomic.Bool
}

// startProc starts bin with args, its output appended to logPath. With
// ownGroup the process gets its own process group: Ctrl-C reaches the
// bench only, which then stops every process itself.
func startProc(bin, name, addr, logPath string, args []string, ownGroup bool) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "==== rivora %s\n", strings.Join(args, " "))
	p := &proc{name: name, addr: addr, logPath: logPath, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if ownGroup {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	progress("starting %s: rivora %s", name, strings.Join(args, " "))
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) url() string { return "http://" + p.addr }

// exited reports whether the process has exited, and how.
func (p *proc) exited() (error, bool) {
	select {
	case <-p.done:
		return p.waitErr, true
	default:
		return nil, false
	}
}

// diedErr reports an exit the bench did not cause.
func (p *proc) diedErr() error {
	if err, ok := p.exited(); ok && !p.ended.Load() {
		return fmt.Errorf("%s exited on its own (%v); log tail:\n%s", p.name, err, p.tail(4<<10))
	}
	return nil
}

// tail returns the last n bytes of the log, from a line start.
func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > n {
		b = b[len(b)-n:]
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// waitHealthy polls /healthz every interval until it answers 200 and
// returns the time since the process started. limit 0: only ctx bounds
// the wait.
func (p *proc) waitHealthy(ctx context.Context, limit, interval time.Duration) (time.Duration, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	err := poll(ctx, limit, interval, p.name+" on "+p.addr+" healthy", func() error {
		if err, ok := p.exited(); ok {
			return giveUp(fmt.Errorf("%s exited before it was healthy (%v)", p.name, err))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url()+"/healthz", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w; log tail:\n%s", err, p.tail(8<<10))
	}
	return time.Since(p.started), nil
}

// terminate sends SIGTERM and waits up to limit for a clean exit; then it
// kills the process. It returns how long the exit took.
func (p *proc) terminate(limit time.Duration) (time.Duration, error) {
	if err, ok := p.exited(); ok {
		return 0, fmt.Errorf("%s had already exited (%v); log tail:\n%s", p.name, err, p.tail(8<<10))
	}
	p.ended.Store(true)
	t0 := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	select {
	case <-p.done:
		if p.waitErr != nil {
			return time.Since(t0), fmt.Errorf("%s exited with %v after SIGTERM; log tail:\n%s", p.name, p.waitErr, p.tail(8<<10))
		}
		return time.Since(t0), nil
	case <-time.After(limit):
		p.cmd.Process.Kill()
		<-p.done
		return time.Since(t0), fmt.Errorf("%s did not exit %s after SIGTERM (killed); log tail:\n%s", p.name, limit, p.tail(8<<10))
	}
}

// stop ends the process if it still runs: SIGTERM, then SIGKILL after
// limit (cleanup: nothing to report).
func (p *proc) stop(limit time.Duration) {
	if p == nil {
		return
	}
	if _, ok := p.exited(); ok {
		return
	}
	p.ended.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(limit):
		progress("%s did not exit %s after SIGTERM; killing it", p.name, limit)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill9 kills the process with SIGKILL and waits for it to be gone.
func (p *proc) kill9() error {
	p.ended.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// kill ends the process if it still runs (error paths).
func (p *proc) kill() {
	if p == nil {
		return
	}
	if _, ok := p.exited(); ok {
		return
	}
	p.ended.Store(true)
	p.cmd.Process.Kill()
	<-p.done
}

// cpu returns the process's user+system CPU time so far (Linux /proc).
func (p *proc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clkTck
}

// stopPolling marks a poll check's error that no waiting can fix.
type stopPolling struct{ err error }

func (s stopPolling) Error() string { return s.err.Error() }

// giveUp makes poll return err at once.
func giveUp(err error) error { return stopPolling{err} }

// poll is the one wait loop of the benchmarks: it calls check every
// interval until check returns nil, gives up (giveUp), ctx ends or limit
// passes (0: no limit). what names the awaited condition in its errors,
// which carry check's last error.
func poll(ctx context.Context, limit, interval time.Duration, what string, check func() error) error {
	var deadline time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	for {
		err := check()
		var stop stopPolling
		switch {
		case err == nil:
			return nil
		case errors.As(err, &stop):
			return stop.err
		case !deadline.IsZero() && time.Now().After(deadline):
			return fmt.Errorf("%s: not within %s (last: %v)", what, limit, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}
