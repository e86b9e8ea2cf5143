package natsd

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
)

// leafLog is the NATS server's logger on the edge side of a leaf
// connection (Config.LeafRemotes): the server says why it cannot reach
// the cell (a refused dial, 'Authorization Violation', a port that is
// not a leaf port) or why it lost it only in its log, which is otherwise
// off. It keeps the last such line, for the edge to log and report
// (Server.LeafError); the rest of the server's log stays off.
type leafLog struct {
	mu  sync.Mutex
	msg string
	at  time.Time
	// erred is the connection (its log prefix) the last error was about:
	// its close that follows says less ("Client Closed").
	erred string
	// up are the open connections (their log prefixes) that got as far
	// as being up: the server logs nothing else once a connection is
	// up, but what it says of the JetStream domains as it adds it
	// ("JetStream using domains: …"), and nothing of a connection
	// before it is up, but its creation.
	up map[string]bool
}

func (l *leafLog) Errorf(format string, v ...any) { l.error(fmt.Sprintf(format, v...)) }
func (l *leafLog) Warnf(format string, v ...any)  { l.error(fmt.Sprintf(format, v...)) }
func (l *leafLog) Fatalf(format string, v ...any) { l.error(fmt.Sprintf(format, v...)) }
func (l *leafLog) Debugf(string, ...any)          {}
func (l *leafLog) Tracef(string, ...any)          {}

// Noticef keeps a leaf connection's close that no error explained, and
// says whether the connection had been up: a peer that hung up before the
// handshake ("Read Error") is all the server says of a port that speaks
// another protocol, and a link that was up and then cut says only how it
// ended ("Client Closed": the cell closed it, "Stale Connection": its
// pings went unanswered).
func (l *leafLog) Noticef(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	conn, reason, closed := strings.Cut(msg, "Leafnode connection closed: ")
	if !closed {
		l.noteUp(msg)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	wasUp := l.up[conn]
	delete(l.up, conn)
	if strings.HasPrefix(reason, "Server Shutdown") || (conn != "" && conn == l.erred) {
		return
	}
	what := LeafClosedEarly
	if wasUp {
		what = LeafLost
	}
	l.msg, l.at = "leaf connection "+strings.TrimSuffix(conn, " - ")+" "+what+": "+reason, time.Now()
}

// How a LeafError says a leaf connection closed that no error explained
// ("leaf connection 127.0.0.1:7422 - lid:6 lost after it was up: Stale
// Connection - Remote: cell"): before it was up (a peer that hung up on
// the handshake), or lost once it had been up (a cut link, a cell that
// stopped).
const (
	LeafClosedEarly = "closed before it was up"
	LeafLost        = "lost after it was up"
)

// noteUp notes the connection a notice is about (its log prefix) as up,
// unless the notice is its creation, which comes before its handshake.
func (l *leafLog) noteUp(msg string) {
	conn := connPrefix(msg)
	if conn == "" || strings.HasPrefix(msg[len(conn):], "Leafnode connection created") {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.up == nil {
		l.up = make(map[string]bool)
	}
	l.up[conn] = true
}

// connPrefix is the prefix the server puts on a line about one
// connection ("127.0.0.1:7422 - lid:6 - "), or "".
func connPrefix(msg string) string {
	i := strings.Index(msg, " - lid:")
	if i < 0 {
		return ""
	}
	j := strings.Index(msg[i+len(" - lid:"):], " - ")
	if j < 0 {
		return ""
	}
	return msg[:i+len(" - lid:")+j+len(" - ")]
}

func (l *leafLog) error(msg string) {
	if !strings.Contains(strings.ToLower(msg), "leafnode") && !strings.Contains(msg, " - lid:") {
		return // not about the leaf connection
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msg, l.at = msg, time.Now()
	if conn := connPrefix(msg); conn != "" {
		l.erred = conn
	}
}

func (l *leafLog) last() (string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.msg, l.at
}

// counters are what varies between the lines of one cause: the attempt,
// the connection's id and the remote server's name (with the separators
// before them).
var counters = regexp.MustCompile(` \(attempt \d+\)| - lid:\d+| - Remote: \S+`)

// LeafCause is msg (a LeafError) without its attempt number, connection
// id and remote server: the same cause gives the same LeafCause ("leaf
// connection 127.0.0.1:7422 lost after it was up: Stale Connection").
func LeafCause(msg string) string { return counters.ReplaceAllString(msg, "") }

// LeafError is the last error the server logged about its leaf
// connection to the cell, and when ("" without one, or without
// Config.LeafRemotes). It stays after the connection is up: compare
// with LeafConnections.
func (s *Server) LeafError() (string, time.Time) {
	if s.leafLog == nil {
		return "", time.Time{}
	}
	return s.leafLog.last()
}
