// Package natsd runs the agent's embedded NATS server with JetStream, the
// durable home of every accepted event, and the agent's one client
// connection to it.
package natsd

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config configures the embedded server.
type Config struct {
	// DataDir holds JetStream's file storage (under DataDir/jetstream).
	DataDir string
	// ClientListen, when set (host:port), exposes the NATS client port over
	// TCP; otherwise the server is reachable only in process.
	ClientListen string
	// SyncAlways fsyncs every write before it is acknowledged. Without it an
	// ack means the write reached the OS: it survives a process crash or
	// kill -9, and a power loss may lose the last unsynced seconds.
	SyncAlways bool
	// Name is the server name (the agent's name); unique in a cell.
	Name string
	// ClusterListen (host:port), when set, joins a JetStream cluster: the
	// cell's agents route to each other here and replicate streams.
	ClusterListen string
	// Routes are the other agents' cluster URLs (nats://host:port); this
	// server's own address may be among them.
	Routes []string
}

// ClusterName is the NATS cluster name of a Rivora cell.
const ClusterName = "rivora"

// Replicas is the stream replica count for a cell of the given size:
// min(3, size).
func Replicas(cellSize int) int { return max(1, min(3, cellSize)) }

// Server is a running embedded NATS server and the agent's connection.
type Server struct {
	ns *server.Server
	nc *nats.Conn
	js jetstream.JetStream
}

// Start starts the server, waits until it accepts connections and connects
// in process.
func Start(cfg Config, log *slog.Logger) (*Server, error) {
	opts := &server.Options{
		ServerName: cfg.Name,
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.DataDir, "jetstream"),
		SyncAlways: cfg.SyncAlways,
		NoSigs:     true,
		NoLog:      true,
		// Large batches of PubAcks and purges are normal here.
		MaxPending: 256 << 20,
	}
	if cfg.ClientListen == "" {
		opts.DontListen = true
	} else {
		host, port, err := splitHostPort("nats listen", cfg.ClientListen)
		if err != nil {
			return nil, err
		}
		opts.Host, opts.Port = host, port
	}
	if cfg.ClusterListen != "" {
		host, port, err := splitHostPort("nats cluster", cfg.ClusterListen)
		if err != nil {
			return nil, err
		}
		opts.Cluster = server.ClusterOpts{Name: ClusterName, Host: host, Port: port}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Scheme != "nats" || u.Host == "" {
				return nil, fmt.Errorf("nats route %q: want nats://HOST:PORT", r)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 30s (store %s)", opts.StoreDir)
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.Name(cfg.Name), nats.MaxReconnects(-1))
	if err != nil {
		ns.Shutdown()
		return nil, fmt.Errorf("connect to embedded nats: %w", err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(65536), jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		nc.Close()
		ns.Shutdown()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if cfg.ClusterListen != "" {
		if err := awaitJetStream(js, log, 2*time.Minute); err != nil {
			nc.Close()
			ns.Shutdown()
			return nil, err
		}
	}
	log.Info("embedded nats ready", "store", opts.StoreDir, "client_url", clientURL(ns, cfg.ClientListen), "sync_always", cfg.SyncAlways)
	return &Server{ns: ns, nc: nc, js: js}, nil
}

func splitHostPort(what, addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%s address %q: want HOST:PORT: %w", what, addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("%s address %q: bad port %q", what, addr, port)
	}
	return host, p, nil
}

// awaitJetStream waits until the cluster's JetStream answers (a meta
// leader is elected, which needs a majority of the cell's agents).
func awaitJetStream(js jetstream.JetStream, log *slog.Logger, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	next := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jetstream cluster not available after %s (is a majority of the cell's agents up and routed?): %w", timeout, err)
		}
		if time.Now().After(next) {
			log.Info("waiting for the jetstream cluster (a majority of the cell's agents)", "error", err)
			next = time.Now().Add(5 * time.Second)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func clientURL(ns *server.Server, listen string) string {
	if listen == "" {
		return "in-process"
	}
	return ns.ClientURL()
}

// Conn is the agent's connection.
func (s *Server) Conn() *nats.Conn { return s.nc }

// JetStream is the agent's JetStream context.
func (s *Server) JetStream() jetstream.JetStream { return s.js }

// Connect opens another in-process connection (for components that want
// their own flow control).
func (s *Server) Connect(name string) (*nats.Conn, error) {
	return nats.Connect("", nats.InProcessServer(s.ns), nats.Name(name))
}

// Shutdown drains the connection and stops the server.
func (s *Server) Shutdown() {
	if s.nc != nil {
		_ = s.nc.Drain()
		s.nc.Close()
	}
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}
