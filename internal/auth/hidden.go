package auth

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A scoped publisher asking for another customer's item by id gets the
// answer an absent id gets, not PermissionDenied: a refusal would tell it
// that the id exists (and, naming the owner, whose it is). So the
// handlers' "absent" answers and the policies' "not yours" answers are
// built here, once, and cannot drift apart.

// EventNotFound is GetEvent's answer for an event id that is absent, or
// that is not one of the caller's customers'.
func EventNotFound(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("event %s not found: never accepted, still moving into its lane, its history expired, or not one of your token's customers'", id))
}

// DeadLetterNotFound is GetDeadLetter's answer for an event id with no
// dead letter in the archive, or whose dead letter is not one of the
// caller's customers'.
func DeadLetterNotFound(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("no dead letter %q in the archive, or not one of your token's customers' (still pending or delivered? see `rivoractl events get %s`)", id, id))
}

// OwnerHidden reports whether an item a customer owns (owner: a
// customer's own destination) must read to the caller of ctx's call as
// if it did not exist: the caller is limited to some customers
// (Principal.Scoped) and may not act for owner. Any other caller (an
// operator; no principal: an in-process call) is told whose it is. An
// item no customer owns (owner "": a shared destination) is hidden from
// no one.
func OwnerHidden(ctx context.Context, owner string) bool {
	if owner == "" {
		return false
	}
	p := FromContext(ctx)
	return p != nil && p.Scoped() && !p.MayActFor(owner)
}

// hiddenUnreadReason is why a ledger was not read, as a customer token is
// told it: the agents' names and errors are the operators'.
const hiddenUnreadReason = "not read right now (an agent is starting, moving it or unreachable); retry"

// UnreadLedgersFor is unread (the ledgers an answer could not read, and
// why) as the caller of ctx's call may be told it: a customer token
// (Principal.SelfService) learns which partitions, not which agent nor
// its error; anyone else everything.
func UnreadLedgersFor(ctx context.Context, unread []*rivorav1.UnreadLedger) []*rivorav1.UnreadLedger {
	if p := FromContext(ctx); p == nil || !p.SelfService() || len(unread) == 0 {
		return unread
	}
	var parts []uint32
	for _, u := range unread {
		parts = append(parts, u.GetPartitions()...)
	}
	slices.Sort(parts)
	return []*rivorav1.UnreadLedger{{Partitions: slices.Compact(parts), Reason: hiddenUnreadReason}}
}

// hiddenArchiveError is why the dead-letter archive was not read, as a
// customer token is told it.
const hiddenArchiveError = "the dead-letter archive cannot be read right now; listed from the ledgers"

// ArchiveErrorFor is why (an answer's archive_unavailable: the archive's
// error, "" when it was read) as the caller of ctx's call may be told it:
// a customer token (Principal.SelfService) that it could not be read, not
// the error, which names the bucket, the endpoint and internal addresses;
// anyone else the error.
func ArchiveErrorFor(ctx context.Context, why string) string {
	if p := FromContext(ctx); why == "" || p == nil || !p.SelfService() {
		return why
	}
	return hiddenArchiveError
}
