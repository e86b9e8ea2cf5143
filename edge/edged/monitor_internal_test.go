package edged

import (
	"strings"
	"testing"
)

// The edge's log says whether its leaf connection was lost after it was
// up (a cut, a cell that stopped) or cannot be made, as natsd's LeafError
// says it, and hints accordingly.
func TestLinkDownSaysWhatHappened(t *testing.T) {
	for _, tc := range []struct {
		err, line, hint string
	}{
		{"leaf connection 127.0.0.1:7422 - lid:6 lost after it was up: Stale Connection - Remote: cell", "lost the leaf connection to the cell", "the link was up, then cut"},
		{"leaf connection 127.0.0.1:7422 - lid:6 closed before it was up: Read Error", "cannot connect to the cell's leaf port", "hung up before the NATS handshake"},
		{`Error trying to connect as leafnode to remote server "127.0.0.1:7422" (attempt 2): dial tcp 127.0.0.1:7422: connect: connection refused`, "cannot connect to the cell's leaf port", "nothing listens there"},
	} {
		if got := linkDown(tc.err); !strings.Contains(got, tc.line) {
			t.Errorf("linkDown(%q) = %q, want %q", tc.err, got, tc.line)
		}
		if got := linkHint(tc.err); !strings.Contains(got, tc.hint) {
			t.Errorf("linkHint(%q) = %q, want %q", tc.err, got, tc.hint)
		}
	}
}
