package agent

import (
	"context"
	"log/slog"
	"time"

	"github.com/rivora/rivora/agent/archive"
)

// archiveCheckTimeout bounds the startup check of the archive.
const archiveCheckTimeout = 10 * time.Second

// checkArchive tells, once at startup, whether the dead-letter archive can
// be reached. It is not fatal: dead letters wait in their partition's
// ledger until it can, and recovery needs no operator. But nothing else
// says so before the first dead letter fails to be written (and then only
// as a retried WARN and rivora_deadletters_unarchived), while replay
// fails outright meanwhile and dlq list, stats and show see only the
// ledgers.
func checkArchive(ctx context.Context, arch archive.Archive, timeout time.Duration, log *slog.Logger) error {
	checkCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := arch.Check(checkCtx)
	switch {
	case ctx.Err() != nil:
		return ctx.Err() // stopping: nothing was learned
	case err != nil:
		log.Warn("the dead-letter archive cannot be reached: dead letters stay in their partition's ledger until it can "+
			"(destinations health UNARCHIVED, rivora_deadletters_unarchived); until then dlq list, stats and show answer from the ledgers only, and replay fails; "+
			"check --s3-endpoint, the bucket and its credentials", "error", err)
	default:
		log.Info("the dead-letter archive is reachable")
	}
	return err
}
