package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// recordAudit appends an operator action this agent carried out (lane.skip,
// event.resend) to the control plane's audit log, its author the caller
// (auditAuthor). It tries each known
// control plane once, so a follower or a down one does not lose the entry
// while another serves; the error says the action happened but is not
// audited.
func (a *Agent) recordAudit(ctx context.Context, e *rivorav1.AuditEntry) error {
	// Bounds each call that records an operator action.
	httpClient := a.httpClient(5 * time.Second)
	var errs []error
	for range a.controlPlanes() {
		url := a.controlPlaneURL()
		_, err := a.controlPlane(httpClient, url).RecordAudit(ctx, connect.NewRequest(&rivorav1.RecordAuditRequest{Entry: e}))
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", url, err))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			break
		}
		a.nextControlPlane(url)
	}
	return fmt.Errorf("%s done, but not audited: %w", e.GetAction(), errors.Join(errs...))
}

// auditAuthor names the caller of ctx's call in an audit entry: its
// token's name and id, whatever the request's author field says.
func auditAuthor(ctx context.Context, e *rivorav1.AuditEntry) *rivorav1.AuditEntry {
	e.Author, e.TokenId = auth.Author(ctx, "unknown")
	return e
}
