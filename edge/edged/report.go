package edged

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/internal/bounds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// reportEvery is how often the edge reports its buffer and link: the
// control plane takes an edge for disconnected after three intervals
// without a report.
const reportEvery = 2 * time.Second

// report sends ReportEdge every reportEvery until ctx ends. A failed
// report is logged when reports start failing and when they succeed
// again (not every 2 s through a cut), and moves on to the next control
// plane.
func (e *Edge) report(ctx context.Context) {
	httpClient := e.upstream.HTTPClient(reportEvery)
	t := time.NewTicker(reportEvery)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		url := e.upstream.URL()
		_, err := e.client(httpClient, url).ReportEdge(ctx, connect.NewRequest(&rivorav1.ReportEdgeRequest{EdgeName: e.cfg.Name, Buffer: e.bufferReport(), InstanceId: e.instance}))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			e.log.Warn("cannot report to the control plane (retrying every 2s; logged again when it works)", "controlplane", url, "error", err)
		case err == nil && failing:
			e.log.Info("reporting to the control plane again", "controlplane", url)
		}
		failing = err != nil
		e.answered(err)
		if err != nil {
			e.upstream.Next(url)
		}
	}
}

// bufferReport is the edge's buffer and link as ReportEdge carries them.
func (e *Edge) bufferReport() *rivorav1.EdgeBuffer {
	st := e.monitor.status()
	b := &rivorav1.EdgeBuffer{
		CellConnected:  st.CellConnected,
		BufferedEvents: st.Buffer.Events,
		BufferedBytes:  st.Buffer.Bytes,
		ForwardedTotal: st.Buffer.Forwarded(),
		MaxBufferBytes: uint64(e.cfg.MaxBuffer),
		AppliedVersion: e.applied.Load(),
	}
	if !st.CellConnected {
		b.LinkError = bounds.Truncate(natsd.LeafCause(st.LinkError), bounds.Text)
	}
	if !st.DisconnectedSince.IsZero() {
		b.DisconnectedSince = timestamppb.New(st.DisconnectedSince)
	}
	if at := st.OldestUnforwarded(); !at.IsZero() {
		b.OldestBuffered = timestamppb.New(at)
	}
	if e.cfg.BufferMaxAge > 0 {
		b.BufferMaxAge = durationpb.New(e.cfg.BufferMaxAge)
	}
	return b
}
