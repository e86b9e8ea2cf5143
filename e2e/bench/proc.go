package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rivora/rivora/e2e/process"
	"github.com/rivora/rivora/testkit/poll"
)

// proc is a rivora process a benchmark starts (`rivora dev`, a control
// plane, an agent): the shared process.Proc, reporting what goes wrong
// with the tail of its log.
type proc struct {
	*process.Proc
}

// startProc starts bin with args, its output appended to logPath. With
// ownGroup the process gets its own process group: Ctrl-C reaches the
// bench only, which then stops every process itself.
func startProc(bin, name, addr, logPath string, args []string, ownGroup bool) (*proc, error) {
	p := &proc{process.New(process.Options{Name: name, Bin: bin, Args: args, Addr: addr, LogPath: logPath, OwnGroup: ownGroup})}
	progress("starting %s: rivora %s", name, strings.Join(args, " "))
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *proc) url() string { return p.URL() }

// exited reports whether the process has exited, and how.
func (p *proc) exited() (error, bool) { return p.Exited() }

// diedErr reports an exit the bench did not cause.
func (p *proc) diedErr() error {
	if err := p.Died(); err != nil {
		return fmt.Errorf("%v; log tail:\n%s", err, p.Tail(4<<10))
	}
	return nil
}

// waitHealthy polls /healthz every interval until it answers 200 and
// returns the time since the process started. limit 0: only ctx bounds
// the wait.
func (p *proc) waitHealthy(ctx context.Context, limit, interval time.Duration) (time.Duration, error) {
	if err := p.WaitHealthy(ctx, limit, interval); err != nil {
		return 0, fmt.Errorf("%w; log tail:\n%s", err, p.Tail(8<<10))
	}
	if dir := stateDir(p.Args); dir != "" {
		registerAdminToken(dir, p.url())
	}
	return time.Since(p.Started()), nil
}

// terminate sends SIGTERM and waits up to limit for a clean exit; then it
// kills the process. It returns how long the exit took.
func (p *proc) terminate(limit time.Duration) (time.Duration, error) {
	if err, ok := p.Exited(); ok {
		return 0, fmt.Errorf("%s had already exited (%v); log tail:\n%s", p.Name, err, p.Tail(8<<10))
	}
	t0 := time.Now()
	exitErr, exited, err := p.Terminate(limit)
	took := time.Since(t0)
	switch {
	case err != nil:
		return took, err
	case !exited:
		return took, fmt.Errorf("%s did not exit %s after SIGTERM (killed); log tail:\n%s", p.Name, limit, p.Tail(8<<10))
	case exitErr != nil:
		return took, fmt.Errorf("%s exited with %v after SIGTERM; log tail:\n%s", p.Name, exitErr, p.Tail(8<<10))
	}
	return took, nil
}

// stop ends the process if it still runs: SIGTERM, then SIGKILL after
// limit (cleanup: nothing to report).
func (p *proc) stop(limit time.Duration) {
	if p == nil || !p.Running() {
		return
	}
	if _, exited, _ := p.Terminate(limit); !exited {
		progress("%s did not exit %s after SIGTERM; killed it", p.Name, limit)
	}
}

// kill9 kills the process with SIGKILL and waits for it to be gone.
func (p *proc) kill9() error { return p.Kill9(time.Minute) }

// kill ends the process if it still runs (error paths).
func (p *proc) kill() {
	if p != nil {
		p.Kill()
	}
}

// cpu returns the process's user+system CPU time so far (Linux /proc).
func (p *proc) cpu() time.Duration { return processCPU(p.Pid()) }

// systemCPU returns the process's CPU time in the kernel so far: its
// system calls (the stores' writes among them) and page faults.
func (p *proc) systemCPU() time.Duration {
	_, system := processTimes(p.Pid())
	return system
}

// processCPU returns process pid's user+system CPU time so far (Linux
// /proc), 0 when it cannot be read.
func processCPU(pid int) time.Duration {
	user, system := processTimes(pid)
	return user + system
}

// processTimes returns process pid's user and system CPU time so far
// (Linux /proc), zeros when they cannot be read.
func processTimes(pid int) (user, system time.Duration) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// Fields after the command name, which is in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0, 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(utime) * time.Second / clkTck, time.Duration(stime) * time.Second / clkTck
}

// until is poll.Until for the benchmarks: what names the awaited
// condition in a timeout or cancellation.
func until(ctx context.Context, limit, interval time.Duration, what string, check func() error) error {
	err := poll.Until(ctx, limit, interval, check)
	var timeout *poll.TimeoutError
	if errors.As(err, &timeout) || (err != nil && ctx.Err() != nil) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return err
}
