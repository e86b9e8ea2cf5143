package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// waitFlag is on every command that changes configuration: a new one for
// each command, since parsing writes into a flag (one shared by every
// command raced when two apps parsed at once, as parallel tests do).
func waitFlag() *ucli.BoolFlag {
	return &ucli.BoolFlag{Name: "wait", Usage: "return only once every connected agent has applied the change, and say how long that took (Ctrl-C stops waiting; the change stays made)"}
}

// waitTimeout bounds --wait.
const waitTimeout = 30 * time.Second

// afterChange honours --wait for a change that produced config version.
// The report goes to stdout, or to stderr when stdout carries JSON.
func (e *env) afterChange(c *ucli.Context, version uint64) error {
	if !c.Bool("wait") {
		return nil
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(c.Context, waitTimeout)
	defer cancel()
	for {
		resp, err := e.admin().GetConfigStatus(ctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
		if c.Context.Err() != nil {
			return waitStopped(version)
		}
		if err != nil {
			return callFailed("wait for agents", err, nil)
		}
		connected, behind := 0, 0
		var away []string // registered agents not connected: they apply it when they reconnect
		for _, a := range resp.Msg.GetAgents() {
			if !a.GetConnected() {
				if a.GetAppliedVersion() < version {
					away = append(away, a.GetName())
				}
				continue
			}
			connected++
			if a.GetAppliedVersion() < version {
				behind++
			}
		}
		if connected > 0 && behind == 0 {
			out := e.out
			if e.output == "json" {
				out = e.errOut
			}
			noun := "agents"
			if connected == 1 {
				noun = "agent"
			}
			say(out, "config version %d applied by %d %s in %s%s\n", version, connected, noun, time.Since(start).Round(time.Millisecond), awayNote(away))
			return nil
		}
		select {
		case <-ctx.Done():
			if c.Context.Err() != nil {
				return waitStopped(version)
			}
			if connected == 0 {
				return fmt.Errorf("wait for agents: no agent is connected to the control plane after %s", waitTimeout)
			}
			return fmt.Errorf("wait for agents: %d of %d agents had not applied config version %d after %s", behind, connected, version, waitTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitStopped says that Ctrl-C stopped --wait, not the change.
func waitStopped(version uint64) error {
	return fmt.Errorf("stopped waiting (Ctrl-C); the change is made (config version %d), and agents apply it as they receive it: `rivoractl agents list` shows the version each has applied", version)
}

// awayNote names the registered agents that are not connected ("" when
// none): they apply the change when they reconnect. A customer's token
// sees no names, only how many.
func awayNote(away []string) string {
	if len(away) == 0 {
		return ""
	}
	named := slices.DeleteFunc(slices.Clone(away), func(n string) bool { return n == "" })
	names := strings.Join(named, ", ")
	if len(named) < len(away) {
		names = fmt.Sprintf("%d", len(away)) // a customer's token sees no names
	}
	return fmt.Sprintf("; not connected, so not yet: %s (they apply it when they reconnect)", names)
}
