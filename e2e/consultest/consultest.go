// Package consultest runs a real Consul server (v1.14.11, built from the
// nested module tools/consul) on 127.0.0.1 for tests: one server with its
// own data directory, so it can be stopped and restarted with its sessions,
// locks and KV intact.
package consultest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/ports"
)

// Version is the Consul release the tests run.
const Version = "v1.14.11"

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary returns the path of the consul binary in $(go env GOPATH)/bin,
// building it from tools/consul first if it is missing (10–20 minutes cold
// on 2 cores; `make servers` does the same).
func Binary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() { binPath, binErr = findOrBuild(t.Logf) })
	if binErr != nil {
		t.Fatalf("consul binary: %v", binErr)
	}
	return binPath
}

func findOrBuild(logf func(string, ...any)) (string, error) {
	gopath, err := goEnv("GOPATH")
	if err != nil {
		return "", err
	}
	if i := strings.IndexByte(gopath, os.PathListSeparator); i >= 0 {
		gopath = gopath[:i]
	}
	bin := filepath.Join(gopath, "bin", "consul")
	if out, err := exec.Command(bin, "version").Output(); err == nil && bytes.Contains(out, []byte("Consul "+Version)) {
		return bin, nil
	}
	gomod, err := goEnv("GOMOD")
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("consul is missing and the project's go.mod was not found (%v): run `make servers`", err)
	}
	toolDir := filepath.Join(filepath.Dir(gomod), "tools", "consul")
	logf("consul %s not found at %s: building it from %s (10–20 minutes the first time)", Version, bin, toolDir)
	cmd := exec.Command("go", "build", "-o", bin, "github.com/hashicorp/consul")
	cmd.Dir = toolDir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build consul in %s: %v\n%s", toolDir, err, out)
	}
	logf("built %s in %s", bin, time.Since(start).Round(time.Second))
	return bin, nil
}

func goEnv(key string) (string, error) {
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", key, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Server is one Consul server process.
type Server struct {
	t       testing.TB // nil for a Server from Launch
	bin     string
	dataDir string
	ports   [4]int // http, serf lan, serf wan, server rpc
	// HTTPAddr is host:port of the HTTP API.
	HTTPAddr string
	// extraArgs are appended to consul's arguments.
	extraArgs []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// Start starts a single-server Consul cell with its data under a temporary
// directory and waits until it has a leader and its node is registered.
// It is stopped when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), dataDir: t.TempDir()}
	for i := range s.ports {
		s.ports[i] = freePort(t)
	}
	s.HTTPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ports[0]))
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Launch is Start for programs that are not tests (e.g. e2e/bench): it
// finds or builds the consul binary (logging through logf), starts a
// single-server cell with its data and log (consul.log) under dataDir, which
// must exist, and waits until it has a leader and its node is registered.
// The caller stops it with Stop and removes dataDir. On such a Server, Start
// panics on failure instead of failing a test.
func Launch(dataDir string, logf func(string, ...any)) (*Server, error) {
	binOnce.Do(func() { binPath, binErr = findOrBuild(logf) })
	if binErr != nil {
		return nil, fmt.Errorf("consul binary: %w", binErr)
	}
	// Without a fixed gRPC TLS port (8503 by default), so it can run next
	// to another Consul on the machine, e.g. a test's.
	s := &Server{bin: binPath, dataDir: dataDir, extraArgs: []string{"-grpc-tls-port", "-1"}}
	for i := range s.ports {
		p, err := ports.Free()
		if err != nil {
			return nil, err
		}
		s.ports[i] = p
	}
	s.HTTPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ports[0]))
	if err := s.start(); err != nil {
		s.Stop() // it may run without becoming ready
		return nil, err
	}
	return s, nil
}

// URL is the HTTP API's base URL.
func (s *Server) URL() string { return "http://" + s.HTTPAddr }

// Start (re)starts the process on the same ports and data directory.
func (s *Server) Start() {
	if s.t == nil {
		if err := s.start(); err != nil {
			panic(err)
		}
		return
	}
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("consul is already running")
	}
	logFile, err := os.OpenFile(filepath.Join(s.dataDir, "consul.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := []string{"agent", "-server", "-bootstrap-expect", "1",
		"-node", "rivora-test", "-data-dir", filepath.Join(s.dataDir, "data"),
		"-bind", "127.0.0.1", "-client", "127.0.0.1", "-advertise", "127.0.0.1",
		"-http-port", strconv.Itoa(s.ports[0]), "-serf-lan-port", strconv.Itoa(s.ports[1]),
		"-serf-wan-port", strconv.Itoa(s.ports[2]), "-server-port", strconv.Itoa(s.ports[3]),
		"-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1", "-log-level", "warn",
		// Fast elections: a restarted single server leads again in about a second.
		"-hcl", "performance { raft_multiplier = 1 }"}
	cmd := exec.Command(s.bin, append(args, s.extraArgs...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start consul: %v", err)
	}
	s.cmd, s.log, s.done = cmd, logFile, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.done)
	if err := s.waitReady(60 * time.Second); err != nil {
		return fmt.Errorf("consul at %s: %v\n%s", s.HTTPAddr, err, s.Log())
	}
	return nil
}

// Stop stops the process (SIGTERM, then SIGKILL after 10 s). Its data stays.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.log.Close()
	s.cmd = nil
}

// Log returns the server's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dataDir, "consul.log"))
	return string(b)
}

func (s *Server) waitReady(timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	err := poll.Until(context.Background(), timeout, 100*time.Millisecond, func() error {
		select {
		case <-s.done:
			return poll.GiveUp(errors.New("consul exited"))
		default:
		}
		return s.ready(client)
	})
	var te *poll.TimeoutError
	if errors.As(err, &te) {
		return fmt.Errorf("not ready after %s: %v", timeout, te.Last)
	}
	return err
}

// ready: a leader is elected and this node is in the catalog (sessions
// need it).
func (s *Server) ready(client *http.Client) error {
	for _, path := range []string{"/v1/status/leader", "/v1/catalog/node/rivora-test"} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, s.URL()+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		text := strings.TrimSpace(body.String())
		if resp.StatusCode != http.StatusOK || text == `""` || text == "null" || text == "" {
			return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, text)
		}
	}
	return nil
}

func freePort(t testing.TB) int {
	t.Helper()
	p, err := ports.Free()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
