package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// auditHTTP bounds each call that records an operator action.
var auditHTTP = &http.Client{Timeout: 5 * time.Second}

// recordAudit appends an operator action this agent carried out (lane.skip,
// event.resend) to the control plane's audit log. It tries each known
// control plane once, so a follower or a down one does not lose the entry
// while another serves; the error says the action happened but is not
// audited.
func (a *Agent) recordAudit(ctx context.Context, e *rivorav1.AuditEntry) error {
	var errs []error
	for range a.controlPlanes() {
		url := a.controlPlaneURL()
		_, err := rivorav1connect.NewAgentServiceClient(auditHTTP, url).RecordAudit(ctx, connect.NewRequest(&rivorav1.RecordAuditRequest{Entry: e}))
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
