package cli

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// A hint is added only when the server's message does not already say
// what to do.
func TestHintIsNotRepeated(t *testing.T) {
	hints := map[connect.Code]string{connect.CodeFailedPrecondition: "pass --force to archive its pending events as dead letters and delete it"}
	cases := []struct {
		server   string
		withHint bool
	}{
		{`destination "orders" has 3 pending events`, true},
		{`destination "orders" has 3 pending events; wait for them, or delete with --force to archive them as dead letters`, false},
		{"see `rivoractl lanes list`", false},
	}
	for _, c := range cases {
		err := callFailed("delete destination", connect.NewError(connect.CodeFailedPrecondition, errors.New(c.server)), hints)
		got := describe(err, "http://127.0.0.1:8080", "")
		if strings.Contains(got, "pass --force") != c.withHint {
			t.Errorf("server says %q: rivoractl prints %q; hint added: %v, want %v", c.server, got, !c.withHint, c.withHint)
		}
	}
}

// An unavailable server's message that already says to retry is not told
// to "try again shortly" on top; one that does not is.
func TestUnavailableSaysRetryOnce(t *testing.T) {
	cases := []struct {
		server string
		added  bool
	}{
		{"partition 3 has no owner right now; retry (destination \"d2\" is in it; see `rivoractl agents list`)", false},
		{"the archive did not answer; try again in a minute", false},
		{"no agent is connected", true},
	}
	for _, c := range cases {
		got := describe(callFailed("list lanes", connect.NewError(connect.CodeUnavailable, errors.New(c.server)), nil), "http://127.0.0.1:7300", "")
		if strings.Contains(got, "try again shortly") != c.added {
			t.Errorf("server says %q: rivoractl prints %q; want \"try again shortly\" added: %v", c.server, got, c.added)
		}
	}
}
