package natsd

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestJetStreamDisabledIsReported: when the server turns its JetStream off
// by itself (as nats-server does on a full disk), JetStreamLost closes and
// LostErr wraps ErrJetStreamDisabled, naming the store; the server's own
// Shutdown is not reported as a loss.
func TestJetStreamDisabledIsReported(t *testing.T) {
	srv, err := Start(Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if err := srv.LostErr(); err != nil {
		t.Fatalf("LostErr of a running server: %v", err)
	}
	// What handleOutOfSpace does on ENOSPC (nats-server's server/jetstream.go).
	if err := srv.ns.ShutdownJetStream(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.JetStreamLost():
	case <-time.After(5 * time.Second):
		t.Fatal("JetStreamLost not closed 5s after the server disabled JetStream")
	}
	err = srv.LostErr()
	if !errors.Is(err, ErrJetStreamDisabled) || !strings.Contains(err.Error(), "jetstream") {
		t.Fatalf("LostErr = %v, want ErrJetStreamDisabled naming the store", err)
	}
}

func TestShutdownIsNotALoss(t *testing.T) {
	srv, err := Start(Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	select {
	case <-srv.JetStreamLost():
		t.Fatalf("Shutdown reported as a lost JetStream: %v", srv.LostErr())
	default:
	}
}

// TestAwaitRoom: it returns at once on a disk with room, and waits on one
// without (here: a need above any disk) until its context ends, saying
// how much is free and needed.
func TestAwaitRoom(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir() + "/data"
	if err := AwaitRoom(context.Background(), dir, 1, log); err != nil {
		t.Fatalf("AwaitRoom(1 byte): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := AwaitRoom(ctx, dir, 1<<62, log)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "bytes free") {
		t.Fatalf("AwaitRoom(more than any disk) = %v, want the context's error saying what is free", err)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("AwaitRoom gave up after %s, before its context ended", took)
	}
}

// Shutdown twice (the agent's stop, then a test's cleanup) stops the
// server once and returns.
func TestShutdownTwiceIsHarmless(t *testing.T) {
	srv, err := Start(Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	srv.Shutdown()
}
