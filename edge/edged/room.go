package edged

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/bytesize"
)

// ErrMaxBufferTooLarge: --max-buffer is more than the edge's store may
// hold. JetStream reserves a stream's MaxBytes of its store when it
// creates the stream, and its store may take about three quarters of the
// data dir's free disk (and of what it holds already): past that it
// refuses the buffer's stream ("insufficient storage resources
// available"), which said nothing of --max-buffer.
var ErrMaxBufferTooLarge = errors.New("--max-buffer is more than the data dir's disk can hold")

// bufferTooLarge is ErrMaxBufferTooLarge with its figures.
type bufferTooLarge struct{ msg string }

func (e *bufferTooLarge) Error() string        { return e.msg }
func (e *bufferTooLarge) Is(target error) bool { return target == ErrMaxBufferTooLarge }

// checkRoom refuses a --max-buffer whose stream (edge.StreamMaxBytes)
// JetStream would not reserve: more than its store's limit less what
// other streams reserved. It names the free disk and the most
// --max-buffer may be.
func checkRoom(ctx context.Context, cfg Config, srv *natsd.Server, js jetstream.JetStream) error {
	capacity := srv.StoreCapacity()
	if capacity <= 0 {
		return nil // no limit known: JetStream's own refusal stands
	}
	others, err := reservedByOthers(ctx, js)
	if err != nil {
		return err
	}
	most := edge.MaxBytesWithin(capacity - others)
	if cfg.MaxBuffer <= most {
		return nil
	}
	free, err := natsd.FreeBytes(cfg.DataDir)
	if err != nil {
		return err
	}
	fix := "give --max-buffer at most " + mib(most) + ", or free disk"
	if most < 1<<20 {
		fix = "free disk: it has room for no buffer (--max-buffer is at least 1MiB)"
	}
	return &bufferTooLarge{msg: fmt.Sprintf("--max-buffer %s is more than this edge may store: the disk of %s has %s free, of which JetStream stores at most %s "+
		"(three quarters, with what it holds already), and the buffer's stream reserves --max-buffer plus %s of headroom; "+
		"%s (the data dir needs about 1.33 times --max-buffer free)",
		bytesize.IEC(cfg.MaxBuffer), cfg.DataDir, bytesize.IEC(free), bytesize.IEC(capacity-others),
		bytesize.IEC(edge.StreamMaxBytes(cfg.MaxBuffer)-cfg.MaxBuffer), fix)}
}

// reservedByOthers is what the streams other than the buffer reserve of
// the store (their MaxBytes on file).
func reservedByOthers(ctx context.Context, js jetstream.JetStream) (int64, error) {
	var n int64
	list := js.ListStreams(ctx)
	for info := range list.Info() {
		if c := info.Config; c.Name != edge.StreamName && c.Storage == jetstream.FileStorage && c.MaxBytes > 0 {
			n += c.MaxBytes
		}
	}
	if err := list.Err(); err != nil {
		return 0, fmt.Errorf("list the store's streams: %w", err)
	}
	return n, nil
}

// mib is n as --max-buffer takes it, rounded down to a MiB ("0MiB" under
// one).
func mib(n int64) string { return fmt.Sprintf("%dMiB", n>>20) }
