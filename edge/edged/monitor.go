package edged

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/errkind"
)

// sampleEvery is how often the monitor samples the link and the buffer:
// the over-age refusal starts at most this late, the metrics and the
// reports are at most this old.
const sampleEvery = time.Second

// Status is the edge's link to the cell and its buffer, as last sampled.
type Status struct {
	// CellConnected: the leaf connection to the cell is up.
	CellConnected bool
	// DisconnectedSince is when the leaf connection was last lost (zero
	// while connected, or when it has not been up since the edge
	// started).
	DisconnectedSince time.Time
	// LinkError is why the leaf connection is down, as the NATS server
	// last said it ("" while connected, or when it said nothing: a
	// silent cut).
	LinkError string
	// Buffer is what the buffer holds: the unforwarded events.
	Buffer edge.Stats
	// At is when this was sampled.
	At time.Time
}

// monitor samples the leaf connection and the buffer's state each
// second, and answers from the last sample: the gateway's admission (the
// over-age refusal) and full-buffer message, the reports and the
// metrics. It owns the link's history (when it was lost).
type monitor struct {
	name      string
	maxBuffer int64
	maxAge    time.Duration
	nats      *natsd.Server
	buffer    *edge.Buffer
	started   time.Time
	now       func() time.Time
	// lostFile keeps when the link was lost across a restart of the
	// edge during the cut (LinkLostFile in the data dir).
	lostFile string

	mu   sync.Mutex
	last Status
	// upAt is the last sample that found the link up.
	upAt time.Time
}

// LinkLostFile, in the edge's data dir, holds when its link to the cell
// was lost (RFC 3339), while it is down: a restart during a cut still
// says since when.
const LinkLostFile = "link-lost-at"

func newMonitor(cfg Config, nats *natsd.Server, buffer *edge.Buffer, started time.Time) *monitor {
	m := &monitor{name: cfg.Name, maxBuffer: cfg.MaxBuffer, maxAge: cfg.BufferMaxAge, nats: nats, buffer: buffer, started: started, now: time.Now,
		lostFile: filepath.Join(cfg.DataDir, LinkLostFile)}
	if data, err := os.ReadFile(m.lostFile); err == nil {
		if at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(data))); err == nil {
			m.last.DisconnectedSince = at
		}
	}
	return m
}

// run samples every sampleEvery until ctx ends, logging the link's
// changes.
func (m *monitor) run(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	everConnected, warnedNever := false, false
	var said linkErrors
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := m.status().CellConnected
		st := m.sample(ctx)
		everConnected = everConnected || st.CellConnected
		switch {
		case st.CellConnected && !before:
			log.Info("connected to the cell: it takes the buffered events", "buffered_events", st.Buffer.Events)
		case !st.CellConnected && before:
			log.Warn("the link to the cell is down: events are acknowledged here and kept until it returns", "buffered_events", st.Buffer.Events)
		case !everConnected && !warnedNever && m.now().Sub(m.started) >= neverConnectedWarning && !m.nats.LeafJoined():
			warnedNever = true
			log.Warn("this edge has not joined the cell since it started: it joins once its control plane confirms that no other running edge has its name (--name); check --controlplane, the network to it and the cell token; events are acknowledged here and kept until then",
				"since", m.started.UTC().Format(time.RFC3339), "buffered_events", st.Buffer.Events)
		case !everConnected && !warnedNever && m.now().Sub(m.started) >= neverConnectedWarning:
			// Once: a wrong --cell-leaf, a firewall or a wrong cell
			// token looks like this from here, and there was no
			// connection to lose to say so.
			warnedNever = true
			log.Warn("the cell has not been reached since this edge started: check --cell-leaf, the network to it and the cell token; events are acknowledged here and kept until it is reached",
				"since", m.started.UTC().Format(time.RFC3339), "buffered_events", st.Buffer.Events, "last_error", st.LinkError)
		}
		if !st.CellConnected && said.due(st.LinkError, m.now()) {
			log.Warn(linkDown(st.LinkError), "error", st.LinkError, "hint", linkHint(st.LinkError))
		}
	}
}

// linkDown is the edge's log line for a leaf connection's error: a
// link that was up and then lost (natsd's "lost after it was up"), or
// one that cannot be made.
func linkDown(msg string) string {
	if strings.Contains(msg, natsd.LeafLost) {
		return "lost the leaf connection to the cell: reconnecting every second; events are acknowledged here and kept until it is back"
	}
	return "cannot connect to the cell's leaf port (--cell-leaf): retrying every second; events are acknowledged here and kept until it connects"
}

// linkHint says what a leaf connection's error most likely means here.
func linkHint(msg string) string {
	switch {
	case strings.Contains(msg, natsd.LeafLost):
		// The server's reason follows: "Stale Connection" (pings
		// unanswered), "Client Closed" or "Read Error" (the other end
		// or something between closed it).
		return "the link was up, then cut: the cell's agent stopped or restarted, or the network between dropped it (Stale Connection: the cell stopped answering pings)"
	case strings.Contains(msg, "Authorization Violation"):
		return "the cell refused this edge's credential: give the cell's own token (--cell-token-file)"
	case strings.Contains(msg, "wrong port"):
		return "that is a NATS client port: give the cell's leaf port (an agent's --leaf-listen)"
	case strings.Contains(msg, natsd.LeafClosedEarly):
		return "the other end hung up before the NATS handshake: is it the cell's leaf port (an agent's --leaf-listen), with TLS (--tls-ca) when the cell serves it over TLS?"
	case strings.Contains(msg, "connection refused"):
		return "nothing listens there: is the cell's agent up, and is it its --leaf-listen?"
	case strings.Contains(strings.ToLower(msg), "tls"), strings.Contains(msg, "x509"):
		return "a TLS mismatch: --tls-ca must verify the cell's leaf port, and the cell must serve TLS there"
	}
	return "check --cell-leaf, the network to it and the cell token"
}

// linkErrors rate-limits the leaf connection's errors in the edge's log:
// a new cause at most every linkErrorEvery, the same one again every
// linkErrorRepeat (the server retries every second).
type linkErrors struct {
	cause string
	at    time.Time
}

const (
	linkErrorEvery  = 30 * time.Second
	linkErrorRepeat = 10 * time.Minute
)

// due tells whether to log msg now, and if so notes it.
func (l *linkErrors) due(msg string, now time.Time) bool {
	if msg == "" {
		return false
	}
	cause := natsd.LeafCause(msg)
	since := now.Sub(l.at)
	if !l.at.IsZero() && (since < linkErrorEvery || (cause == l.cause && since < linkErrorRepeat)) {
		return false
	}
	l.cause, l.at = cause, now
	return true
}

// neverConnectedWarning is how long after its start an edge that never
// reached the cell says so.
const neverConnectedWarning = 30 * time.Second

// sample reads the link and the buffer now; a buffer that cannot be read
// keeps its last known state.
func (m *monitor) sample(ctx context.Context) Status {
	connected := m.nats.LeafConnections() > 0
	linkErr, errAt := m.nats.LeafError()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	stats, err := m.buffer.Stats(ctx)
	cancel()
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		m.last.Buffer = stats
	}
	switch {
	case connected && !m.last.DisconnectedSince.IsZero():
		m.last.DisconnectedSince = time.Time{}
		_ = os.Remove(m.lostFile) // best effort: a stale one is replaced at the next loss
	case !connected && m.last.CellConnected:
		m.last.DisconnectedSince = now
		// Best effort: without it, a restart during the cut says
		// "unreachable since this edge started" instead.
		_ = os.WriteFile(m.lostFile, []byte(now.UTC().Format(time.RFC3339Nano)), 0o600)
	}
	if connected {
		m.upAt = now
	}
	if connected || !errAt.After(m.upAt) {
		linkErr = "" // none, or said before the link was last up
	}
	m.last.CellConnected, m.last.LinkError, m.last.At = connected, linkErr, now
	return m.last
}

// OldestUnforwarded is when the oldest event the cell has not taken was
// stored (zero when none). While the link is up, of the events not yet
// sent: those sent and not yet confirmed are on their way, and the cell
// confirms them in bulk (edge.Stats). While it is down, of every event
// the buffer holds.
func (s Status) OldestUnforwarded() time.Time {
	if s.CellConnected {
		return s.Buffer.OldestWaiting
	}
	return s.Buffer.Oldest
}

func (m *monitor) status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// admit is the gateway's admission: refused (resource_exhausted, reason
// edge.BufferTooOldReason) once the oldest unforwarded event is older
// than --buffer-max-age, so that nothing acknowledged is ever discarded
// for age.
func (m *monitor) admit() error {
	if m.maxAge <= 0 {
		return nil
	}
	st := m.status()
	oldest := st.OldestUnforwarded()
	if oldest.IsZero() || m.now().Sub(oldest) <= m.maxAge {
		return nil
	}
	age := m.now().Sub(oldest)
	err := errkind.Errorf(errkind.Exhausted, "%s of edge %s holds events older than --buffer-max-age %s (the oldest stored %s ago), so it takes no more: %s; nothing it acknowledged is discarded, and it accepts again once the cell has taken the oldest",
		edge.StreamName, m.name, m.maxAge, age.Round(time.Second), m.unforwarded(st))
	return errkind.WithInfo(err, edge.BufferTooOldReason, map[string]string{
		"edge":                       m.name,
		"buffer_max_age_seconds":     strconv.FormatInt(int64(m.maxAge/time.Second), 10),
		"oldest_unforwarded_seconds": strconv.FormatInt(int64(age/time.Second), 10),
	})
}

// fullFresh is how old a sample full may answer from: fresh enough that
// the counts it names are the buffer's (a full buffer at a high publish
// rate changes within a second), while a flood of refused publishes
// costs at most one request to the buffer per this.
const fullFresh = 100 * time.Millisecond

// fresh is the last sample, taken anew when it is older than fullFresh
// (which also brings the buffer's count of what it holds up to date:
// edge.Buffer.Stats).
func (m *monitor) fresh() Status {
	if st := m.status(); m.now().Sub(st.At) <= fullFresh {
		return st
	}
	return m.sample(context.Background())
}

// full is the answer to a request the buffer has no room for: of need
// bytes beside the used the admission counted (ReserveCounted refused
// it), or 0 when JetStream refused a store (the stream holds its own
// MaxBytes). It carries edge.BufferFullReason.
func (m *monitor) full(need, used int64) error {
	st := m.fresh()
	room := ""
	if need > 0 {
		// The admission's own count: the sample below may be up to
		// fullFresh behind the requests just stored or in flight.
		room = fmt.Sprintf(", no room for this request's %d bytes beside the %d it holds or is storing", need, used)
	}
	err := errkind.Errorf(errkind.Exhausted, "%s of edge %s is full (--max-buffer %d bytes%s): %s; nothing it acknowledged is discarded, and it accepts again as the cell takes events",
		edge.StreamName, m.name, m.maxBuffer, room, m.unforwarded(st))
	return errkind.WithInfo(err, edge.BufferFullReason, map[string]string{"edge": m.name, "max_buffer_bytes": strconv.FormatInt(m.maxBuffer, 10)})
}

// unforwarded says how much the buffer holds and how the link is.
func (m *monitor) unforwarded(st Status) string {
	held := fmt.Sprintf("%d events (%d bytes) not yet forwarded to the cell", st.Buffer.Events, st.Buffer.Bytes)
	switch {
	case st.CellConnected:
		return fmt.Sprintf("%d events (%d bytes) the cell has not confirmed, %d of them not yet sent; the leaf connection to the cell is up", st.Buffer.Events, st.Buffer.Bytes, st.Buffer.Waiting)
	case !st.DisconnectedSince.IsZero():
		return fmt.Sprintf("%s, which is unreachable since %s", held, st.DisconnectedSince.UTC().Format(time.RFC3339))
	default:
		return fmt.Sprintf("%s, which is unreachable since this edge started at %s", held, m.started.UTC().Format(time.RFC3339))
	}
}
