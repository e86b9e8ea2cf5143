// Package natsd runs the agent's embedded NATS server with JetStream, the
// durable home of every accepted event, and the agent's one client
// connection to it.
//
// In a cell the server requires a password (derived from the cell token)
// of every client, in process or on the client port, and of every route;
// with TLS files it serves the client port over TLS and the routes over
// mutual TLS, each agent verifying the others' certificates with the CA.
// Such a server has one more user, of the system account, that only the
// process itself can be, for the meta leadership's handover (meta.go).
package natsd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/internal/tlsconf"
)

// Config configures the embedded server.
type Config struct {
	// DataDir holds JetStream's file storage (under DataDir/jetstream).
	DataDir string
	// ClientListen, when set (host:port), exposes the NATS client port over
	// TCP; otherwise the server is reachable only in process.
	ClientListen string
	// Fsync makes an acknowledgement survive a power loss (--fsync).
	// Without it an ack means the write reached the OS: it survives a
	// process crash or kill -9, and a power loss may lose the last
	// unsynced seconds. A single node syncs in groups: its streams run
	// without JetStream's SyncAlways, and every caller that acknowledges
	// a write to its own client (or removes a moved event's source copy)
	// first waits for Server.Syncer's Commit, so one sync answers all the
	// acknowledgements that arrived while the previous one ran. A cluster
	// member keeps JetStream's own SyncAlways (relaxed by NATS to a sync
	// per Raft flush), and so does a system without syncfs(2).
	Fsync bool
	// Name is the server name (the agent's name); unique in a cell.
	Name string
	// ClusterListen (host:port), when set, joins a JetStream cluster: the
	// cell's agents route to each other here and replicate streams.
	ClusterListen string
	// Routes are the other agents' cluster URLs (nats://host:port); this
	// server's own address may be among them.
	Routes []string
	// ClusterAdvertise (host:port), when set, is the route address this
	// server tells its peers about, which they pass on (gossip) to
	// servers that have no route to it yet: set it when the peers reach
	// this server through an address other than ClusterListen (a NAT, a
	// proxy per link). "" advertises the address a peer's route came
	// from, with ClusterListen's port.
	ClusterAdvertise string
	// Password, when set, is required of every connection: of clients as
	// user User (the agent's own in-process connections pass it), and of
	// routes, whose URLs this server dials with it. The agents of a cell
	// derive it from the cell token (auth.CellToken.Derive("nats")); ""
	// leaves the server open to anyone who reaches it (--insecure, and
	// rivora dev).
	Password string
	// TLS, with a certificate, serves the client port (if ClientListen) over
	// TLS, and the routes over mutual TLS: each server presents TLS.Cert and
	// verifies its peers' certificates with TLS.CA (required then).
	TLS tlsconf.Files
	// LeafListen (host:port), when set, accepts leaf-node connections
	// from edges (the cell side of `rivora edge`). With LeafPassword
	// every edge must present it (as user User); with TLS files the leaf
	// port is served over TLS.
	LeafListen   string
	LeafPassword string
	// Domain is this server's JetStream domain: an edge has its own (its
	// streams stay its own across the leaf connection, and the cell
	// reaches them as "$JS.<domain>.API"); "" for a cell's agents.
	Domain string
	// LeafRemotes (nats-leaf://HOST:PORT), when set, connect this server
	// to a cell as a leaf node (the edge side), trying them in turn and
	// reconnecting for ever; LeafPassword is presented to the cell.
	LeafRemotes []string
	// LeafHeld starts the server with LeafRemotes configured but not
	// dialled, until JoinLeaf: an edge joins the cell only once its
	// control plane has confirmed that no other running edge has its
	// name (the cell would otherwise drop the other edge's connection
	// for this one's: NATS keeps one leaf connection per server name).
	LeafHeld bool
	// PingInterval (0: nats-server's 2 minutes) is how often the server
	// pings its connections, the leaf connection to a cell included: a
	// silent cut (a WAN that drops packets, closing nothing) is found
	// after about three intervals. An edge sets a few seconds, so that
	// it knows soon that it is cut off.
	PingInterval time.Duration
	// Lock is DataDir's lock (LockDataDir) when the caller took it
	// already: then it stays the caller's, who releases it once nothing
	// of the process uses the dir any more (rivora dev, agent and edge
	// take it first and release it last, after their HTTP server and
	// control plane have stopped too). nil: Start takes it, Shutdown
	// releases it, and so does a Start that fails.
	Lock *DirLock
}

// User is the NATS user of a server with a Password.
const User = "rivora"

// tlsTimeout bounds a TLS handshake on the client port and on routes, in
// seconds (nats-server's unit).
const tlsTimeout = 5

// A route to a peer that went silent (a link that drops packets without
// closing anything) is closed after about routePingInterval ×
// routeMaxPingsOut without an answer, and dialled again until the link
// heals. NATS's default is a minute or more, during which requests a
// queue group answers (a direct get, served by any replica) are still
// sent, at random, to the silent peer, and wait out their timeout there
// while a replica that answers is next door. Five seconds is longer than
// a flapping link's short cuts and than a busy peer's delay, and about
// when the Raft groups elect leaders on the side that kept a quorum.
const (
	routePingInterval = time.Second
	routeMaxPingsOut  = 4
)

// ClusterName is the NATS cluster name of a Rivora cell.
const ClusterName = "rivora"

// Replicas is the stream replica count for a cell of the given size:
// min(3, size).
func Replicas(cellSize int) int { return max(1, min(3, cellSize)) }

// Server is a running embedded NATS server and the agent's connection.
type Server struct {
	ns       *server.Server
	password string
	// system is the password of the system user (meta.go), which
	// only an in-process connection may log in as ("": none).
	system string
	nc     *nats.Conn
	js     jetstream.JetStream
	// syncer is the group commit (nil: none, see Config.Fsync) and
	// closeStore the close of the directory it syncs.
	syncer     *Syncer
	closeStore func() error
	// reach judges from this server's Raft state whether its streams
	// can take a write (Reach).
	reach *Reach
	// lost is closed, lostErr set, when JetStream turned off by itself
	// (lost.go); quit stops that watch at Shutdown, watchDone says it
	// stopped.
	lost    chan struct{}
	lostErr atomic.Pointer[error]
	quit    chan struct{}
	// shutdownOnce makes Shutdown idempotent (quit is closed once).
	shutdownOnce sync.Once
	// lock, taken by Start (nil: the caller's, Config.Lock), keeps every
	// other server off the data dir until Shutdown.
	lock      *DirLock
	watchDone chan struct{}
	log       *slog.Logger
	// storeDir is JetStream's store directory.
	storeDir string
	// leafLog keeps the server's last error about its leaf connection to
	// a cell (nil without Config.LeafRemotes).
	leafLog *leafLog
	// leafMu orders JoinLeaf and LeaveLeaf; opts are the server's
	// options, which they reload with the leaf remote enabled or not,
	// and leafOn whether it is.
	leafMu sync.Mutex
	opts   *server.Options
	leafOn atomic.Bool
}

// Start takes the data dir's lock (unless the caller holds it, cfg.Lock), starts
// the server, waits until it accepts connections and connects in process.
// A data dir another server has open is refused (ErrDataDirInUse): two
// servers on one store overwrite each other's files, and lose events
// either acknowledged. A port it cannot open (one in use) is refused at
// once, as a *ListenError, and so is any fatal error of the server's own
// start.
func Start(cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.Lock != nil {
		if filepath.Clean(cfg.Lock.Dir()) != filepath.Clean(cfg.DataDir) {
			return nil, fmt.Errorf("embedded nats: the lock given is on %s, not on the data dir %s", cfg.Lock.Dir(), cfg.DataDir)
		}
		return startLocked(cfg, log)
	}
	lock, err := LockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	srv, err := startLocked(cfg, log)
	if err != nil {
		lock.Release()
		return nil, err
	}
	srv.lock = lock
	return srv, nil
}

// startLocked is Start, the data dir locked.
func startLocked(cfg Config, log *slog.Logger) (*Server, error) {
	if err := checkPorts(cfg); err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.DataDir, "jetstream"),
		NoSigs:     true,
		NoLog:      true,
		// Large batches of PubAcks and purges are normal here.
		MaxPending:   256 << 20,
		PingInterval: cfg.PingInterval,
	}
	clientListen := cfg.ClientListen
	if clientListen == "" && cfg.ClusterListen != "" {
		// nats-server starts routing only once its client port listens
		// (DontListen would leave the routes closed): a cluster member
		// without one listens on a loopback port nobody is told of.
		clientListen = "127.0.0.1:0"
	}
	if clientListen == "" {
		opts.DontListen = true
	} else {
		host, port, err := splitHostPort("nats listen", clientListen)
		if err != nil {
			return nil, err
		}
		opts.Host, opts.Port = host, port
		if cfg.TLS.Enabled() {
			if opts.TLSConfig, err = tlsconf.Server(cfg.TLS.Cert, cfg.TLS.Key); err != nil {
				return nil, fmt.Errorf("nats client port: %w", err)
			}
			opts.TLSTimeout = tlsTimeout
		}
	}
	var system string // the system user's password (meta.go)
	if cfg.Password != "" {
		var err error
		if system, err = systemAccess(opts, &server.User{Username: User, Password: cfg.Password}); err != nil {
			return nil, err
		}
	}
	if cfg.ClusterListen != "" {
		host, port, err := splitHostPort("nats cluster", cfg.ClusterListen)
		if err != nil {
			return nil, err
		}
		opts.Cluster = server.ClusterOpts{Name: ClusterName, Host: host, Port: port, Advertise: cfg.ClusterAdvertise,
			PingInterval: routePingInterval, MaxPingsOut: routeMaxPingsOut}
		if cfg.ClusterAdvertise != "" {
			if _, _, err := splitHostPort("nats cluster advertise", cfg.ClusterAdvertise); err != nil {
				return nil, err
			}
		}
		if cfg.Password != "" {
			// Routes dialled to this server must present it; the ones
			// it dials carry it in their URLs (and the routes it learns
			// from its peers get it from here).
			opts.Cluster.Username, opts.Cluster.Password = User, cfg.Password
		}
		if cfg.TLS.Enabled() {
			if opts.Cluster.TLSConfig, err = tlsconf.Mutual(cfg.TLS.Cert, cfg.TLS.Key, cfg.TLS.CA); err != nil {
				return nil, fmt.Errorf("nats routes: %w", err)
			}
			opts.Cluster.TLSTimeout = tlsTimeout
		}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Scheme != "nats" || u.Host == "" || u.User != nil {
				return nil, fmt.Errorf("nats route %q: want nats://HOST:PORT (the credential comes from the cell token)", r)
			}
			if cfg.Password != "" {
				u.User = url.UserPassword(User, cfg.Password)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	if err := leafOptions(opts, cfg); err != nil {
		return nil, err
	}
	syncStore, closeStore, err := groupCommit(cfg, opts.StoreDir, log)
	if err != nil {
		return nil, err
	}
	opts.SyncAlways = cfg.Fsync && syncStore == nil
	srv, err := start(opts, cfg, system, log)
	if err != nil {
		if closeStore != nil {
			_ = closeStore()
		}
		return nil, err
	}
	if syncStore != nil {
		srv.syncer, srv.closeStore = newSyncer(syncStore), closeStore
	}
	log.Info("embedded nats ready", "store", opts.StoreDir, "client_url", clientURL(srv.ns, cfg.ClientListen), "fsync", cfg.Fsync,
		"group_commit", syncStore != nil, "password", cfg.Password != "", "tls", cfg.TLS.Enabled())
	return srv, nil
}

// groupCommit opens the sync of the store a single node with Fsync
// commits in groups (Syncer), and the close of what that sync holds
// open; nil, nil where there is no group commit (no Fsync, a cluster
// member, or no syncfs(2)): Start then keeps Fsync with JetStream's
// SyncAlways.
func groupCommit(cfg Config, storeDir string, log *slog.Logger) (syncStore, closeStore func() error, err error) {
	if !cfg.Fsync || cfg.ClusterListen != "" {
		return nil, nil, nil
	}
	if err := os.MkdirAll(storeDir, 0o750); err != nil {
		return nil, nil, fmt.Errorf("create the store directory %s: %w", storeDir, err)
	}
	syncStore, closeStore, err = storeSync(storeDir)
	if err != nil {
		log.Warn("no group commit: every write is synced on its own (JetStream SyncAlways)", "error", err)
		return nil, nil, nil
	}
	return syncStore, closeStore, nil
}

// start starts the server and connects to it in process; system is the
// system user's password ("": none).
func start(opts *server.Options, cfg Config, system string, log *slog.Logger) (*Server, error) {
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	var leaf *leafLog
	if len(cfg.LeafRemotes) > 0 {
		leaf = &leafLog{}
	}
	logger := newServerLog(leaf)
	ns.SetLoggerV2(logger, false, false, false)
	ns.Start()
	if err := awaitReady(ns, logger.fatal, opts.StoreDir); err != nil {
		ns.Shutdown()
		return nil, err
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.Name(cfg.Name), nats.MaxReconnects(-1), credential(cfg.Password))
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
	s := &Server{ns: ns, password: cfg.Password, system: system, nc: nc, js: js, reach: newReach(ns), log: log, leafLog: leaf, storeDir: opts.StoreDir, opts: opts,
		lost: make(chan struct{}), quit: make(chan struct{}), watchDone: make(chan struct{})}
	go s.watchJetStream(opts.StoreDir, log)
	s.leafOn.Store(len(cfg.LeafRemotes) > 0 && !cfg.LeafHeld)
	return s, nil
}

// leafOptions sets the leaf-node side of opts: a listener for edges
// (the cell), or the remotes to a cell (an edge), and the JetStream
// domain.
func leafOptions(opts *server.Options, cfg Config) error {
	opts.JetStreamDomain = cfg.Domain
	if cfg.LeafListen != "" {
		host, port, err := splitHostPort("nats leaf", cfg.LeafListen)
		if err != nil {
			return err
		}
		opts.LeafNode.Host, opts.LeafNode.Port = host, port
		// Edges reach the cell at the addresses they are given
		// (--cell-leaf): a load balancer, a NAT, a tunnel. Advertised,
		// the cell's own leaf addresses would be tried first on every
		// reconnect, addresses an edge may not reach, or reach around
		// the path the operator chose.
		opts.LeafNode.NoAdvertise = true
		if cfg.LeafPassword != "" {
			opts.LeafNode.Username, opts.LeafNode.Password = User, cfg.LeafPassword
		}
		if cfg.TLS.Enabled() {
			if opts.LeafNode.TLSConfig, err = tlsconf.Server(cfg.TLS.Cert, cfg.TLS.Key); err != nil {
				return fmt.Errorf("nats leaf port: %w", err)
			}
			opts.LeafNode.TLSTimeout = tlsTimeout
		}
	}
	if len(cfg.LeafRemotes) == 0 {
		return nil
	}
	remote := &server.RemoteLeafOpts{}
	for _, r := range cfg.LeafRemotes {
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "nats-leaf" && u.Scheme != "tls") || u.Host == "" || u.User != nil {
			return fmt.Errorf("cell leaf %q: want nats-leaf://HOST:PORT (the credential comes from the cell token)", r)
		}
		if cfg.LeafPassword != "" {
			u.User = url.UserPassword(User, cfg.LeafPassword)
		}
		remote.URLs = append(remote.URLs, u)
	}
	if cfg.TLS.CA != "" {
		roots, err := tlsconf.Pool(cfg.TLS.CA)
		if err != nil {
			return fmt.Errorf("cell leaf: %w", err)
		}
		remote.TLS, remote.TLSConfig, remote.TLSTimeout = true, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, tlsTimeout
	}
	remote.Disabled = cfg.LeafHeld
	opts.LeafNode.Remotes = []*server.RemoteLeafOpts{remote}
	opts.LeafNode.ReconnectInterval = time.Second
	// Every failed attempt is logged (leafLog keeps the last; the edge
	// rate-limits what it says), not only the first of the first
	// connection's 3,600.
	opts.ConnectErrorReports, opts.ReconnectErrorReports = 1, 1
	return nil
}

// credential is the connect option passing password ("" = none).
func credential(password string) nats.Option {
	if password == "" {
		return func(*nats.Options) error { return nil }
	}
	return nats.UserInfo(User, password)
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
	if p == 0 {
		// Port 0 is any free port, as for Go's listeners (nats-server
		// reads 0 as its default port, or no cluster at all).
		p = server.RANDOM_PORT
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
	return nats.Connect("", nats.InProcessServer(s.ns), nats.Name(name), credential(s.password))
}

// ClientURL is the client port's URL ("" when the server is in process
// only).
func (s *Server) ClientURL() string {
	if s.ns.Addr() == nil {
		return ""
	}
	return s.ns.ClientURL()
}

// ClusterAddr is the address the routes listen on ("" outside a cluster).
func (s *Server) ClusterAddr() string {
	if a := s.ns.ClusterAddr(); a != nil {
		return a.String()
	}
	return ""
}

// Syncer is the store's group commit: nil without Fsync (its Commit then
// returns at once), and nil where JetStream's SyncAlways keeps Fsync (a
// cluster member), whose acknowledgements are synced already.
func (s *Server) Syncer() *Syncer { return s.syncer }

// Shutdown drains the connection, stops the server and releases the data
// dir's lock if Start took it (a caller's, Config.Lock, stays held):
// another server may open the dir once it returns. Calls after
// the first do nothing (a test's cleanup may follow the agent's own stop).
func (s *Server) Shutdown() { s.shutdownOnce.Do(s.shutdown) }

// lostShutdownWait bounds the server's own shutdown once JetStream turned
// off by itself. nats-server 2.15.2 can deadlock a stream's store on a
// full disk: a purge holds the store's lock while it flushes, and the
// flush's write error takes the same lock again to rebuild the store's
// state (fileStore.PurgeEx → msgBlock.flushPendingMsgs →
// fileStore.rebuildState); its Shutdown then waits for that stream's
// goroutine for ever (seen in the chaos hour: an agent with a full disk
// never exited). Its store is gone, so nothing is left to flush: the
// agent exits without it and its supervisor starts it again on its data.
const lostShutdownWait = 20 * time.Second

func (s *Server) shutdown() {
	defer s.lock.Release()
	// Our own shutdown turns JetStream off too: stop watching first.
	close(s.quit)
	<-s.watchDone
	if s.nc != nil {
		_ = s.nc.Drain()
		s.nc.Close()
	}
	stopped := make(chan struct{})
	go func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		close(stopped)
	}()
	if s.LostErr() == nil {
		<-stopped
	} else {
		select {
		case <-stopped:
		case <-time.After(lostShutdownWait):
			// Its JetStream is off: it writes no more to the store, and
			// the lock goes with the rest (the process exits next).
			s.log.Error("the embedded nats server did not stop within its bound after its store was disabled; going without it (nothing is left to flush)", "bound", lostShutdownWait)
			return
		}
	}
	s.syncer.close()
	if s.closeStore != nil {
		_ = s.closeStore()
	}
}

// JoinLeaf dials the cell's leaf port (Config.LeafRemotes) of a server
// started with Config.LeafHeld, and keeps reconnecting to it; a server
// joined already is left as it is.
func (s *Server) JoinLeaf() error { return s.setLeaf(true) }

// LeaveLeaf closes the leaf connection to the cell and dials it no more
// (until JoinLeaf).
func (s *Server) LeaveLeaf() error { return s.setLeaf(false) }

// LeafJoined tells whether the server dials the cell's leaf port: false
// before JoinLeaf on a server started with Config.LeafHeld, and after
// LeaveLeaf.
func (s *Server) LeafJoined() bool { return s.leafOn.Load() }

// setLeaf enables or disables the leaf remote, by a reload of the
// server's options with its Disabled flag changed: nats-server closes
// the connection of a remote disabled, and dials one enabled.
func (s *Server) setLeaf(on bool) error {
	s.leafMu.Lock()
	defer s.leafMu.Unlock()
	if len(s.opts.LeafNode.Remotes) == 0 {
		return errors.New("nats: no leaf remote (Config.LeafRemotes)")
	}
	if s.leafOn.Load() == on {
		return nil
	}
	next := s.opts.Clone()
	// Clone shares the remotes, which the server's own state points to:
	// the reload finds a change only in a copy.
	remote := *next.LeafNode.Remotes[0]
	remote.Disabled = !on
	next.LeafNode.Remotes = []*server.RemoteLeafOpts{&remote}
	if err := s.ns.ReloadOptions(next); err != nil {
		what := "open"
		if !on {
			what = "close"
		}
		return fmt.Errorf("nats: %s the leaf connection to the cell: %w", what, err)
	}
	s.opts = next
	s.leafOn.Store(on)
	return nil
}

// LeafConnections counts the leaf-node connections: on a cell's server the
// edges connected now, on an edge's server 1 while it reaches the cell.
func (s *Server) LeafConnections() int { return s.ns.NumLeafNodes() }
