package deadletters

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/minio/minio-go/v7"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// slowArchive is an archive that answers, slowly: each List after list,
// each Get after get (or with getErr).
type slowArchive struct {
	archive.Archive
	list, get time.Duration
	getErr    error
	listErr   error
}

func wait(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *slowArchive) List(ctx context.Context, prefix string) ([]string, error) {
	if err := wait(ctx, a.list); err != nil {
		return nil, err
	}
	if a.listErr != nil {
		return nil, a.listErr
	}
	return a.Archive.List(ctx, prefix)
}

func (a *slowArchive) Get(ctx context.Context, key string) ([]*rivorav1.DeadLetter, error) {
	if err := wait(ctx, a.get); err != nil {
		return nil, err
	}
	if a.getErr != nil {
		return nil, a.getErr
	}
	return a.Archive.Get(ctx, key)
}

// fixedLedgers hold dls, in partition 0.
type fixedLedgers []*rivorav1.DeadLetter

func (l fixedLedgers) WaitingDeadLetters(visit func(dl *rivorav1.DeadLetter)) ([]uint32, []*rivorav1.UnreadLedger) {
	for _, dl := range l {
		visit(dl)
	}
	return []uint32{0}, nil
}

// ledgerRig is a service over an archive holding "archived" (of acme)
// and ledgers holding "waiting" (of acme), both of destination orders.
func ledgerRig(t *testing.T, wrap func(archive.Archive) archive.Archive) *Service {
	t.Helper()
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, dead("archived", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS))
	waiting := dead("waiting", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS)
	waiting.Event.DestinationId = "orders"
	waiting.DeadAt = timestamppb.New(rg.now)
	return &Service{archive: wrap(rg.arch), ledgers: fixedLedgers{waiting}, replay: rg.replay}
}

// A slow archive that answers is read within the caller's whole deadline:
// its List answered, so it is reachable, and a list, stats or show whose
// reads end after the ledgers' reserve began answer from it, not from the
// ledgers (they used to: every archive read had the deadline less the
// reserve, so a 25 s list under the CLI's 30 s answered "archive
// unreachable (context deadline exceeded)").
func TestASlowArchiveThatAnswersIsNotUnreachable(t *testing.T) {
	s := ledgerRig(t, func(a archive.Archive) archive.Archive {
		return &slowArchive{Archive: a, list: 500 * time.Millisecond, get: 2200 * time.Millisecond}
	})
	s.ledgerReserve = 1500 * time.Millisecond
	call := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 3500*time.Millisecond)
	}
	filter := &rivorav1.DeadLetterFilter{DestinationId: "orders"}

	ctx, cancel := call()
	list, err := s.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: filter}))
	cancel()
	if err != nil || list.Msg.GetArchiveUnavailable() != "" || len(list.Msg.GetDeadLetters()) != 1 || list.Msg.GetDeadLetters()[0].GetEvent().GetEventId() != "archived" {
		t.Errorf("list: %v, %v; want the archive's one dead letter", list, err)
	}
	ctx, cancel = call()
	stats, err := s.DeadLetterStats(ctx, connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: filter}))
	cancel()
	if err != nil || stats.Msg.GetArchiveUnavailable() != "" || stats.Msg.GetObjects() != 1 {
		t.Errorf("stats: %v, %v; want the archive's one object", stats, err)
	}
	ctx, cancel = call()
	show, err := s.GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "archived"}))
	cancel()
	if err != nil || show.Msg.GetArchiveUnavailable() != "" || show.Msg.GetObject() == "" {
		t.Errorf("show: %v, %v; want the archive's object", show, err)
	}
}

// An object that cannot be read (corrupt, or access denied to it) is an
// error, as it was: it does not hide the whole archive behind the
// ledgers' answer "archive not readable".
func TestAnUnreadableObjectIsNotAnUnreachableArchive(t *testing.T) {
	corrupt := errors.New("archive deadletter/orders/x: decode line 1: unexpected token")
	s := ledgerRig(t, func(a archive.Archive) archive.Archive { return &slowArchive{Archive: a, getErr: corrupt} })
	filter := &rivorav1.DeadLetterFilter{DestinationId: "orders"}
	ctx := context.Background()
	if resp, err := s.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: filter})); !errors.Is(err, corrupt) {
		t.Errorf("list: %v, %v; want the object's error", resp, err)
	}
	if resp, err := s.DeadLetterStats(ctx, connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: filter})); !errors.Is(err, corrupt) {
		t.Errorf("stats: %v, %v; want the object's error", resp, err)
	}
	if resp, err := s.GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "waiting"})); !errors.Is(err, corrupt) {
		t.Errorf("show: %v, %v; want the object's error", resp, err)
	}
}

// An archive that does not answer at all leaves the ledgers' answer time.
func TestAnArchiveThatNeverAnswersLeavesTheLedgersTime(t *testing.T) {
	s := ledgerRig(t, func(a archive.Archive) archive.Archive { return &slowArchive{Archive: a, list: time.Hour} })
	s.ledgerReserve = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	list, err := s.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}))
	if err != nil || list.Msg.GetArchiveUnavailable() == "" || len(list.Msg.GetDeadLetters()) != 1 || !list.Msg.GetDeadLetters()[0].GetUnarchived() {
		t.Fatalf("list: %v, %v; want the ledgers' dead letter", list, err)
	}
}

// Stats from the ledgers answer copies of the dead letters' times, not the
// ledger's own (a caller or the encoder may change what it is given).
func TestLedgerStatsDoNotShareTheLedgersTimes(t *testing.T) {
	dl := dead("waiting", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS)
	dl.Event.DestinationId = "orders"
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	dl.DeadAt = timestamppb.New(at)
	s := &Service{ledgers: fixedLedgers{dl}}
	resp, err := s.DeadLetterStats(context.Background(), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{LedgersOnly: true}))
	if err != nil || len(resp.Msg.GetCounts()) != 1 {
		t.Fatalf("stats: %v, %v", resp, err)
	}
	n := resp.Msg.GetCounts()[0]
	if n.GetOldest() == dl.GetDeadAt() || n.GetNewest() == dl.GetDeadAt() {
		t.Fatalf("the count's oldest/newest are the ledger's dead_at itself")
	}
	n.Oldest.Seconds, n.Newest.Seconds = 0, 0
	if !dl.GetDeadAt().AsTime().Equal(at) {
		t.Errorf("changing the answer changed the ledger's dead letter: dead_at %v", dl.GetDeadAt().AsTime())
	}
}

// An archive that refuses access (wrong credentials) is not an outage:
// waiting does not fix it. list and stats answer from the ledgers, saying
// what is wrong and which flags to check; an object refused after the
// archive answered is FailedPrecondition, not Unavailable ("try again
// shortly").
func TestARefusedArchiveSaysWhatIsWrong(t *testing.T) {
	denied := fmt.Errorf("list archive deadletter/orders/: %w", minio.ErrorResponse{Code: "InvalidAccessKeyId", Message: "The Access Key Id you provided does not exist in our records."})
	s := ledgerRig(t, func(a archive.Archive) archive.Archive { return &slowArchive{Archive: a, listErr: denied} })
	filter := &rivorav1.DeadLetterFilter{DestinationId: "orders"}
	ctx := context.Background()
	says := func(what, why string) {
		t.Helper()
		if !strings.Contains(why, "refused access (InvalidAccessKeyId)") || !strings.Contains(why, "--s3-access-key") {
			t.Errorf("%s: archive_unavailable %q; want it to say the archive refused access and which flags to check", what, why)
		}
	}
	list, err := s.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: filter}))
	if err != nil || len(list.Msg.GetDeadLetters()) != 1 || !list.Msg.GetDeadLetters()[0].GetUnarchived() {
		t.Fatalf("list: %v, %v; want the ledgers' dead letter", list, err)
	}
	says("list", list.Msg.GetArchiveUnavailable())
	stats, err := s.DeadLetterStats(ctx, connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: filter}))
	if err != nil || stats.Msg.GetTotal() != 1 {
		t.Fatalf("stats: %v, %v; want the ledgers' count", stats, err)
	}
	says("stats", stats.Msg.GetArchiveUnavailable())

	objectDenied := fmt.Errorf("archive deadletter/orders/x: %w", minio.ErrorResponse{Code: "AccessDenied", Message: "Access Denied."})
	s = ledgerRig(t, func(a archive.Archive) archive.Archive { return &slowArchive{Archive: a, getErr: objectDenied} })
	_, err = s.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: filter}))
	if code := errkind.CodeOf(err); code != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "--s3-secret-key") {
		t.Fatalf("list of a refused object: %v (%v); want FailedPrecondition naming the credentials' flags", err, code)
	}
}
