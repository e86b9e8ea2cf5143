package agent

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/rivora/rivora/internal/backoff"
)

// testCreate is a replicatedCreate of 50 ms first attempts.
func testCreate(giveUp time.Duration) *replicatedCreate {
	return &replicatedCreate{
		bounds: backoff.Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second},
		pause:  time.Millisecond,
		giveUp: giveUp,
		log:    slog.New(slog.DiscardHandler),
	}
}

// left is how long an attempt's context had to run when it began.
func left(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return -1
	}
	return time.Until(dl)
}

// An attempt refused at once keeps the short bound (a run of refusals
// while the cell forms must not leave the reply-lost case waiting 5 s);
// only attempts that ran out of their bound double it.
func TestReplicatedCreateDoublesTheBoundOnlyAfterATimeout(t *testing.T) {
	refused := errors.New("no suitable peers for placement")
	var bounds []time.Duration
	err := testCreate(time.Minute).run(t.Context(), "S", func(ctx context.Context) error {
		bounds = append(bounds, left(ctx))
		switch n := len(bounds); {
		case n <= 10:
			return refused
		case n <= 13:
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("run: %v; want the 14th attempt's success", err)
	}
	if len(bounds) != 14 {
		t.Fatalf("%d attempts, want 14", len(bounds))
	}
	// After ten refusals the bound is still the first (50 ms); after
	// three timeouts (50, 100, 200 ms) it is 400 ms.
	if b := bounds[10]; b <= 0 || b > 50*time.Millisecond {
		t.Errorf("the attempt after ten refusals had %s, want the first bound (≤ 50ms)", b)
	}
	if b := bounds[13]; b <= 200*time.Millisecond || b > 400*time.Millisecond {
		t.Errorf("the attempt after three timeouts had %s, want 400ms (more than the third's 200ms)", b)
	}
}

// Each stream starts from the first bound, whatever the one before took.
func TestReplicatedCreateStartsEachStreamShort(t *testing.T) {
	c := testCreate(time.Minute)
	timeouts := 0
	if err := c.run(t.Context(), "A", func(ctx context.Context) error {
		if timeouts < 3 {
			timeouts++
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var first time.Duration
	if err := c.run(t.Context(), "B", func(ctx context.Context) error {
		first = left(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if first <= 0 || first > 50*time.Millisecond {
		t.Errorf("the next stream's first attempt had %s, want the first bound (≤ 50ms)", first)
	}
}

// A create that never succeeds is given up after giveUp, with its last
// error; a cancelled context ends the retries at once.
func TestReplicatedCreateGivesUp(t *testing.T) {
	refused := errors.New("refused")
	attempts := 0
	err := testCreate(300*time.Millisecond).run(t.Context(), "S", func(context.Context) error {
		attempts++
		return refused
	})
	if !errors.Is(err, refused) || attempts < 2 {
		t.Errorf("after giving up: %v in %d attempts, want %v after a few", err, attempts, refused)
	}

	ctx, cancel := context.WithCancel(t.Context())
	attempts = 0
	err = testCreate(time.Hour).run(ctx, "S", func(context.Context) error {
		attempts++
		if attempts == 3 {
			cancel()
		}
		return refused
	})
	if !errors.Is(err, refused) || attempts != 3 {
		t.Errorf("cancelled at the third attempt: %v after %d attempts, want %v after 3", err, attempts, refused)
	}
}
