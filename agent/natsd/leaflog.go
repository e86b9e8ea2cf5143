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
// not a leaf port) only in its log, which is otherwise off. It keeps the
// last such line, for the edge to log and report (Server.LeafError);
// the rest of the server's log stays off.
type leafLog struct {
	mu  sync.Mutex
	msg string
	at  time.Time
	// erred is the connection (its log prefix) the last error was about:
	// its close that follows says less ("Client Closed").
	erred string
}

func (l *leafLog) Errorf(format string, v ...any) { l.error(fmt.Sprintf(format, v...)) }
func (l *leafLog) Warnf(format string, v ...any)  { l.error(fmt.Sprintf(format, v...)) }
func (l *leafLog) Fatalf(format string, v ...any) { l.error(fmt.Sprintf(format, v...)) }
func (l *leafLog) Debugf(string, ...any)          {}
func (l *leafLog) Tracef(string, ...any)          {}

// Noticef keeps a leaf connection's close that no error explained: a
// peer that hung up before the handshake ("Read Error") is all the
// server says of a port that speaks another protocol.
func (l *leafLog) Noticef(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	conn, reason, ok := strings.Cut(msg, "Leafnode connection closed: ")
	if !ok || strings.HasPrefix(reason, "Server Shutdown") {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if conn != "" && conn == l.erred {
		return
	}
	l.msg, l.at = "leaf connection "+strings.TrimSuffix(conn, " - ")+" closed before it was up: "+reason, time.Now()
}

func (l *leafLog) error(msg string) {
	if !strings.Contains(strings.ToLower(msg), "leafnode") && !strings.Contains(msg, " - lid:") {
		return // not about the leaf connection
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msg, l.at = msg, time.Now()
	if i := strings.Index(msg, " - lid:"); i >= 0 {
		if j := strings.Index(msg[i+len(" - lid:"):], " - "); j >= 0 {
			l.erred = msg[:i+len(" - lid:")+j+len(" - ")]
		}
	}
}

func (l *leafLog) last() (string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.msg, l.at
}

// counters are what varies between the lines of one cause: the attempt
// and the connection's id.
var counters = regexp.MustCompile(`\(attempt \d+\)|lid:\d+|Remote: \S+`)

// LeafCause is msg (a LeafError) without its attempt number and
// connection id: the same cause gives the same LeafCause.
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
