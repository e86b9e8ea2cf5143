package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/connectproxy"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// TestEgressProxy: an agent started with --egress-proxy sends every
// delivery through the CONNECT proxy (each request the partner got came
// from one of the proxy's upstream connections, and the proxy was asked
// for the partner's address, never a name); a destination whose name
// resolves to an address the agent's SSRF guard denies is still refused,
// by the agent, without the proxy ever being asked. The control plane
// allows loopback and the agent only 127.0.0.2, where the partner listens,
// so "localhost" (127.0.0.1) passes the control plane's check of the URL
// and is refused where it matters: by the agent, on the resolved address.
func TestEgressProxy(t *testing.T) {
	proxy := connectproxy.Start(t)
	c := startCell(t, cellOptions{
		AgentGuard: []string{"--allow-destination-cidr", "127.0.0.2/32"},
		AgentArgs:  []string{"--egress-proxy", proxy.URL()},
	})
	r := c.rig()
	p := partner.New(t, partner.Options{Verify: true, Listen: "127.0.0.2:0"})
	r.createDestination(t, "via-proxy", p, nil)

	var ids []string
	for lane := range 3 {
		ids = append(ids, publishN(t, r.SDK(), "via-proxy", fmt.Sprintf("l%d", lane), 4)...)
	}
	p.WaitDelivered(t, ids, 30*time.Second)
	reqs := p.Requests()
	for _, rq := range reqs {
		if !proxy.Tunnelled(rq.Remote) {
			t.Fatalf("delivery %s reached the partner from %s, not through the proxy", rq.ID, rq.Remote)
		}
	}
	targets := proxy.Targets()
	partnerAddr := strings.TrimPrefix(p.Base(), "http://")
	for _, target := range targets {
		if target != partnerAddr {
			t.Fatalf("the proxy was asked to CONNECT to %q, want only the partner's address %s", target, partnerAddr)
		}
	}
	t.Logf("%d deliveries, all through the proxy, over %d tunnels", len(reqs), len(targets))

	// A name resolving to a denied address: refused by the agent's guard.
	port := partnerAddr[strings.LastIndexByte(partnerAddr, ':')+1:]
	resp, err := r.Admin().CreateDestination(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.CreateDestinationRequest{
		Id: "denied", Url: "http://localhost:" + port + "/hook", Author: "e2e"}))
	if err != nil {
		t.Fatalf("CreateDestination with localhost (the control plane allows loopback): %v", err)
	}
	r.waitApplied(t, resp.Msg.GetVersion())
	id := publishN(t, r.SDK(), "denied", "l0", 1)[0]
	events := rivorav1connect.NewEventServiceClient(authedHTTP, r.ingestURL)
	err = poll.Check(20*time.Second, 50*time.Millisecond, func() error {
		ev, err := events.GetEvent(ctxTimeout(t, 5*time.Second), connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
		if err != nil {
			return err
		}
		for _, a := range ev.Msg.GetAttempts() {
			if strings.Contains(a.GetError(), "refused by SSRF guard: 127.0.0.1 is in 127.0.0.0/8 (loopback)") {
				return nil
			}
		}
		return fmt.Errorf("event %s: attempts %v, want one refused by the SSRF guard", id, ev.Msg.GetAttempts())
	})
	if err != nil {
		t.Fatal(err)
	}
	if after := proxy.Targets(); len(after) != len(targets) {
		t.Fatalf("the proxy was asked for %v after the refused destination, want nothing more", after[len(targets):])
	}
	if n := len(p.Requests()); n != len(reqs) {
		t.Fatalf("the partner got %d more requests, want none from the refused destination", n-len(reqs))
	}
}
