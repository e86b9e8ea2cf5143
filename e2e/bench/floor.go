package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// The Connect floor: what one Publish call costs the machine when the
// server does nothing at all. A Connect IngestService in this process
// answers every Publish at once with a fixed event id, over the same
// client (HTTP/1.1, or h2c with -h2c) and the same open-loop pacing as
// the Rivora phase, so
// the CPU per call (caller and server together, both in this process)
// and the p99 at the offered rate are this machine's limit for a
// single-event Publish over Connect, whatever the server does behind it.

// floorIngest answers Publish and nothing else.
type floorIngest struct {
	rivorav1connect.UnimplementedIngestServiceHandler
}

func (floorIngest) Publish(context.Context, *connect.Request[rivorav1.PublishRequest]) (*connect.Response[rivorav1.PublishResponse], error) {
	return connect.NewResponse(&rivorav1.PublishResponse{EventId: "0195a4f0-0000-7000-8000-000000000000"}), nil
}

// startFloor serves floorIngest on 127.0.0.1 and returns its base URL and
// a stop function.
func startFloor() (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	// Uncompressed answers, as rivora's ingest gives them
	// (agent/api): a Go Connect client accepts gzip, and connect would
	// otherwise compress every answer to it.
	mux.Handle(rivorav1connect.NewIngestServiceHandler(floorIngest{}, connect.WithCompressMinBytes(1<<20)))
	// HTTP/1.1 and h2c, as rivora serves: -h2c callers talk h2c to it too.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, Protocols: &protocols}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			progress("connect floor server: %v", err)
		}
	}()
	return "http://" + ln.Addr().String(), func() {
		srv.Close()
		<-done
	}, nil
}

// floorPhase runs the open-loop Publish phase against the floor server.
func floorPhase(ctx context.Context, hc *http.Client, lean bool, n int, rate float64, maxConc int, limit time.Duration, req func(int) *rivorav1.PublishRequest) (row, error) {
	url, stop, err := startFloor()
	if err != nil {
		return row{}, err
	}
	defer stop()
	publish := connectCaller(rivorav1connect.NewIngestServiceClient(hc, url))
	if lean {
		if publish, err = leanCaller(url, maxConc); err != nil {
			return row{}, err
		}
	}
	// Warmed up as the Rivora phases are (2000 calls, 64 at a time), by
	// the caller the phase uses.
	if _, err := publishPhaseBy(ctx, publish, 2000, 64, limit, req); err != nil {
		return row{}, fmt.Errorf("warm-up: %w", err)
	}
	cpu0 := benchCPU()
	r, err := pacedPublishPhase(ctx, publish, n, rate, maxConc, limit, req)
	if err != nil {
		return row{}, err
	}
	// Caller and server are both this process: the whole cost is the
	// client's column.
	r.clientCPU = benchCPU() - cpu0
	r.name = "Connect floor (no-op server) at " + r.name[len("rivora Publish at "):]
	r.note = "a Connect IngestService in the bench process answering every Publish at once; CPU is caller and server together"
	return r, nil
}
