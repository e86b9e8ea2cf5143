package e2e

// Issue 11, "attempts that count": a partner that is down costs no event;
// its events wait for it until their window ends, while a payload the
// partner refuses on its own still ends after max_attempts.

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// switchboard is a partner address on 127.0.0.1 that can stop listening
// (connections refused) and listen again, serving a partner's handler.
type switchboard struct {
	t    testing.TB
	addr string
	h    http.Handler

	mu  sync.Mutex
	srv *http.Server
}

// newSwitchboard reserves a port for h; it refuses connections until
// listen.
func newSwitchboard(t testing.TB, h http.Handler) *switchboard {
	t.Helper()
	s := &switchboard{t: t, addr: "127.0.0.1:" + strconv.Itoa(freePort(t)), h: h}
	t.Cleanup(s.refuse)
	return s
}

func (s *switchboard) URL() string { return "http://" + s.addr + "/hook" }

func (s *switchboard) listen() {
	s.t.Helper()
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatalf("listen again on %s: %v", s.addr, err)
	}
	srv := &http.Server{Handler: s.h}
	go srv.Serve(l)
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
}

// refuse closes the listener and every connection: connections refused.
func (s *switchboard) refuse() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Close()
		s.srv = nil
	}
}

// createDestinationAt registers id → url, where p's handler answers (a
// switchboard or a front in front of p).
func createDestinationAt(t testing.TB, d *devProc, id, url string, p *partner.Partner, limits *rivorav1.Limits) {
	t.Helper()
	resp, err := d.Admin().CreateDestination(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.CreateDestinationRequest{
		Id: id, Url: url, Limits: limits,
	}))
	if err != nil {
		t.Fatalf("CreateDestination %s: %v", id, err)
	}
	if err := p.SetSecret(resp.Msg.GetDestination().GetSecret()); err != nil {
		t.Fatal(err)
	}
	p.SetAlive(d.diedErr)
	waitConfigApplied(t, d, resp.Msg.GetVersion())
}

// deadLetterCount sums rivora_deadletters_total of dest over every reason.
func deadLetterCount(t testing.TB, d *devProc, dest string) int {
	t.Helper()
	total := 0.0
	for line := range strings.Lines(metricsText(t, d)) {
		if !strings.HasPrefix(line, `rivora_deadletters_total{destination="`+dest+`"`) {
			continue
		}
		_, val, _ := strings.Cut(strings.TrimSpace(line), "} ")
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("/metrics %q: %v", line, err)
		}
		total += v
	}
	return int(total)
}

// outageFor is a deliberate observation window: the partner stays down
// until the deadline while rivora dev keeps running and nothing is
// dead-lettered.
func outageFor(t testing.TB, d *devProc, dest string, until time.Time) {
	t.Helper()
	for time.Now().Before(until) {
		if err := d.diedErr(); err != nil {
			t.Fatal(err)
		}
		if n := deadLetterCount(t, d, dest); n > 0 {
			t.Fatalf("%d dead letters %s before the end of the outage; a partner that is down must cost no event", n, time.Until(until).Round(time.Second))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// outageEvents publishes 100 events over 20 lanes of dest (in order per
// lane).
func outageEvents(t testing.TB, d *devProc, dest string) *published {
	t.Helper()
	pub := newPublished()
	publishLanes(t, d.SDK(), plan{Destination: dest, Customer: "acme", Lanes: lanesNamed("u", 20), PerLane: 5, PayloadSize: 128}, pub)
	return pub
}

// heldAndRecovers checks, at the end of an outage, that a lane head says
// it is held by its parked destination with no attempt used, then brings
// the partner back and waits for every event, in lane order.
func heldAndRecovers(t *testing.T, d *devProc, dest string, p *partner.Partner, pub *published, recover func()) {
	t.Helper()
	head := pub.ByLane["acme/u-000"][0]
	mostTries := 0
	for lane, ids := range pub.ByLane {
		resp, err := d.Events().GetEvent(ctxTimeout(t, 5*time.Second), connect.NewRequest(&rivorav1.GetEventRequest{EventId: ids[0]}))
		if err != nil {
			t.Fatalf("GetEvent %s: %v", ids[0], err)
		}
		ev := resp.Msg
		if ids[0] == head {
			t.Logf("events get %s during the outage: %s (%d tries recorded)", head, ev.GetWaiting(), len(ev.GetAttempts()))
		}
		switch {
		case ev.GetState() == rivorav1.EventState_EVENT_STATE_IN_FLIGHT && ev.GetAttemptsUsed() == 0:
			// This lane is the probe right now.
		case !strings.HasPrefix(ev.GetWaiting(), "held: destination parked since ") || !strings.HasSuffix(ev.GetWaiting(), "; 0 of 3 attempts used") ||
			ev.GetAttemptsUsed() != 0 || ev.GetMaxAttempts() != 3 || ev.GetState() != rivorav1.EventState_EVENT_STATE_PENDING:
			t.Errorf("events get %s (head of %s) during the outage: state %v, waiting %q, attempts used %d of %d; want pending, held by the parked destination, 0 of 3 attempts used",
				ids[0], lane, ev.GetState(), ev.GetWaiting(), ev.GetAttemptsUsed(), ev.GetMaxAttempts())
		}
		mostTries = max(mostTries, len(ev.GetAttempts()))
	}
	if mostTries <= 3 {
		t.Errorf("no lane head was tried more than max_attempts 3 times in the outage (most: %d): the test shows nothing", mostTries)
	}
	if rivoractlBuild == nil {
		// The head may be the probe in flight at that moment (the probe
		// goes round the held lanes): ask again until it is back waiting.
		var out string
		for range 20 {
			out = rivoractl(t, d, "events", "get", head)
			if !strings.Contains(out, "in flight") {
				break
			}
			time.Sleep(250 * time.Millisecond) // the probe's round, not synchronisation
		}
		if !strings.Contains(out, "held: destination parked since") || !strings.Contains(out, "WINDOW ENDS") {
			t.Errorf("rivoractl events get %s does not say why it waits:\n%s", head, out)
		}
	}

	recover()
	recovered := time.Now()
	p.WaitDelivered(t, pub.all(), 30*time.Second)
	t.Logf("partner back: all %d events delivered %s later (%d requests in all)", len(pub.all()), time.Since(recovered).Round(time.Millisecond), p.Count())
	rep := checkLaneOrder(t, p, pub.ByLane, pub.Payloads, nil)
	t.Logf("%d lanes in order, %d duplicates", rep.Lanes, rep.Duplicates)
	if n := deadLetterCount(t, d, dest); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
}

// A partner that refuses connections (its listener closed) for 15 s, then
// answers 503 for 15 s: ten times as long as max_attempts 3 lasts (back-offs
// 1 + 2 s). Zero dead letters; once it answers 2xx every event arrives, in
// lane order, within 30 s.
func TestOutageRefusedThen503CostsNoEvent(t *testing.T) {
	d := startDev(t, devOptions{})
	p := newPartner(t)
	sw := newSwitchboard(t, p)
	createDestinationAt(t, d, "crm", sw.URL(), p, &rivorav1.Limits{MaxAttempts: 3})
	start := time.Now()
	pub := outageEvents(t, d, "crm")

	outageFor(t, d, "crm", start.Add(15*time.Second))
	p.SetStatus(http.StatusServiceUnavailable)
	sw.listen()
	outageFor(t, d, "crm", start.Add(30*time.Second))
	if p.Count() == 0 {
		t.Fatal("the partner got no request while it answered 503: the destination is not probed")
	}
	heldAndRecovers(t, d, "crm", p, pub, p.SetHealthy)
}

// The same with a partner that times out: it answers only after 3 s, the
// destination's timeout is 1 s, for 30 s.
func TestOutageTimeoutsCostNoEvent(t *testing.T) {
	d := startDev(t, devOptions{})
	p := newPartner(t)
	// Recorded as a 503 by the partner; Rivora gives up after 1 s first.
	p.SetStatus(http.StatusServiceUnavailable)
	p.SetDelay(3 * time.Second)
	createDestination(t, d, "crm", p, "", &rivorav1.Limits{MaxAttempts: 3, Timeout: durationpb.New(time.Second)})
	start := time.Now()
	pub := outageEvents(t, d, "crm")
	outageFor(t, d, "crm", start.Add(30*time.Second))
	heldAndRecovers(t, d, "crm", p, pub, func() {
		p.SetDelay(0)
		p.SetHealthy()
	})
}

// A partner answering 500 to one event of a customer while it accepts
// another customer's events on the same destination: the destination is
// otherwise healthy, so that event's 500s are its own fault and it is
// dead-lettered after exactly max_attempts 3; its lane moves on and every
// other event arrives in order. (Another customer's; the same customer's
// own flow: TestRetryNotLeftBehindABacklog in agent/scheduler.)
func TestOnePayload500DeadLettersAfterMaxAttempts(t *testing.T) {
	d := startDev(t, devOptions{})
	// Its id follows from its idempotency key, so the partner knows it.
	const badKey = "e2e-bad-payload-1"
	bad := sdk.EventID("shop", "beta", badKey)
	p := partner.New(t, partner.Options{Verify: true, Answer: func(r partner.Request) int {
		if r.ID == bad {
			return http.StatusInternalServerError
		}
		return 0
	}})
	createDestinationAt(t, d, "shop", p.URL(), p, &rivorav1.Limits{MaxAttempts: 3})
	c := d.SDK()
	ctx := ctxTimeout(t, time.Minute)
	pub := newPublished()
	// The others flow before, during and after the bad event's attempts.
	done := make(chan error, 1)
	go func() {
		done <- publishLanesErr(ctx, c, plan{Destination: "shop", Customer: "acme", Lanes: lanesNamed("g", 10), PerLane: 40, PayloadSize: 96}, pub)
	}()
	poll.True(t, "the partner accepting other events", 10*time.Second, func() bool { return p.Delivered() >= 20 })
	badPayload := []byte(`{"n":"refused"}`)
	if _, err := c.Publish(ctx, sdk.Event{Destination: "shop", Customer: "beta", Lane: "b", Type: "t", Payload: badPayload, ContentType: "application/json", IdempotencyKey: badKey}); err != nil {
		t.Fatalf("publish the refused event: %v", err)
	}
	pub.add("beta/b", bad, badPayload)
	for i := range 2 {
		payload := fmt.Appendf(nil, `{"n":%d}`, i)
		id, err := c.Publish(ctx, sdk.Event{Destination: "shop", Customer: "beta", Lane: "b", Type: "t", Payload: payload, ContentType: "application/json"})
		if err != nil {
			t.Fatalf("publish behind the refused event: %v", err)
		}
		pub.add("beta/b", id, payload)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	dl := waitDeadLetter(t, d.DataDir(), "shop", bad, 30*time.Second)
	if dl.GetAttempts() != 3 || dl.GetLastStatus() != 500 || dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS {
		t.Errorf("dead letter: %d attempts, last status %d, reason %v; want 3, 500, max attempts", dl.GetAttempts(), dl.GetLastStatus(), dl.GetReason())
	}
	var others []string
	for _, id := range pub.all() {
		if id != bad {
			others = append(others, id)
		}
	}
	p.WaitDelivered(t, others, 30*time.Second)
	checkLaneOrder(t, p, pub.ByLane, pub.Payloads, map[string]bool{bad: true})
	if n := p.Sent(bad); n != 3 {
		t.Errorf("the refused event reached the partner %d times, want max_attempts 3", n)
	}
	if n := deadLetterCount(t, d, "shop"); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
}

// `destinations create --window 20s` and a partner that is down (503):
// every event becomes a dead letter with reason window 20 s after it was
// accepted and not before: none before 18 s, all by 35 s, and each one's
// dead_at at least 20 s after its accepted_at.
func TestWindowEndsOutageNotBefore(t *testing.T) {
	requireRivoractl(t)
	d := startDev(t, devOptions{})
	p := newPartner(t)
	p.SetStatus(http.StatusServiceUnavailable)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	rivoractl(t, d, "destinations", "create", "crm", "--url", p.URL(), "--secret", secret, "--window", "20s", "--max-attempts", "3", "--wait")
	if err := p.SetSecret(secret); err != nil {
		t.Fatal(err)
	}
	p.SetAlive(d.diedErr)

	start := time.Now()
	pub := newPublished()
	publishLanes(t, d.SDK(), plan{Destination: "crm", Customer: "acme", Lanes: lanesNamed("u", 10), PerLane: 3, PayloadSize: 96}, pub)
	ids := pub.all()
	outageFor(t, d, "crm", start.Add(18*time.Second))

	dead := map[string]*rivorav1.DeadLetter{}
	for _, id := range ids {
		dead[id] = waitDeadLetter(t, d.DataDir(), "crm", id, time.Until(start.Add(35*time.Second)))
	}
	t.Logf("all %d events dead-lettered %s after the first publish", len(ids), time.Since(start).Round(time.Millisecond))
	var earliest, latest time.Duration
	for id, dl := range dead {
		life := dl.GetDeadAt().AsTime().Sub(dl.GetEvent().GetAcceptedAt().AsTime())
		if earliest == 0 || life < earliest {
			earliest = life
		}
		latest = max(latest, life)
		if dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_WINDOW {
			t.Errorf("event %s: reason %v, want window", id, dl.GetReason())
		}
		if life < 20*time.Second {
			t.Errorf("event %s dead %s after acceptance, before its 20 s window closed", id, life)
		}
		if dl.GetAttempts() != 0 {
			t.Errorf("event %s: %d attempts charged by a partner that is down, want 0", id, dl.GetAttempts())
		}
	}
	t.Logf("accepted → dead: %s … %s", earliest.Round(time.Millisecond), latest.Round(time.Millisecond))
	head := pub.ByLane["acme/u-000"][0]
	if dl := dead[head]; dl.GetLastStatus() != 503 {
		t.Errorf("lane head %s: last status %d, want 503", head, dl.GetLastStatus())
	}
	list, err := dlqList(d, "crm")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if e.Reason != "window" {
			t.Errorf("dlq list entry %s: reason %q, want window", e.EventID, e.Reason)
		}
	}
}

// destinationHealth is dest's health as `destinations health` shows it.
func destinationHealth(t testing.TB, d *devProc, dest string) *rivorav1.DestinationHealth {
	t.Helper()
	resp, err := d.Admin().GetDestinationHealth(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: dest}))
	if err != nil {
		t.Fatalf("GetDestinationHealth %s: %v", dest, err)
	}
	if len(resp.Msg.GetDestinations()) != 1 {
		t.Fatalf("GetDestinationHealth %s: %d destinations", dest, len(resp.Msg.GetDestinations()))
	}
	return resp.Msg.GetDestinations()[0]
}

// Issue 22: a partner whose app answers 500 to everything (a crashed app
// behind a load balancer), and one answering a CDN's 520, for a minute,
// with max_attempts 3: no dead letter, each destination degraded or
// parked (never healthy) through the outage, and every event delivered in
// lane order once they answer 2xx.
func TestOutage500And520CostNoEvent(t *testing.T) {
	d := startDev(t, devOptions{})
	statuses := map[string]int{"crash": http.StatusInternalServerError, "cdn": 520}
	partners, published := map[string]*partner.Partner{}, map[string]*published{}
	for dest, status := range statuses {
		p := newPartner(t)
		p.SetStatus(status)
		createDestination(t, d, dest, p, "", &rivorav1.Limits{MaxAttempts: 3})
		partners[dest] = p
	}
	start := time.Now()
	for dest := range statuses {
		published[dest] = outageEvents(t, d, dest)
	}
	for at := 10 * time.Second; at <= time.Minute; at += 10 * time.Second {
		for dest := range statuses {
			outageFor(t, d, dest, start.Add(at))
			if h := destinationHealth(t, d, dest); h.GetState() != "degraded" && h.GetState() != "parked" {
				t.Fatalf("%s (answering %d to everything) is %s %v into the outage; want degraded or parked", dest, statuses[dest], h.GetState(), at)
			}
		}
	}
	for dest, p := range partners {
		t.Run(dest, func(t *testing.T) { heldAndRecovers(t, d, dest, p, published[dest], p.SetHealthy) })
	}
}
