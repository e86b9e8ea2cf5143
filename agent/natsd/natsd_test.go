package natsd_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/tlsconf"
	"github.com/rivora/rivora/internal/tlsconf/tlstest"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/ports"
)

var password = auth.CellTokenOf(strings.Repeat("c", auth.MinCellTokenBytes)).Derive("nats")

func start(t *testing.T, cfg natsd.Config) *natsd.Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	srv, err := natsd.Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func TestClientPortNeedsTheCredential(t *testing.T) {
	srv := start(t, natsd.Config{Name: "a1", ClientListen: "127.0.0.1:0", Password: password})
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"no credential", nil},
		{"wrong password", []nats.Option{nats.UserInfo(natsd.User, password+"x")}},
		{"wrong user", []nats.Option{nats.UserInfo("admin", password)}},
		{"password as a token", []nats.Option{nats.Token(password)}},
	} {
		nc, err := nats.Connect(srv.ClientURL(), append(tc.opts, nats.NoReconnect())...)
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: connect err %v, want an authorization violation", tc.name, err)
		}
		if nc != nil {
			nc.Close()
		}
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(natsd.User, password))
	if err != nil {
		t.Fatalf("connect with the derived credential: %v", err)
	}
	nc.Close()
	// The agent's own connections are in process and pass it too.
	if err := srv.Conn().Flush(); err != nil {
		t.Errorf("in-process connection: %v", err)
	}
	other, err := srv.Connect("other")
	if err != nil {
		t.Fatalf("another in-process connection: %v", err)
	}
	other.Close()
}

// TestInsecureIsOpen: without a password (--insecure, rivora dev) the
// client port takes anyone, as before the cell token.
func TestInsecureIsOpen(t *testing.T) {
	srv := start(t, natsd.Config{Name: "a1", ClientListen: "127.0.0.1:0"})
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatalf("connect to an open server: %v", err)
	}
	nc.Close()
}

// freeAddrs reserves n loopback addresses for a cluster whose members
// must know each other's before they start.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		addr, err := ports.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, addr)
	}
	return addrs
}

// startCell starts one server per config concurrently (each waits for the
// JetStream cluster, a majority of them), routing to each other.
func startCell(t *testing.T, cfgs []natsd.Config) []*natsd.Server {
	t.Helper()
	addrs := freeAddrs(t, len(cfgs))
	var routes []string
	for _, a := range addrs {
		routes = append(routes, "nats://"+a)
	}
	servers := make([]*natsd.Server, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		cfg.Name, cfg.DataDir, cfg.ClusterListen, cfg.Routes = fmt.Sprintf("a%d", i+1), t.TempDir(), addrs[i], routes
		wg.Go(func() { servers[i], errs[i] = natsd.Start(cfg, slog.New(slog.DiscardHandler)) })
	}
	wg.Wait()
	for i, srv := range servers {
		if srv != nil {
			t.Cleanup(srv.Shutdown)
		}
		if errs[i] != nil {
			t.Fatalf("start a%d: %v", i+1, errs[i])
		}
	}
	return servers
}

// assertRouted checks that a message published on a reaches b.
func assertRouted(t *testing.T, a, b *natsd.Server) {
	t.Helper()
	sub, err := b.Conn().SubscribeSync("routed")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	// The subscription reaches a over the route shortly after the flush:
	// publish until it arrives.
	if poll.Within(10*time.Second, func() bool {
		if err := a.Conn().Publish("routed", []byte("hi")); err != nil {
			t.Fatal(err)
		}
		_, err := sub.NextMsg(100 * time.Millisecond)
		return err == nil
	}) != nil {
		t.Fatal("a message published on a1 never reached a2")
	}
}

func TestRoutesWithTheCredential(t *testing.T) {
	servers := startCell(t, []natsd.Config{{Password: password}, {Password: password}})
	assertRouted(t, servers[0], servers[1])
}

func TestRoutesOverTLS(t *testing.T) {
	ca, cert, key := tlstest.Write(t, t.TempDir())
	files := tlsconf.Files{Cert: cert, Key: key, CA: ca}
	servers := startCell(t, []natsd.Config{
		{Password: password, TLS: files, ClientListen: "127.0.0.1:0"},
		{Password: password, TLS: files},
	})
	assertRouted(t, servers[0], servers[1])

	// The client port is TLS too.
	url := servers[0].ClientURL()
	if !strings.HasPrefix(url, "tls://") {
		t.Errorf("client URL %q, want tls://", url)
	}
	nc, err := nats.Connect(url, nats.UserInfo(natsd.User, password), nats.RootCAs(ca))
	if err != nil {
		t.Fatalf("connect over TLS: %v", err)
	}
	nc.Close()

	// A peer whose certificate another CA signed cannot route.
	_, otherCert, otherKey := tlstest.Write(t, t.TempDir())
	pair, err := tls.LoadX509KeyPair(otherCert, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", servers[1].ClusterAddr(),
		&tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true}) // the stranger's side is not under test
	if err == nil {
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, rerr := bufio.NewReader(conn).ReadString('\n')
		if rerr == nil {
			t.Fatalf("a route with a certificate of another CA got %q, want the TLS handshake refused", line)
		}
		err = rerr
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("route with a certificate of another CA: %v, want a certificate error", err)
	}
}

// TestRouteWithAWrongCredentialIsRefused speaks the route protocol to a
// cell member: a CONNECT with a wrong password is an authorization
// violation.
func TestRouteWithAWrongCredentialIsRefused(t *testing.T) {
	servers := startCell(t, []natsd.Config{{Password: password}, {Password: password}})
	for _, pass := range []string{"", password + "x"} {
		conn, err := net.DialTimeout("tcp", servers[0].ClusterAddr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		r := bufio.NewReader(conn)
		if info, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(info, "INFO ") {
			t.Fatalf("route INFO: %q, %v", info, err)
		}
		fmt.Fprintf(conn, "CONNECT {\"user\":%q,\"pass\":%q,\"name\":\"stranger\",\"cluster\":%q}\r\nPING\r\n", natsd.User, pass, natsd.ClusterName)
		answer, err := r.ReadString('\n')
		conn.Close()
		if !strings.Contains(answer, "Authorization Violation") {
			t.Errorf("route CONNECT with password %q: answer %q (%v), want an authorization violation", pass, answer, err)
		}
	}
}

func TestClusterAdvertiseMustBeHostPort(t *testing.T) {
	_, err := natsd.Start(natsd.Config{DataDir: t.TempDir(), Name: "n", ClusterListen: "127.0.0.1:0", ClusterAdvertise: "no-port"}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "nats cluster advertise") {
		t.Fatalf("Start with ClusterAdvertise \"no-port\": %v; want an error naming the advertise address", err)
	}
}
