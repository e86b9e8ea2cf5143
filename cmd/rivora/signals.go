package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// stopOnSignal is cancelled by the first SIGINT or SIGTERM, which starts
// the process's graceful stop (a drain may take a while: attempts in
// flight finish, partitions are handed off). From then on the signals
// have their default action again: a second one ends the process at
// once, as a crash would — nothing acknowledged is lost (the store
// survives a crash), and attempts still in flight are sent again after
// the restart. stop releases the signals.
func stopOnSignal(log *slog.Logger) (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
		if cause := context.Cause(ctx); cause != context.Canceled {
			log.Info("stopping gracefully; a second Ctrl-C (or SIGTERM) stops at once, losing nothing acknowledged", "signal", cause)
		}
	}()
	return ctx, stop
}
