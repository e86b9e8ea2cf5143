package api

import (
	"context"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/deadletters"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// archiveService is rivora.v1.ArchiveService: the dead-letter service's,
// with a listing or count of one subscription that finds nothing answered
// as that subscription's absence when it is unknown, or another
// customer's (server.unknownSubscription), as the events and lanes
// listings answer.
type archiveService struct {
	*deadletters.Service
	srv *server
}

func (a *archiveService) ListDeadLetters(ctx context.Context, req *connect.Request[rivorav1.ListDeadLettersRequest]) (*connect.Response[rivorav1.ListDeadLettersResponse], error) {
	resp, err := a.Service.ListDeadLetters(ctx, req)
	if err == nil && len(resp.Msg.GetDeadLetters()) == 0 {
		if err := a.srv.unknownSubscription(ctx, req.Msg.GetFilter().GetSubscriptionId()); err != nil {
			return nil, err
		}
	}
	return resp, err
}

func (a *archiveService) DeadLetterStats(ctx context.Context, req *connect.Request[rivorav1.DeadLetterStatsRequest]) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
	resp, err := a.Service.DeadLetterStats(ctx, req)
	if err == nil && resp.Msg.GetTotal() == 0 {
		if err := a.srv.unknownSubscription(ctx, req.Msg.GetFilter().GetSubscriptionId()); err != nil {
			return nil, err
		}
	}
	return resp, err
}
