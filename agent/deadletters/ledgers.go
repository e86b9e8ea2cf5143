package deadletters

import (
	"context"
	"fmt"
	"sort"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Ledgers are the ledgers of the partitions this agent owns, where a dead
// letter waits until an archive object holds it (partitions.Set). While
// the archive cannot be read, list, show and stats answer from them, so
// that an operator still sees what died during the outage.
type Ledgers interface {
	// WaitingDeadLetters calls visit with each dead letter waiting for the
	// archive in a ledger read here (visit must not change it), and
	// returns the partitions read and those assigned here it could not
	// read, with why.
	WaitingDeadLetters(visit func(dl *rivorav1.DeadLetter)) (read []uint32, unread []*rivorav1.UnreadLedger)
}

// ledgerReserve is the part of a call's time kept from reading the
// archive for the ledgers' answer until the archive first answers: an
// archive that does not answer at all (a cut network, not a refused
// connection) must not use up the caller's whole deadline. Once it
// answered, it is reachable: a slow read has the caller's whole deadline.
const ledgerReserve = 5 * time.Second

// reachedArchive is the archive as list, stats and show read it. Until a
// List succeeds, each List is given the caller's deadline less the
// reserve (when more than twice the reserve is left) and a failure that
// is not the store's own answer (archive.Answered) is kept as unreached:
// the archive could not be reached at all. So is the store refusing access
// (archive.Refused: wrong credentials, a bucket it may not create): the
// archive cannot be read until an operator fixes it, and the dead letters
// of meanwhile wait in the ledgers (their writes are refused too), where
// an operator must still see them. Once a List succeeded, every
// call has the caller's full context, and a failure is an error as any.
// One call's reads are sequential: no lock.
type reachedArchive struct {
	archive.Archive
	reserve   time.Duration
	answered  bool
	unreached error
}

func (s *Service) reachArchive() *reachedArchive {
	reserve := s.ledgerReserve
	if reserve == 0 {
		reserve = ledgerReserve
	}
	return &reachedArchive{Archive: s.archive, reserve: reserve}
}

func (a *reachedArchive) List(ctx context.Context, prefix string) ([]string, error) {
	if a.answered {
		return a.Archive.List(ctx, prefix)
	}
	listCtx, cancel := context.WithCancel(ctx)
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) > 2*a.reserve {
		listCtx, cancel = context.WithDeadline(ctx, deadline.Add(-a.reserve))
	}
	defer cancel()
	keys, err := a.Archive.List(listCtx, prefix)
	switch {
	case err == nil:
		a.answered = true
	case ctx.Err() != nil:
	case !archive.Answered(err):
		a.unreached = err
	default:
		if _, refused := archive.Refused(err); refused {
			a.unreached = err
		}
	}
	return keys, err
}

// archiveDown says why the archive could not be read when it could not
// be reached at all (a.unreached) and the caller is still waiting, as the
// caller may be told it (auth.ArchiveErrorFor: the only place an answer's
// archive_unavailable is made), or refused access to it; false for any
// other outcome (an object that cannot be read, a read that failed after
// the archive answered), which is answered as it was.
func archiveDown(ctx context.Context, a *reachedArchive, err error) (string, bool) {
	if err == nil || ctx.Err() != nil || a.unreached == nil {
		return "", false
	}
	return auth.ArchiveErrorFor(ctx, err.Error()), true
}

// waiting returns the dead letters waiting in the ledgers read here that
// match f and that the caller of ctx's call may act for, destination by
// destination (as the archive lists them), each destination's in ledger
// order, the order they died in. Another customer's are left out here, so
// that show answers for one exactly as for an absent id (auth.hidden.go);
// unread is as the caller may be told it (auth.UnreadLedgersFor).
func (s *Service) waiting(ctx context.Context, f *rivorav1.DeadLetterFilter) (dls []*rivorav1.DeadLetter, read []uint32, unread []*rivorav1.UnreadLedger) {
	read, unread = s.ledgers.WaitingDeadLetters(func(dl *rivorav1.DeadLetter) {
		if matches(f, dl) && auth.CallerMayActFor(ctx, dl.GetEvent().GetCustomerId()) {
			dls = append(dls, dl)
		}
	})
	unread = auth.UnreadLedgersFor(ctx, unread)
	sort.SliceStable(dls, func(i, j int) bool {
		return dls[i].GetEvent().GetDestinationId() < dls[j].GetEvent().GetDestinationId()
	})
	return dls, read, unread
}

// unarchivedCopy is a ledger's dead letter as an answer gives it: a copy,
// marked unarchived, its payload left out unless withPayload.
func unarchivedCopy(dl *rivorav1.DeadLetter, withPayload bool) *rivorav1.DeadLetter {
	c := proto.Clone(dl).(*rivorav1.DeadLetter)
	c.Unarchived = true
	if !withPayload {
		c.Event.Payload = nil
	}
	return c
}

// listWaiting is ListDeadLetters' answer from the ledgers: at most limit
// dead letters, and how many more matched (ledgers are not paged).
func (s *Service) listWaiting(ctx context.Context, f *rivorav1.DeadLetterFilter, limit int) *rivorav1.ListDeadLettersResponse {
	dls, read, unread := s.waiting(ctx, f)
	resp := &rivorav1.ListDeadLettersResponse{LedgerPartitions: read, UnreadLedgers: unread}
	for _, dl := range dls[:min(limit, len(dls))] {
		resp.DeadLetters = append(resp.DeadLetters, unarchivedCopy(dl, false))
	}
	if more := len(dls) - limit; more > 0 {
		resp.MoreUnarchived, resp.Truncated = int64(more), true
	}
	return resp
}

// statsWaiting is DeadLetterStats' answer from the ledgers.
func (s *Service) statsWaiting(ctx context.Context, f *rivorav1.DeadLetterFilter, bySubscription bool) *rivorav1.DeadLetterStatsResponse {
	dls, read, unread := s.waiting(ctx, f)
	counts := newCounter()
	counts.bySubscription = bySubscription
	for _, dl := range dls {
		counts.add(dl, true)
	}
	out := counts.newestFirst()
	for _, n := range out {
		// add keeps the dead letters' own times: the ledger's, here.
		n.Oldest, n.Newest = proto.CloneOf(n.GetOldest()), proto.CloneOf(n.GetNewest())
	}
	return &rivorav1.DeadLetterStatsResponse{Counts: out, Total: counts.total, LedgerPartitions: read, UnreadLedgers: unread}
}

// getWaiting is GetDeadLetter's answer from the ledgers: event id's
// latest dead letter waiting there (an event replayed and dead again may
// have two), or NotFound saying which ledgers were read.
func (s *Service) getWaiting(ctx context.Context, id, destinationID string) (*rivorav1.GetDeadLetterResponse, error) {
	dls, read, unread := s.waiting(ctx, &rivorav1.DeadLetterFilter{DestinationId: destinationID})
	var found *rivorav1.DeadLetter
	for _, dl := range dls {
		if dl.GetEvent().GetEventId() == id {
			found = dl
		}
	}
	if found == nil {
		return nil, errkind.Errorf(errkind.NotFound, "no dead letter of event %s waits in the ledgers read here (%s)", id, ledgersRead(read, unread))
	}
	return &rivorav1.GetDeadLetterResponse{DeadLetter: unarchivedCopy(found, true)}, nil
}

// getWhileArchiveDown answers GetDeadLetter while the archive cannot be
// read (why, as archiveDown says it): from a ledger read here, or
// Unavailable saying both that the archive could not be read and that the
// dead letter does not wait in those ledgers, marked so
// (ArchiveUnavailableReason): in a cell another agent's may hold it, and
// the control plane asks them all.
func (s *Service) getWhileArchiveDown(ctx context.Context, id, destinationID, why string) (*connect.Response[rivorav1.GetDeadLetterResponse], error) {
	resp, err := s.getWaiting(ctx, id, destinationID)
	if err != nil {
		err = errkind.Tag(errkind.Unavailable, fmt.Errorf("%s; and %v", why, err))
		return nil, errkind.WithInfo(err, errkind.ArchiveUnavailableReason, map[string]string{"archive_error": why})
	}
	resp.ArchiveUnavailable = why
	return connect.NewResponse(resp), nil
}

// ledgersRead says which ledgers an answer read, and which it could not:
// "read partitions 0-3, 5; not partition 4: its owner is opening it …".
func ledgersRead(read []uint32, unread []*rivorav1.UnreadLedger) string {
	text := "no ledger is read here"
	if len(read) > 0 {
		text = "read " + lanes.PartitionsText(read)
	}
	for _, u := range unread {
		text += fmt.Sprintf("; not %s: %s", lanes.PartitionsText(u.GetPartitions()), u.GetReason())
	}
	return text
}
