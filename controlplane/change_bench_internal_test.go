package controlplane

import (
	"fmt"
	"log/slog"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// benchControlPlane is a file-backed control plane with n destinations
// already registered (in one change, so seeding is quick).
func benchControlPlane(b *testing.B, n int) *ControlPlane {
	b.Helper()
	cell, err := auth.NewCellToken()
	if err != nil {
		b.Fatal(err)
	}
	cp, err := New(Config{StateDir: b.TempDir(), Keys: auth.NewKeys(cell), MaxDestinations: 1 << 20}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cp.store.Update(func(all map[string]*rivorav1.Destination) error {
		for i := range n {
			id := fmt.Sprintf("seed-%05d", i)
			all[id] = &rivorav1.Destination{Id: id, Url: "https://example.com/" + id, Secret: "whsec_seed", Configured: &rivorav1.Limits{}, CreatedAt: timestamppb.Now(), UpdatedAt: timestamppb.Now()}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return cp
}

// A change costs what it changes: creating one destination costs the
// same with 0 and with 2,000 others registered (compare the two).
func BenchmarkCreateDestination(b *testing.B) {
	for _, n := range []int{0, 2000} {
		b.Run(fmt.Sprintf("existing=%d", n), func(b *testing.B) {
			cp := benchControlPlane(b, n)
			i := 0
			for b.Loop() {
				i++
				id := fmt.Sprintf("bench-%d", i)
				if _, _, err := cp.createDestination(&rivorav1.CreateDestinationRequest{Id: id, Url: "https://example.com/" + id}, systemActor); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
