package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/rivora/rivora/internal/tracing"
)

// StartTracing sets up tracing from the environment; a bad OTEL_* value is
// a *UsageError. flush exports what is left at shutdown. A command calls
// it first, so that tracing covers (and its log line precedes) everything
// the process does.
func StartTracing(ctx context.Context, service string, log *slog.Logger) (flush func(), err error) {
	shutdown, err := tracing.Setup(ctx, service, log)
	if err != nil {
		return nil, &UsageError{msg: "rivora: tracing: " + err.Error()}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("tracing: flush at shutdown", "err", err)
		}
	}, nil
}

// UsageError is a mistake in what the process was given, found only once
// it starts (an OTEL_* variable): the command exits 2 on it, as on a bad
// flag.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }
