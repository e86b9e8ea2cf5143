package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// A replay outlives no revocation of its token: revoked midway, the
// stream ends unauthenticated, saying so, and the replay stops there, its
// marks kept: a re-run with a valid token sends what is left, and no
// dead letter twice. The audit says why the first run stopped.
func TestRevokedTokenEndsItsReplay(t *testing.T) {
	r := startAgent(t, t.TempDir())
	p := newPartner(t, func(partner.Request) int { return 400 })
	r.create(destination("failing", p.URL(), 1))
	const n = 6
	ids := make([]string, n)
	for i := range ids {
		ids[i] = r.publish("failing", "acme", fmt.Sprintf("u%d", i))
	}
	poll.True(t, "every event dead and archived", 20*time.Second, func() bool {
		_, letters := deadLetters(t, r.Dir, "failing")
		return len(letters) == n
	})
	p.SetAnswer(func(partner.Request) int { return 200 })

	ctx := context.Background()
	created, err := r.Tokens.CreateToken(ctx, connect.NewRequest(&rivorav1.CreateTokenRequest{Name: "night-shift", Role: rivorav1.Role_ROLE_OPERATOR}))
	if err != nil {
		t.Fatal(err)
	}
	r.WaitApplied(created.Msg.GetVersion())
	op := rivorav1connect.NewArchiveServiceClient(r.HTTPClient(), r.URL, r.As(created.Msg.GetToken()))
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// One a second: the revocation comes long before the last.
	stream, err := op.Replay(callCtx, connect.NewRequest(&rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "failing"}, RatePerSecond: proto.Float64(1)}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var last *rivorav1.ReplayResponse
	for last.GetReplayed() == 0 && stream.Receive() {
		last = stream.Msg()
	}
	if last.GetReplayed() == 0 {
		t.Fatalf("the replay ended before re-accepting one dead letter: %v", stream.Err())
	}
	id := created.Msg.GetTokenInfo().GetId()
	if _, err := r.Tokens.RevokeToken(ctx, connect.NewRequest(&rivorav1.RevokeTokenRequest{Id: id})); err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		last = stream.Msg()
	}
	err = stream.Err()
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "token "+id+" (night-shift) was revoked") {
		t.Fatalf("the replay after its token was revoked: %v; want unauthenticated, saying the token was revoked", err)
	}
	if last.GetDone() || last.GetReplayed() >= n {
		t.Fatalf("the replay went on to its end (%v) after its token was revoked", last)
	}
	first := last.GetReplayed()

	admin := rivorav1connect.NewArchiveServiceClient(r.HTTPClient(), r.URL, r.As(r.AdminToken))
	again, err := admin.Replay(ctx, connect.NewRequest(&rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "failing"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for again.Receive() {
		last = again.Msg()
	}
	if err := again.Err(); err != nil || !last.GetDone() {
		t.Fatalf("the re-run: %v, last report %v", err, last)
	}
	if last.GetTotal() != n || last.GetReplayed()+last.GetSkipped() != n || last.GetSkipped() < first || last.GetReplayed() == 0 {
		t.Fatalf("the re-run replayed %d and skipped %d of %d; want the rest of what the first run (%d, or more) left", last.GetReplayed(), last.GetSkipped(), last.GetTotal(), first)
	}
	poll.True(t, "every dead letter delivered once", 20*time.Second, func() bool { return p.Delivered() == n })
	for _, id := range ids {
		if ok := p.OK(id); ok != 1 {
			t.Errorf("event %s delivered %d times; want once", id, ok)
		}
	}

	poll.True(t, "the first run's end audited, with why it stopped", 10*time.Second, func() bool {
		resp, err := r.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "failing"}))
		if err != nil {
			return false
		}
		for _, e := range resp.Msg.GetEntries() {
			if e.GetAction() == "deadletters.replay" && e.GetTokenId() == id && strings.Contains(e.GetDetail(), "stopped: unauthenticated") {
				return true
			}
		}
		return false
	})
}
