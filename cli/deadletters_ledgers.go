package cli

import (
	"fmt"
	"io"

	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// While the archive cannot be read, dlq list, stats and show answer from
// the dead letters still waiting in the agents' ledgers (the answer's
// archive_unavailable says why). The functions here say so, before the
// answer, so that nobody reads it as the archive's.

// ledgerHelp is what `dlq list --help` and `dlq stats --help` say of it.
const ledgerHelp = `While the archive (S3/MinIO) cannot be read, the answer comes from the
dead letters still waiting in the agents' ledgers instead, after a first
line "archive not readable (why): …": those that died during the outage,
not yet archived (they are once it is back). The dead letters archived
before are not listed or counted until then. Every filter applies to them
as to the archive's. A partition whose ledger could not be read (its agent
did not answer, or is opening it) is named on a "not read:" line.`

// ledgerArchivedText is the ARCHIVED column of dlq list from the ledgers.
func ledgerArchivedText(dl *rivorav1.DeadLetter) string {
	if dl.GetUnarchived() {
		return "not yet"
	}
	return "yes"
}

// ledgerWarning says that an answer comes from the ledgers because the
// archive could not be read (why), what it holds (what: "showing the 3
// dead letters"), and which ledgers it lacks.
func ledgerWarning(w io.Writer, why, what string, unread []*rivorav1.UnreadLedger) {
	say(w, "archive not readable (%s): %s still waiting in the agents' ledgers; they are archived once it is back (those archived before are listed again then)\n", why, what)
	unreadLedgers(w, unread)
}

// showLedgerWarning says that dlq show's dead letter comes from a ledger
// because the archive could not be read (why).
func showLedgerWarning(w io.Writer, why string) {
	say(w, "archive not readable (%s): this dead letter still waits in its partition's ledger; it is archived once the archive is back\n", why)
}

// unreadLedgers names the partitions whose ledger no agent read, with
// their agent when the answer names it. It does not when it does not know
// it or may not say: an agent asked directly (partitions it does not hold:
// they may well have an owner), a partition nobody owns, a customer token;
// the reason says which.
func unreadLedgers(w io.Writer, unread []*rivorav1.UnreadLedger) {
	for _, u := range unread {
		agent := ""
		if u.GetAgent() != "" {
			agent = " (agent " + u.GetAgent() + ")"
		}
		say(w, "not read: %s%s: %s; their dead letters are missing here\n", lanes.PartitionsText(u.GetPartitions()), agent, u.GetReason())
	}
}

// listedFromLedgers is the ledger warning's account of a list: "showing
// the 3 dead letters", "showing 1000 of the 1400 dead letters".
func listedFromLedgers(resp *rivorav1.ListDeadLettersResponse) string {
	n := len(resp.GetDeadLetters())
	if more := resp.GetMoreUnarchived(); more > 0 {
		return fmt.Sprintf("showing %d of the %d matching dead letters", n, int64(n)+more)
	}
	if n == 0 {
		return "no matching dead letter is"
	}
	return fmt.Sprintf("showing the %d matching %s", n, plural(n, "dead letter"))
}
