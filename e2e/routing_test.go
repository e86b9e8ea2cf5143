package e2e

// One address for operators: in a cell of three agents (real Consul, real
// MinIO, separate processes), `rivoractl --server <control plane>` answers
// every operator question, whichever agent owns the destination, because
// the control plane routes each call to the agent that can answer it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/e2e/creds"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
)

// routedDest is one destination of the test, in a partition of owner.
type routedDest struct {
	id        string
	owner     string
	partner   *partner
	delivered []string // lane "ok"
	dead      []string // lane "bad": dead letters, then replayed
}

// TestCellOperatorOneAddress: destinations whose partitions are owned by
// different agents; through the control plane alone, `events get` finds
// delivered and dead events, `dlq list` lists every destination's dead
// letters (the archive is the cell's MinIO) and `replay` delivers them.
// The lanes and events list/resend subtests call the RPCs through the
// control plane with a Connect client, and `rivoractl lanes list` and
// `events list` once each.
func TestCellOperatorOneAddress(t *testing.T) {
	requireRivoractl(t)
	c := startClusterCell(t, 3, 8)
	owners := c.waitOwned(t, 30*time.Second, nil)
	cp := c.cp.URL()
	dests := routedDestinations(t, c, owners)
	publisher := sdk.New(c.agents["a1"].URL(), sdk.WithHTTPClient(authedHTTP), sdk.WithRetry(10, 200*time.Millisecond))
	r := c.rig("a1")

	// Delivered events, then (partners failing, one attempt each) dead
	// letters on another lane.
	for _, d := range dests {
		d.partner = newPartner(t)
		r.createDestination(t, d.id, d.partner, &rivorav1.Limits{MaxAttempts: 1})
		d.delivered = publishN(t, publisher, d.id, "ok", 3)
	}
	for _, d := range dests {
		d.partner.WaitDelivered(t, d.delivered, 60*time.Second)
		d.partner.SetStatus(http.StatusBadRequest)
		d.dead = publishN(t, publisher, d.id, "bad", 2)
	}

	t.Run("events get", func(t *testing.T) {
		for _, d := range dests {
			for _, id := range d.delivered {
				ev := waitCtlEventState(t, cp, id, rivorav1.EventState_EVENT_STATE_DELIVERED)
				if ev.GetDestinationId() != d.id || ev.GetLaneKey() != "ok" || len(ev.GetAttempts()) != 1 {
					t.Errorf("events get %s (owner %s): destination %q lane %q with %d attempts, want %s, ok, 1", id, d.owner, ev.GetDestinationId(), ev.GetLaneKey(), len(ev.GetAttempts()), d.id)
				}
			}
			for _, id := range d.dead {
				ev := waitCtlEventState(t, cp, id, rivorav1.EventState_EVENT_STATE_DEAD)
				if ev.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS {
					t.Errorf("events get %s (owner %s): dead reason %v, want max attempts", id, d.owner, ev.GetDeadReason())
				}
			}
		}
		out, errOut, err := runCtl(cp, "events", "get", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
		if err == nil || !strings.Contains(errOut, "not found") {
			t.Errorf("events get of an unknown id through the control plane: err %v, stdout %q, stderr %q; want a not-found failure", err, out, errOut)
		}
	})

	t.Run("dead letters and replay", func(t *testing.T) {
		for _, d := range dests {
			list := waitDLQAt(t, cp, d.id, len(d.dead), 90*time.Second)
			for _, e := range list {
				if !slices.Contains(d.dead, e.EventID) || e.LaneKey != "bad" || e.LastStatus != 400 {
					t.Errorf("dlq list --destination %s (owner %s): %s on lane %q, last status %d; want one of %v, lane bad, 400", d.id, d.owner, e.EventID, e.LaneKey, e.LastStatus, d.dead)
				}
			}
		}
		// One listing through the control plane holds every agent's dead
		// letters.
		var all []string
		for _, e := range dlqListAt(t, cp, "") {
			all = append(all, e.EventID)
		}
		for _, d := range dests {
			for _, id := range d.dead {
				if !slices.Contains(all, id) {
					t.Errorf("dlq list (all destinations) misses %s of %s, archived by %s", id, d.id, d.owner)
				}
			}
		}
		for _, d := range dests {
			d.partner.SetHealthy()
			out := ctlAt(t, cp, "replay", "--destination", d.id, "-o", "json")
			res := &rivorav1.ReplayResponse{}
			if err := protojson.Unmarshal([]byte(out), res); err != nil {
				t.Fatalf("replay -o json is not a ReplayResponse: %v\n%q", err, out)
			}
			if int(res.GetReplayed()) != len(d.dead) || int(res.GetTotal()) != len(d.dead) || !res.GetDone() {
				t.Errorf("replay --destination %s (owner %s): %v, want %d of %d replayed, done", d.id, d.owner, res, len(d.dead), len(d.dead))
			}
		}
		for _, d := range dests {
			d.partner.WaitDelivered(t, d.dead, 60*time.Second)
			for _, id := range d.dead {
				waitCtlEventState(t, cp, id, rivorav1.EventState_EVENT_STATE_DELIVERED)
			}
		}
	})

	// The RPCs behind `rivoractl lanes` and `events list/resend`, through
	// the control plane. A stuck lane on the last agent: its head fails
	// (400, retried for long) and two events wait behind it.
	lanesClient := rivorav1connect.NewLaneServiceClient(authedHTTP, cp)
	eventsClient := rivorav1connect.NewEventServiceClient(authedHTTP, cp)
	stuckOwner := dests[len(dests)-1].owner
	stuckDest := destinationOwnedBy(t, c, owners, "stuck", stuckOwner)
	stuck := newPartner(t)
	stuck.SetStatus(http.StatusBadRequest)
	r.createDestination(t, stuckDest, stuck, &rivorav1.Limits{MaxAttempts: 1000})
	stuckIDs := publishN(t, publisher, stuckDest, "stuck", 3)
	waitFor(t, 30*time.Second, "the stuck lane's head attempted", func() bool { return stuck.AttemptsOf(stuckIDs[0]) >= 1 })

	t.Run("lanes list", func(t *testing.T) {
		var lane *rivorav1.LaneSummary
		err := poll(30*time.Second, 200*time.Millisecond, func() error {
			resp, err := lanesClient.ListLanes(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: stuckDest, Stuck: true}))
			if err != nil {
				return stopOnCode(t, "ListLanes through the control plane", err)
			}
			for _, l := range resp.Msg.GetLanes() {
				// In a cell the events reach the lane through INGEST and
				// the owner's mover: the last may not be in it yet.
				if l.GetLaneKey() == "stuck" && l.GetDepth() == int32(len(stuckIDs)) {
					lane = l
					return nil
				}
			}
			return fmt.Errorf("no stuck lane of depth %d listed: %v", len(stuckIDs), resp.Msg.GetLanes())
		})
		if err != nil {
			t.Fatalf("lanes list --destination %s --stuck (owner %s) through the control plane: %v", stuckDest, stuckOwner, err)
		}
		if out, errOut, err := runCtl(cp, "lanes", "list", "--destination", stuckDest, "--stuck", "-o", "json"); err != nil || !strings.Contains(out, stuckIDs[0]) {
			t.Errorf("rivoractl lanes list --destination %s --stuck through the control plane: err %v, stdout %q, stderr %q; want its head %s", stuckDest, err, out, errOut, stuckIDs[0])
		}
		if lane.GetDepth() != 3 || lane.GetHeadEventId() != stuckIDs[0] || lane.GetLastStatus() != 400 || lane.GetHeadAttempts() < 1 || lane.GetHeadSince() == nil {
			t.Errorf("stuck lane: depth %d head %s attempts %d last status %d head since %v; want depth 3, head %s, ≥1 attempt, 400, a time",
				lane.GetDepth(), lane.GetHeadEventId(), lane.GetHeadAttempts(), lane.GetLastStatus(), lane.GetHeadSince(), stuckIDs[0])
		}
	})

	t.Run("lanes skip", func(t *testing.T) {
		var skipped *rivorav1.SkipLaneHeadResponse
		err := poll(30*time.Second, 100*time.Millisecond, func() error {
			resp, err := lanesClient.SkipLaneHead(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.SkipLaneHeadRequest{
				DestinationId: stuckDest, CustomerId: "cust", LaneKey: "stuck", HeadEventId: stuckIDs[0], Reason: "poison event", Author: "e2e"}))
			if connect.CodeOf(err) == connect.CodeFailedPrecondition {
				return err // the head is in flight: try again once its attempt ends
			}
			if err != nil {
				return stopOnCode(t, "SkipLaneHead through the control plane", err)
			}
			skipped = resp.Msg
			return nil
		})
		if err != nil {
			t.Fatalf("lanes skip %s --lane stuck (owner %s) through the control plane: %v", stuckDest, stuckOwner, err)
		}
		if skipped.GetEventId() != stuckIDs[0] || skipped.GetRemaining() != 2 {
			t.Errorf("skip: event %s, %d remaining; want %s, 2", skipped.GetEventId(), skipped.GetRemaining(), stuckIDs[0])
		}
		list := waitDLQAt(t, cp, stuckDest, 1, 60*time.Second)
		if list[0].EventID != stuckIDs[0] || list[0].Reason != "manual" {
			t.Errorf("dlq list after the skip: %s reason %q, want %s reason manual", list[0].EventID, list[0].Reason, stuckIDs[0])
		}
		if e := findAudit(r.auditJSON(t), "lane.skip", stuckDest); e == nil || e.GetAuthor() != "bootstrap" || e.GetTokenId() == "" || e.GetReason() != "poison event" {
			t.Errorf("audit lane.skip of %s: %v, want author bootstrap (the token that skipped, not the request's author), reason \"poison event\"", stuckDest, e)
		}
		stuck.SetHealthy()
		stuck.WaitDelivered(t, stuckIDs[1:], 60*time.Second)
	})

	t.Run("events list", func(t *testing.T) {
		for _, d := range dests {
			var listed []string
			err := poll(30*time.Second, 200*time.Millisecond, func() error {
				resp, err := eventsClient.ListEvents(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.ListEventsRequest{
					DestinationId: d.id, CustomerId: "cust", LaneKey: "ok", State: rivorav1.EventState_EVENT_STATE_DELIVERED}))
				if err != nil {
					return stopOnCode(t, "ListEvents through the control plane", err)
				}
				listed = listed[:0]
				for _, e := range resp.Msg.GetEvents() {
					listed = append(listed, e.GetEventId())
				}
				for _, id := range d.delivered {
					if !slices.Contains(listed, id) {
						return fmt.Errorf("delivered event %s not listed (listed %v)", id, listed)
					}
				}
				return nil
			})
			if err != nil {
				t.Errorf("events list --destination %s --state delivered (owner %s) through the control plane: %v", d.id, d.owner, err)
			}
			out, errOut, err := runCtl(cp, "events", "list", "--destination", d.id, "--state", "delivered", "-o", "json")
			for _, id := range d.delivered {
				if err != nil || !strings.Contains(out, id) {
					t.Errorf("rivoractl events list --destination %s --state delivered through the control plane: err %v, stderr %q; want %s in %q", d.id, err, errOut, id, out)
				}
			}
		}
	})

	t.Run("events resend", func(t *testing.T) {
		d := dests[len(dests)-1]
		id := d.delivered[0]
		resp, err := eventsClient.ResendEvent(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.ResendEventRequest{EventId: id, Reason: "partner lost it", Author: "e2e"}))
		if err != nil {
			t.Fatalf("events resend %s (owner %s) through the control plane: %v", id, d.owner, err)
		}
		if resp.Msg.GetWas() != rivorav1.EventState_EVENT_STATE_DELIVERED || resp.Msg.GetDestinationId() != d.id {
			t.Errorf("resend %s: was %v, destination %s; want delivered, %s", id, resp.Msg.GetWas(), resp.Msg.GetDestinationId(), d.id)
		}
		waitFor(t, 60*time.Second, "the resent event delivered again", func() bool { return d.partner.OKCount(id) >= 2 })
	})

	t.Run("embedded NATS needs the cell's credential", func(t *testing.T) {
		for _, name := range c.names {
			url := c.natsURLs[name]
			for what, opts := range map[string][]nats.Option{
				"no credential":    {nats.RootCAs(runPKI().caFile)},
				"a wrong password": {nats.RootCAs(runPKI().caFile), nats.UserInfo(natsd.User, "guess")},
				"the admin token":  {nats.RootCAs(runPKI().caFile), nats.Token(creds.For(cp))},
			} {
				if nc, err := nats.Connect(url, append(opts, nats.Timeout(5*time.Second))...); err == nil {
					nc.Close()
					t.Errorf("%s's NATS at %s took a client with %s", name, url, what)
				}
			}
			nc, err := nats.Connect(url, append(cellNATS(t), nats.Timeout(5*time.Second))...)
			if err != nil {
				t.Fatalf("%s's NATS at %s with the cell's credential: %v", name, url, err)
			}
			nc.Close()
		}
	})

	t.Run("revoked and expired tokens refused on every agent within 1s", func(t *testing.T) {
		admin := creds.For(cp)
		var agentURLs []string
		for _, name := range c.names {
			agentURLs = append(agentURLs, c.agents[name].URL())
		}
		revoked := mintToken(t, cp, admin, "pub-revoked", rivorav1.Role_ROLE_PUBLISHER, "*")
		waitAccepted(t, agentURLs, revoked)
		revokeAt := time.Now()
		if _, err := tokenClient(cp, admin).RevokeToken(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.RevokeTokenRequest{Id: tokenID(t, cp, admin, "pub-revoked")})); err != nil {
			t.Fatalf("revoke: %v", err)
		}
		for url, took := range waitRefused(t, agentURLs, revoked) {
			t.Logf("revoked token refused by %s %s after the revoke was sent", url, took.Sub(revokeAt).Round(time.Millisecond))
			if took.Sub(revokeAt) > time.Second {
				t.Errorf("agent %s still took the revoked token %s after the revoke", url, took.Sub(revokeAt))
			}
		}

		resp, err := tokenClient(cp, admin).CreateToken(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.CreateTokenRequest{
			Name: "pub-expiring", Role: rivorav1.Role_ROLE_PUBLISHER, Customers: []string{"*"}, Ttl: durationpb.New(3 * time.Second)}))
		if err != nil {
			t.Fatalf("create an expiring token: %v", err)
		}
		expiring, expiresAt := resp.Msg.GetToken(), resp.Msg.GetTokenInfo().GetExpiresAt().AsTime()
		waitAccepted(t, agentURLs, expiring)
		for url, at := range waitRefused(t, agentURLs, expiring) {
			t.Logf("expired token refused by %s %s after it expired", url, at.Sub(expiresAt).Round(time.Millisecond))
			if at.Sub(expiresAt) > time.Second {
				t.Errorf("agent %s still took the token %s after it expired", url, at.Sub(expiresAt))
			}
		}
	})
}

// probeToken asks agent url, with token, about an event that does not
// exist: "401" once the token is refused, "ok" while it is taken.
func probeToken(ctx context.Context, url, token string) string {
	got, _ := callAs(ctx, url, rivorav1connect.EventServiceGetEventProcedure, rpcCase{body: `{"eventId":"01900000-0000-7000-8000-000000000000"}`}, token)
	return got
}

// waitAccepted waits until every agent takes token (new tokens reach the
// agents with the config feed).
func waitAccepted(t testing.TB, urls []string, token string) {
	t.Helper()
	for _, url := range urls {
		waitFor(t, 10*time.Second, "agent "+url+" takes the new token", func() bool { return probeToken(context.Background(), url, token) == "ok" })
	}
}

// waitRefused polls every agent at once until it refuses token, and
// returns when each first did.
func waitRefused(t testing.TB, urls []string, token string) map[string]time.Time {
	t.Helper()
	type refusal struct {
		url string
		at  time.Time
	}
	out := make(chan refusal, len(urls))
	for _, url := range urls {
		go func() {
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if probeToken(context.Background(), url, token) == "401" {
					out <- refusal{url, time.Now()}
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			out <- refusal{url, time.Time{}}
		}()
	}
	got := map[string]time.Time{}
	for range urls {
		r := <-out
		if r.at.IsZero() {
			t.Fatalf("agent %s still takes the token 10s later", r.url)
		}
		got[r.url] = r.at
	}
	return got
}

// routedDestinations picks one destination in a partition of each agent
// and fails unless at least two different agents own them.
func routedDestinations(t *testing.T, c *clusterCell, owners map[uint32]string) []*routedDest {
	t.Helper()
	var out []*routedDest
	for _, name := range c.names {
		if slices.Contains(slices.Collect(maps.Values(owners)), name) {
			out = append(out, &routedDest{id: destinationOwnedBy(t, c, owners, "route-"+name, name), owner: name})
		}
	}
	if len(out) < 2 {
		t.Fatalf("partitions %v are owned by fewer than two agents: the test would not route anywhere", owners)
	}
	for _, d := range out {
		t.Logf("destination %s: partition %d, owned by %s", d.id, lanes.Partition(d.id, c.partitions), d.owner)
	}
	return out
}

// destinationOwnedBy returns a destination id (prefix-N) in a partition
// owner owns.
func destinationOwnedBy(t *testing.T, c *clusterCell, owners map[uint32]string, prefix, owner string) string {
	t.Helper()
	for i := range 1000 {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if owners[uint32(lanes.Partition(id, c.partitions))] == owner {
			return id
		}
	}
	t.Fatalf("no destination id %s-N in a partition of %s (owners %v)", prefix, owner, owners)
	return ""
}

// publishN publishes n events on one lane of customer "cust" and returns
// their ids in order.
func publishN(t *testing.T, c *sdk.Client, dest, lane string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id, err := c.Publish(ctxTimeout(t, 30*time.Second), sdk.Event{Destination: dest, Customer: "cust", Lane: lane, Type: "route.test",
			Payload: payloadFor(dest, lane, i, 64), ContentType: "application/json"})
		if err != nil {
			t.Fatalf("publish %s/%s #%d: %v", dest, lane, i, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// eventAt runs `rivoractl events get ID -o json` against server.
func eventAt(server, id string) (*rivorav1.GetEventResponse, error) {
	out, errOut, err := runCtl(server, "events", "get", id, "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("rivoractl events get %s: %v: %s", id, err, strings.TrimSpace(errOut))
	}
	ev := &rivorav1.GetEventResponse{}
	if err := protojson.Unmarshal([]byte(out), ev); err != nil {
		return nil, fmt.Errorf("events get -o json is not a GetEventResponse: %v\n%s", err, out)
	}
	return ev, nil
}

// waitCtlEventState polls `rivoractl events get` through server until the event is in
// state.
func waitCtlEventState(t *testing.T, server, id string, state rivorav1.EventState) *rivorav1.GetEventResponse {
	t.Helper()
	var ev *rivorav1.GetEventResponse
	err := poll(60*time.Second, 200*time.Millisecond, func() error {
		var err error
		if ev, err = eventAt(server, id); err != nil {
			return err
		}
		if ev.GetState() != state {
			return fmt.Errorf("state %v", ev.GetState())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("events get %s through %s: not %v within 60s: %v", id, server, state, err)
	}
	return ev
}

// dlqListAt runs `rivoractl dlq list [--destination dest] -o json`
// against server.
func dlqListAt(t *testing.T, server, dest string) []dlqEntry {
	t.Helper()
	list, err := tryDLQListAt(server, dest)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func tryDLQListAt(server, dest string) ([]dlqEntry, error) {
	args := []string{"dlq", "list", "--limit", "100000", "-o", "json"}
	if dest != "" {
		args = append(args, "--destination", dest)
	}
	out, errOut, err := runCtl(server, args...)
	if err != nil {
		return nil, fmt.Errorf("rivoractl dlq list: %v: %s", err, strings.TrimSpace(errOut))
	}
	var list []dlqEntry
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("rivoractl dlq list -o json: %v\n%s", err, out)
	}
	return list, nil
}

// waitDLQAt polls `dlq list --destination dest` through server until it
// lists n dead letters; more fails at once.
func waitDLQAt(t *testing.T, server, dest string, n int, timeout time.Duration) []dlqEntry {
	t.Helper()
	var list []dlqEntry
	err := poll(timeout, 250*time.Millisecond, func() error {
		var err error
		if list, err = tryDLQListAt(server, dest); err != nil {
			return err
		}
		switch {
		case len(list) > n:
			t.Fatalf("dlq list --destination %s shows %d dead letters, want %d", dest, len(list), n)
		case len(list) < n:
			return fmt.Errorf("%d of %d listed", len(list), n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("dlq list --destination %s through %s: not %d dead letters within %s: %v", dest, server, n, timeout, err)
	}
	return list
}

// stopOnCode fails the test at once on an error that retrying cannot
// mend (Unimplemented: the agent does not serve the RPC yet); others are
// returned for the poll to retry.
func stopOnCode(t *testing.T, what string, err error) error {
	t.Helper()
	switch connect.CodeOf(err) {
	case connect.CodeUnimplemented, connect.CodeInvalidArgument, connect.CodeNotFound:
		t.Fatalf("%s: %v", what, err)
	}
	return err
}

// TestAgentWithoutArchiveRefuses: `rivora agent` without --s3-endpoint
// (and without --allow-local-archive) exits 2 before it starts, saying
// why and what to give.
func TestAgentWithoutArchiveRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, rivoraBin, "agent", "--name", "a1", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--controlplane", "http://127.0.0.1:1", "--cell-token-file", cellTokenFile())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("rivora agent without an archive: %v, want exit status 2\nstderr:\n%s", err, stderr.String())
	}
	for _, want := range []string{"--s3-endpoint", "--allow-local-archive", "invisible to the other agents"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not mention %q:\n%s", want, stderr.String())
		}
	}
}

// TestOneAgentCellOperatorThroughControlPlane: without Consul (one agent
// owns every partition, as it reports), the control plane answers events
// get and dlq list too.
func TestOneAgentCellOperatorThroughControlPlane(t *testing.T) {
	requireRivoractl(t)
	c := startCell(t, cellOptions{})
	r := c.rig()
	p := newPartner(t)
	r.createDestination(t, "solo", p, &rivorav1.Limits{MaxAttempts: 1})
	ids := publishN(t, r.SDK(), "solo", "ok", 2)
	p.WaitDelivered(t, ids, 30*time.Second)
	for _, id := range ids {
		waitCtlEventState(t, c.cp.URL(), id, rivorav1.EventState_EVENT_STATE_DELIVERED)
	}
	p.SetStatus(http.StatusBadRequest)
	dead := publishN(t, r.SDK(), "solo", "bad", 1)
	list := waitDLQAt(t, c.cp.URL(), "solo", 1, 60*time.Second)
	if list[0].EventID != dead[0] {
		t.Errorf("dlq list through the control plane: %s, want %s", list[0].EventID, dead[0])
	}
}
