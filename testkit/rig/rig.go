// Package rig is the one in-process rig of Rivora's tests: `rivora dev`
// (a control plane and, unless left out, an agent following it) served over
// HTTP on 127.0.0.1, exactly as the dev command wires them (a cell token
// in memory, keys of their own), with testkit/poll to wait. Its
// clients call with the bootstrap admin token; Token mints others. The agent and control plane
// tests both use it; e2e tests run the real binaries instead.
package rig

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/ssrf"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/syncbuf"
)

// Options shape a Dev; the zero value is an agent named "dev" with 4
// delivery workers over 4 partitions.
type Options struct {
	// NoAgent runs the control plane alone (no fleet).
	NoAgent bool
	// Name is the agent's name (default "dev").
	Name string
	// Workers is the agent's delivery worker count (default 4).
	Workers int
	// ControlPlane, when set, adjusts the control plane's config; Agent
	// the agent's. Both allow loopback destinations (the tests' partners
	// are on 127.0.0.1) unless these change their Guard.
	ControlPlane func(*controlplane.Config)
	Agent        func(*agent.Config)
	// Token, when set, is the token the clients call with, instead of the
	// bootstrap admin token (which a restart does not write again).
	Token string
}

// Dev is `rivora dev` in process: a control plane with its state under
// Dir/controlplane and an agent with its data under Dir, on one HTTP
// server. Stop (also run at cleanup) ends both and checks that their Runs
// returned cleanly.
type Dev struct {
	T      testing.TB
	Dir    string
	Name   string
	URL    string
	Agent  *agent.Agent // nil with NoAgent
	CP     *controlplane.ControlPlane
	Admin  rivorav1connect.AdminServiceClient
	Ingest rivorav1connect.IngestServiceClient
	Events rivorav1connect.EventServiceClient
	Tokens rivorav1connect.TokenServiceClient
	// Agents calls the control plane's AgentService with the cell token,
	// as an agent does.
	Agents rivorav1connect.AgentServiceClient

	// Cell is the cell token; AdminToken the bootstrap admin token (read
	// from AdminTokenPath).
	Cell           auth.CellToken
	AdminToken     string
	AdminTokenPath string

	srv    *httptest.Server
	cancel context.CancelFunc
	done   chan error
	runs   int
}

// StartDev starts a Dev on dir and, with an agent, waits until the agent
// applied its first config. Logs are printed only if the test fails.
func StartDev(t testing.TB, dir string, opts Options) *Dev {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "dev"
	}
	if opts.Workers == 0 {
		opts.Workers = 4
	}
	log := Logger(t, dir)
	mux := http.NewServeMux()
	d := &Dev{T: t, Dir: dir, Name: opts.Name, srv: httptest.NewServer(mux), done: make(chan error, 2)}
	d.URL = d.srv.URL
	cell, err := auth.NewCellToken()
	if err != nil {
		t.Fatalf("cell token: %v", err)
	}
	d.Cell, d.AdminTokenPath = cell, filepath.Join(dir, "admin.token")
	cfg := controlplane.Config{StateDir: filepath.Join(dir, "controlplane"), Partitions: 4, Keys: auth.NewKeys(cell), AdminTokenPath: d.AdminTokenPath, OperatorSecretPath: filepath.Join(dir, "operator-webhook.secret"), Guard: ssrf.New(ssrf.Loopback)}
	if opts.ControlPlane != nil {
		opts.ControlPlane(&cfg)
	}
	cp, err := controlplane.New(cfg, log.With("component", "controlplane"))
	if err != nil {
		d.srv.Close()
		t.Fatalf("controlplane.New: %v", err)
	}
	d.CP = cp
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	if !opts.NoAgent {
		acfg := agent.Config{Name: opts.Name, DataDir: dir, ControlPlaneURL: d.URL, AdvertiseURL: d.URL, Workers: opts.Workers, Version: "test", Keys: auth.NewKeys(cell), Guard: ssrf.New(ssrf.Loopback)}
		if opts.Agent != nil {
			opts.Agent(&acfg)
		}
		d.Agent, err = agent.New(ctx, acfg, log)
		if err != nil {
			cancel()
			d.srv.Close()
			t.Fatalf("agent.New: %v", err)
		}
	}
	cp.Handle(mux)
	if d.Agent != nil {
		d.Agent.Handle(mux)
		d.start(func() error { return d.Agent.Run(ctx) })
	}
	d.start(func() error { return cp.Run(ctx) })
	t.Cleanup(d.Stop)
	token := opts.Token
	if token == "" {
		data, err := os.ReadFile(d.AdminTokenPath)
		if err != nil {
			t.Fatalf("bootstrap admin token: %v", err)
		}
		d.AdminToken = strings.TrimSpace(string(data))
		token = d.AdminToken
	}
	as := d.As(token)
	d.Admin = rivorav1connect.NewAdminServiceClient(d.srv.Client(), d.URL, as)
	d.Ingest = rivorav1connect.NewIngestServiceClient(d.srv.Client(), d.URL, as)
	d.Events = rivorav1connect.NewEventServiceClient(d.srv.Client(), d.URL, as)
	d.Tokens = rivorav1connect.NewTokenServiceClient(d.srv.Client(), d.URL, as)
	d.Agents = rivorav1connect.NewAgentServiceClient(d.srv.Client(), d.URL, d.As(cell.String()))
	if d.Agent != nil {
		poll.True(t, "agent ready (first config applied)", 10*time.Second, d.Agent.Ready)
	}
	return d
}

// As is the client option that calls with token.
func (d *Dev) As(token string) connect.ClientOption {
	return connect.WithInterceptors(auth.Bearer(token))
}

// HTTPClient is the client of the rig's server.
func (d *Dev) HTTPClient() *http.Client { return d.srv.Client() }

// Token creates an API token with role (and a publisher's customers)
// through TokenService, and waits until the agent has it.
func (d *Dev) Token(role rivorav1.Role, customers ...string) string {
	d.T.Helper()
	resp, err := d.Tokens.CreateToken(context.Background(), connect.NewRequest(&rivorav1.CreateTokenRequest{
		Name: fmt.Sprintf("test-%s-%d", auth.RoleName(role), time.Now().UnixNano()), Role: role, Customers: customers,
	}))
	if err != nil {
		d.T.Fatalf("create a %s token: %v", auth.RoleName(role), err)
	}
	if d.Agent != nil {
		d.WaitApplied(resp.Msg.GetVersion())
	}
	return resp.Msg.GetToken()
}

func (d *Dev) start(run func() error) {
	d.runs++
	go func() { d.done <- run() }()
}

// Stop cancels both Runs and waits for them to return; idempotent.
func (d *Dev) Stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	for range d.runs {
		select {
		case err := <-d.done:
			if err != nil {
				d.T.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			d.T.Errorf("Run did not return 30s after its context ended")
			return
		}
	}
	d.srv.Close()
}

// Create registers destinations through the admin API and waits until the
// agent has applied them; it returns the last config version.
func (d *Dev) Create(reqs ...*rivorav1.CreateDestinationRequest) uint64 {
	d.T.Helper()
	var version uint64
	for _, req := range reqs {
		resp, err := d.Admin.CreateDestination(context.Background(), connect.NewRequest(req))
		if err != nil {
			d.T.Fatalf("create destination %s: %v", req.GetId(), err)
		}
		version = resp.Msg.GetVersion()
	}
	if d.Agent != nil {
		d.WaitApplied(version)
	}
	return version
}

// WaitApplied waits until the agent reports config version (or later).
func (d *Dev) WaitApplied(version uint64) {
	d.T.Helper()
	poll.True(d.T, fmt.Sprintf("agent applied config version %d", version), 10*time.Second, func() bool {
		resp, err := d.Admin.GetConfigStatus(context.Background(), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
		if err != nil {
			return false
		}
		for _, a := range resp.Msg.GetAgents() {
			if a.GetName() == d.Name && a.GetConnected() && a.GetAppliedVersion() >= version {
				return true
			}
		}
		return false
	})
}

// Logger is a debug-level logger whose lines are printed, headed by name,
// only if the test fails.
func Logger(t testing.TB, name string) *slog.Logger {
	logs := &syncbuf.Buffer{} // printed only if the test fails
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", name, logs.String())
		}
	})
	return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
