package natsd

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// The server's ports, as a ListenError names them.
const (
	ClientPort  = "client"  // Config.ClientListen
	ClusterPort = "cluster" // Config.ClusterListen
	LeafPort    = "leaf"    // Config.LeafListen
)

// ListenError is a port the server cannot open: its address is in use,
// say. Start returns it before the server starts.
type ListenError struct {
	// Port is ClientPort, ClusterPort or LeafPort.
	Port string
	Addr string
	// Err is the OS's reason ("bind: address already in use").
	Err error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("nats %s port %s: %v", e.Port, e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// checkPorts opens and closes every address cfg has the server listen
// on, so that one in use fails Start at once with a ListenError:
// nats-server says so only in its log (off here), and its start then
// waits out readyWait before failing without a reason.
func checkPorts(cfg Config) error {
	for _, p := range []struct{ port, addr string }{
		{ClientPort, cfg.ClientListen}, {ClusterPort, cfg.ClusterListen}, {LeafPort, cfg.LeafListen},
	} {
		if err := checkPort(p.port, p.addr); err != nil {
			return err
		}
	}
	return nil
}

func checkPort(port, addr string) error {
	if _, p, err := net.SplitHostPort(addr); addr == "" || err != nil || p == "0" {
		return nil // none; a malformed one is refused later; port 0 is any free port
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err // without "listen tcp ADDR:", which the error says already
		}
		return &ListenError{Port: port, Addr: addr, Err: err}
	}
	return ln.Close()
}

// readyWait bounds how long Start waits for the server to accept
// connections (a cluster member's JetStream is waited for after).
const readyWait = 30 * time.Second

// awaitReady waits until ns accepts connections, or until it logs a
// fatal error (a port taken between checkPorts and its own listen, a
// store JetStream cannot open), which ends its start: nats-server's own
// wait would last readyWait and say nothing of why.
func awaitReady(ns *server.Server, fatal <-chan string, storeDir string) error {
	deadline := time.Now().Add(readyWait)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-fatal:
			return fmt.Errorf("embedded nats: %s (store %s)", msg, storeDir)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("embedded nats: not ready after %s (store %s)", readyWait, storeDir)
		}
	}
	return nil
}

// serverLog is the embedded server's logger. Its log is off but for two
// things: its fatal errors, kept for awaitReady, and, on an edge, what it
// says of its leaf connection (leafLog).
type serverLog struct {
	fatal chan string // the first fatal error (buffered: 1)
	leaf  *leafLog    // nil without Config.LeafRemotes
}

func newServerLog(leaf *leafLog) *serverLog {
	return &serverLog{fatal: make(chan string, 1), leaf: leaf}
}

func (l *serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	select {
	case l.fatal <- msg:
	default: // the first is kept
	}
	if l.leaf != nil {
		l.leaf.error(msg)
	}
}

func (l *serverLog) Errorf(format string, v ...any) {
	if l.leaf != nil {
		l.leaf.Errorf(format, v...)
	}
}

func (l *serverLog) Warnf(format string, v ...any) {
	if l.leaf != nil {
		l.leaf.Warnf(format, v...)
	}
}

func (l *serverLog) Noticef(format string, v ...any) {
	if l.leaf != nil {
		l.leaf.Noticef(format, v...)
	}
}

func (l *serverLog) Debugf(string, ...any) {}
func (l *serverLog) Tracef(string, ...any) {}
