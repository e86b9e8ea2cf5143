package ports

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeHandsOutBindablePortsOnce: every port handed out can be bound,
// none twice, and (on Linux with the usual range) none from the kernel's
// ephemeral range.
func TestFreeHandsOutBindablePortsOnce(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p, err := Free()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if below != 0 && (p < lowest || p >= below) {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, below)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d handed out but not bindable: %v", p, err)
		}
		l.Close()
	}
}
