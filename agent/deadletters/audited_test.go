package deadletters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/rivora/rivora/agent/upstream"
	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A replay whose end record no control plane took yet, but which the
// agent keeps retrying (a control plane's failover), answers success: an
// error invited running the replay again. One refused outright is still
// an error.
func TestAReplayWhoseAuditIsQueuedSucceeds(t *testing.T) {
	r := ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}
	for _, tc := range []struct {
		audit error
		want  bool // an error
	}{
		{audit: fmt.Errorf("deadletters.replay done, but %w: leader gone", upstream.ErrAuditQueued), want: false},
		{audit: errors.New("deadletters.replay done, but not audited: permission denied"), want: true},
	} {
		s := &Service{log: slog.New(slog.DiscardHandler), audit: func(context.Context, *rivorav1.AuditEntry) error { return tc.audit }}
		err := s.audited(context.Background(), r, Progress{Replayed: 3, Total: 3}, nil)
		if (err != nil) != tc.want || (err != nil && !errors.Is(err, errkind.Unavailable)) {
			t.Errorf("audit error %q: replay answered %v; want an error: %v", tc.audit, err, tc.want)
		}
	}
}
