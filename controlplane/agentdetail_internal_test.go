package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/errkind"
)

// The mark that hides an error from customer tokens changes nothing else:
// its message, kind, code and wrapped errors stay as they were, wrapped
// further or not.
func TestAgentsFailedKeepsTheError(t *testing.T) {
	down := connect.NewError(connect.CodeUnavailable, errors.New("dial tcp 10.0.0.7:7400: connection refused"))
	marked := fromAgent(&agentState{name: "a1", address: "http://10.0.0.7:7400"}, down)
	for _, err := range []error{marked, fmt.Errorf("skip: %w", marked)} {
		var detail *agentDetailError
		if !errors.As(err, &detail) {
			t.Errorf("%q is not marked as naming agents", err)
		}
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, down) || connect.CodeOf(err) != connect.CodeUnavailable || errkind.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("%q: lost its kind or wrapped error through the mark", err)
		}
	}
	if want := "agent a1 at http://10.0.0.7:7400 did not answer: unavailable: dial tcp 10.0.0.7:7400: connection refused; retry"; marked.Error() != want {
		t.Errorf("message %q, want %q", marked, want)
	}
	if agentsFailed(nil) != nil {
		t.Error("agentsFailed(nil) is not nil")
	}

	// A local failure of another kind keeps its code, marked too; an
	// agent's own answer and a cancelled call are not marked.
	tooLarge := connect.NewError(connect.CodeResourceExhausted, errors.New("message to http://10.0.0.7:7400 is larger than configured max"))
	local := fromAgent(&agentState{name: "a1", address: "http://10.0.0.7:7400"}, tooLarge)
	var detail *agentDetailError
	if !errors.As(local, &detail) || connect.CodeOf(local) != connect.CodeResourceExhausted || local.Error() != tooLarge.Error() {
		t.Errorf("local failure %q (code %v): want it marked, its code and message kept", local, connect.CodeOf(local))
	}
	for _, kept := range []error{connect.NewWireError(connect.CodeNotFound, errors.New("no such destination")), context.Canceled} {
		if got := fromAgent(&agentState{name: "a1"}, kept); got != kept {
			t.Errorf("fromAgent(%q) = %q, want it as it was", kept, got)
		}
	}
}

// A customer token is told a marked error without its detail, and with
// its code: "retry" only where a retry may help.
func TestHiddenAsKeepsTheCode(t *testing.T) {
	down := hiddenAs(agentsFailed(errors.New("dial tcp 10.0.0.7:7400: connection refused")))
	if errkind.CodeOf(down) != connect.CodeUnavailable || down.Error() != hiddenAgentsMessage {
		t.Errorf("an agent down is told %q (code %v), want %q, unavailable", down, errkind.CodeOf(down), hiddenAgentsMessage)
	}
	tooLarge := fromAgent(&agentState{name: "a1", address: "http://10.0.0.7:7400"}, connect.NewError(connect.CodeResourceExhausted, errors.New("message to http://10.0.0.7:7400 is larger than configured max")))
	told := hiddenAs(tooLarge)
	if errkind.CodeOf(told) != connect.CodeResourceExhausted || strings.Contains(told.Error(), "10.0.0.7") || strings.Contains(told.Error(), "retry") {
		t.Errorf("a local failure is told %q (code %v), want its code, no address and no retry", told, errkind.CodeOf(told))
	}
}
