package agent_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/rig"
)

// Dead-letter filters are validated like every other id: a "../../"
// destination or customer never reaches the archive (it walked outside it
// and answered with the directory's path), and no answer names a path on
// disk.
func TestDeadLetterFiltersValidateIDs(t *testing.T) {
	t.Parallel()
	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	archive := rivorav1connect.NewArchiveServiceClient(d.HTTPClient(), d.URL, d.As(d.AdminToken))
	ctx := context.Background()
	filters := map[string]*rivorav1.DeadLetterFilter{
		"destination ../../":     {DestinationId: "../../"},
		"destination ..":         {DestinationId: ".."},
		"destination a/b":        {DestinationId: "orders/../../x"},
		"destination with NUL":   {DestinationId: "a\x00b"},
		"destination too long":   {DestinationId: strings.Repeat("x", 65)},
		"customer ../../":        {DestinationId: "orders", CustomerId: "../../etc"},
		"customer only, bad":     {CustomerId: "a b"},
		"since after until":      {DestinationId: "orders", Since: ts(2), Until: ts(1)},
		"destination all dots":   {DestinationId: "..."},
		"destination slash only": {DestinationId: "/"},
		"unknown reason":         {DestinationId: "orders", Reason: 99},
	}
	for name, f := range filters {
		calls := map[string]func() error{
			"ListDeadLetters": func() error {
				_, err := archive.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: f}))
				return err
			},
			"DeadLetterStats": func() error {
				_, err := archive.DeadLetterStats(ctx, connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: f}))
				return err
			},
			"Replay": func() error {
				stream, err := archive.Replay(ctx, connect.NewRequest(&rivorav1.ReplayRequest{Filter: f, DryRun: true}))
				if err != nil {
					return err
				}
				defer stream.Close()
				for stream.Receive() {
				}
				return stream.Err()
			},
		}
		if f.GetCustomerId() == "" && f.GetLaneKey() == "" && f.GetSince() == nil && f.GetReason() == 0 {
			calls["GetDeadLetter"] = func() error {
				_, err := archive.GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "evt-1", DestinationId: f.GetDestinationId()}))
				return err
			}
		}
		for rpc, call := range calls {
			err := call()
			if name == "customer only, bad" && rpc == "Replay" {
				continue // refused for having no destination first
			}
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("%s with %s: %v, want invalid_argument", rpc, name, err)
				continue
			}
			if strings.Contains(err.Error(), d.Dir) || strings.Contains(err.Error(), "/tmp/") {
				t.Errorf("%s with %s: the error names a path on disk: %v", rpc, name, err)
			}
		}
	}
	_, err := archive.GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "../../x"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("GetDeadLetter(event_id ../../x): %v, want invalid_argument", err)
	}
	// A valid filter still works.
	if _, err := archive.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders", CustomerId: "acme"}})); err != nil {
		t.Fatalf("a valid filter: %v", err)
	}
}

func ts(sec int64) *timestamppb.Timestamp { return &timestamppb.Timestamp{Seconds: sec} }
