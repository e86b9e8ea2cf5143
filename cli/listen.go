package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// listenMaxBody bounds a request body listen reads (and sends to
// VerifyDelivery, whose messages are bounded to 4 MiB).
const listenMaxBody = 4<<20 - 64<<10

// listenFailStatus is what --fail-first answers: a server error, which
// Rivora retries.
const listenFailStatus = http.StatusInternalServerError

// listenDrain bounds how long a Ctrl-C waits for the requests being
// answered (a --delay) before it cuts them short.
const listenDrain = 5 * time.Second

// listenMaxLookups bounds the post-answer lookups running at once:
// anyone who reaches the listener can send forged webhook-ids, and each
// costs RPCs made with the user's token. Past it a line goes without.
const listenMaxLookups = 4

// listenLookupDrain bounds how long listen, stopping, waits for the
// post-answer lookups, which the first Ctrl-C cancels: only for their lines.
const listenLookupDrain = time.Second

// listenMaxTracked bounds the webhook-ids --fail-first remembers; past it
// they are forgotten all at once (a development tool, not a ledger).
const listenMaxTracked = 100_000

func (e *env) listenCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "listen",
		Usage:     "receive webhooks locally and show each one as it arrives, with its signature checked (for development)",
		UsageText: "rivoractl listen [--listen 127.0.0.1:9000] [--destination D | --secret whsec_…] [--status CODE] [--fail-first N] [--delay DUR] [-o json]",
		Description: `A webhook receiver for development: point a destination at it and watch
Rivora's deliveries arrive. Every request prints one line as it arrives:
time, webhook-id, event type, customer, lane, rivora-attempt, payload size,
whether its signature verifies, and the status answered (then, for one
that does not verify, why not).

   rivoractl destinations create orders --url http://127.0.0.1:9000/hook
   rivoractl listen --destination orders

It answers every request, whatever its path, with 200, or:
   --status 503       every request: watch Rivora hold a destination that is
                      down, and deliver the held events once it answers 2xx
   --status 400       every request: watch a poison event use up its attempts
   --fail-first 2     500 to the first 2 tries of each event (by webhook-id),
                      then --status: watch retries
   --delay 2s         wait before answering: a slow receiver

--destination D checks signatures with D's secrets without them leaving
Rivora: each delivery's signature headers and body are sent to Rivora
(AdminService.VerifyDelivery), which answers verified or not and why (for
a destination with --legacy-signature-only, its legacy header's value is
sent and checked instead). Any token that may read D may do this; the
secret is never shown (secrets are shown once, at create or rotation).
--secret whsec_… (or RIVORA_WEBHOOK_SECRET) checks locally instead, with
no call to Rivora: for a subscription's own secret, or when Rivora is
elsewhere. (A subscription
with a secret of its own signs with it, not with D's: --destination shows
its deliveries NOT VERIFIED and names the subscription, looked up by the
event's id once the delivery is answered: its line follows the lookup,
up to 5s, so lines may come out of arrival order. At most 4 lookups run
at once, and Ctrl-C cancels them: a line without one does not name the
subscription.) With neither,
requests are shown NOT VERIFIED.

It listens on loopback (127.0.0.1:9000) unless --listen says otherwise.
Ctrl-C stops it: it takes no more requests and gives those being answered
up to 5s to finish (a --delay); a second Ctrl-C stops at once, and a request
cut short prints its line, marked interrupted. -o json prints one JSON
object per request, one per line: {"time", "method", "path", "webhookId",
"type", "customer", "lane", "attempt", "bytes", "verified", "notVerified",
"answered", "unanswered", "interrupted", "resend", "replay"}.`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "listen", Value: "127.0.0.1:9000", Usage: "`ADDRESS` to listen on (host:port; loopback unless you say otherwise)"},
			&ucli.StringFlag{Name: "destination", Usage: "check signatures with destination `ID`'s secrets, asking Rivora (the secret stays there)"},
			&ucli.StringFlag{Name: "secret", EnvVars: []string{"RIVORA_WEBHOOK_SECRET"}, Usage: "check signatures locally with `SECRET` (whsec_…); prefer RIVORA_WEBHOOK_SECRET: a flag shows in the process list"},
			&ucli.IntFlag{Name: "status", Value: http.StatusOK, Usage: "answer every request with HTTP `CODE` (200–599)"},
			&ucli.IntFlag{Name: "fail-first", Usage: "answer 500 to the first `N` tries of each event (by webhook-id), then --status"},
			durationFlagOf("delay", "wait `DURATION` before answering each request (its line is printed once answered, or says Rivora hung up first, or that Ctrl-C cut it short)", 0, ""),
		},
		Action: e.listen,
	}
}

// receiver is listen's HTTP handler: it checks, prints and answers each
// request.
type receiver struct {
	out       io.Writer
	json      bool
	status    int
	failFirst int
	delay     time.Duration
	// verify checks a request's signature: "" when it verifies, else why
	// not.
	verify func(ctx context.Context, h http.Header, body []byte) string
	// explain (nil: none) says more of why a delivery did not verify,
	// from what Rivora knows of its event (ownSecrets): looked up once
	// the delivery is answered, for it may take seconds, in one of
	// lookups (explainLater).
	explain func(ctx context.Context, eventID string) string
	lookups *lookups

	mu    sync.Mutex // printing, and tries
	tries map[string]int
	// done: listen has stopped; a lookup that outlived its wait prints
	// nothing after listen's last words.
	done bool

	// stopped ends when listen stops answering (set by serveUntilDone;
	// nil: never): a request still being answered then is cut short.
	stopped context.Context
	// asked ends at the first Ctrl-C (set by serveUntilDone; nil: never):
	// a lookup still running then is cut short.
	asked context.Context

	fmu      sync.Mutex // running and whenIdle
	running  int        // requests being handled
	whenIdle chan struct{}
}

func (e *env) listen(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments (options are flags)"); err != nil {
		return err
	}
	r := &receiver{out: e.out, json: e.output == "json", status: c.Int("status"), failFirst: c.Int("fail-first"), delay: flagDuration(c, "delay"), tries: map[string]int{}, lookups: newLookups(listenMaxLookups)}
	switch {
	case r.status < 200 || r.status > 599:
		return usagef("--status %d: answer with an HTTP status from 200 to 599", r.status)
	case r.failFirst < 0:
		return usagef("--fail-first %d: want 0 or more tries to fail", r.failFirst)
	case r.delay < 0:
		return usagef("--delay %s: want 0 or more", r.delay)
	}
	if _, _, err := net.SplitHostPort(c.String("listen")); err != nil {
		return usagef("--listen %q: want HOST:PORT, e.g. 127.0.0.1:9000 (%v)", c.String("listen"), err)
	}
	destination, secret := c.String("destination"), c.String("secret")
	var checking string
	var dest *rivorav1.Destination // --destination, to say if it sends elsewhere
	switch {
	case destination != "" && secret != "":
		return usagef("--destination and --secret both given: check with the destination's secrets (--destination, nothing secret on the command line) or with a secret you hold (--secret), not both")
	case secret != "":
		v, err := webhook.NewVerifier(secret)
		if err != nil {
			return usagef("--secret: %v (want whsec_ and base64, as `destinations create` printed)", err)
		}
		r.verify = func(_ context.Context, h http.Header, body []byte) string { return localCheck(v, h, body) }
		checking = "checking signatures with the secret given"
	case destination != "":
		d, err := e.destinationToListenFor(c, destination)
		if err != nil {
			return err
		}
		r.verify = e.remoteCheck(destination, d.GetLegacySignature().GetHeader())
		r.explain = e.ownSecrets().of
		checking = fmt.Sprintf("checking signatures with the secrets of destination %s at %s", destination, e.server)
		dest = d
	default:
		r.verify = func(context.Context, http.Header, []byte) string {
			return "no secret to check with: pass --destination or --secret"
		}
		checking = "not checking signatures (no --destination or --secret)"
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return usagef("--listen %s: %v (something else is listening there: pick another address with --listen)", c.String("listen"), err)
		}
		return usagef("--listen %s: %v", c.String("listen"), err)
	}
	var note string
	if dest != nil && !pointsAt(dest.GetUrl(), ln.Addr().String()) {
		note = e.elsewhereNote(c, dest, ln.Addr())
	}
	answer := fmt.Sprintf("answering %d", r.status)
	if r.failFirst > 0 {
		answer = fmt.Sprintf("answering %d to the first %d tries of each event, then %d", listenFailStatus, r.failFirst, r.status)
	}
	if r.delay > 0 {
		answer += " after " + r.delay.String()
	}
	fmt.Fprintf(e.errOut, "Listening on %s (any path); %s; %s. Ctrl-C stops.\n", listeningURL(ln.Addr()), checking, answer)
	if note != "" {
		// After the banner, not inside it: the note is a sentence of its own.
		fmt.Fprintf(e.errOut, "  note: %s\n", note)
	}
	if !r.json {
		r.printHeader()
	}
	return e.serveUntilDone(c.Context, ln, r)
}

// destinationToListenFor reads destination id, so that a mistyped id or a
// token that may not read it fails now, not at the first delivery.
func (e *env) destinationToListenFor(c *ucli.Context, id string) (*rivorav1.Destination, error) {
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: id}))
	if err != nil {
		return nil, callFailed(fmt.Sprintf("listen for destination %q", id), err, map[connect.Code]string{
			connect.CodeNotFound:         "create it first: rivoractl destinations create " + id + " --url http://127.0.0.1:9000/hook",
			connect.CodePermissionDenied: "or check with a secret you hold: --secret whsec_…",
		})
	}
	return resp.Msg.GetDestination(), nil
}

// elsewhereNote says that destination d sends somewhere other than the
// listener at addr, and how to point it here: UpdateDestination is an
// admin's, so a token of another role (WhoAmI; unknown counts as not an
// admin) is told that an admin can.
func (e *env) elsewhereNote(c *ucli.Context, d *rivorav1.Destination, addr net.Addr) string {
	update := fmt.Sprintf("rivoractl destinations update %s --url %s/hook", d.GetId(), hookBase(addr))
	how := "an admin token can point it here: " + update
	ctx, cancel := callContext(c)
	defer cancel()
	if me, err := e.tokens().WhoAmI(ctx, connect.NewRequest(&rivorav1.WhoAmIRequest{})); err == nil && me.Msg.GetToken().GetRole() == rivorav1.Role_ROLE_ADMIN {
		how = update
	}
	return fmt.Sprintf("destination %s sends to %s, not here (%s)", d.GetId(), visible(d.GetUrl()), how)
}

// hookBase is the http:// origin that reaches a listener on addr from
// this machine: one bound to every interface (":9000", "0.0.0.0:9000")
// is reached at 127.0.0.1.
func hookBase(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		return fmt.Sprintf("http://127.0.0.1:%d", tcp.Port)
	}
	return "http://" + tcp.String()
}

// remoteCheck asks Rivora whether a request verifies against destination
// id's secrets (AdminService.VerifyDelivery), passing on the value of its
// legacy signature header (legacyHeader; "" when it has none): a
// destination with --legacy-signature-only is verified with that.
func (e *env) remoteCheck(id, legacyHeader string) func(ctx context.Context, h http.Header, body []byte) string {
	admin := e.admin()
	return func(ctx context.Context, h http.Header, body []byte) string {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req := &rivorav1.VerifyDeliveryRequest{
			DestinationId: id, Body: body,
			WebhookId: h.Get(webhook.HeaderID), WebhookTimestamp: h.Get(webhook.HeaderTimestamp), WebhookSignature: h.Get(webhook.HeaderSignature),
		}
		if legacyHeader != "" {
			req.LegacySignature = h.Get(legacyHeader)
		}
		resp, err := admin.VerifyDelivery(ctx, connect.NewRequest(req))
		if err != nil {
			return "could not ask Rivora: " + describe(callFailed("verify", err, nil), e.server, e.tokenSource)
		}
		if resp.Msg.GetVerified() {
			return ""
		}
		return resp.Msg.GetReason()
	}
}

// listenLookup bounds the lookup of a delivery's event that did not
// verify (GetEvent asks every agent): its line waits for it.
const listenLookup = 5 * time.Second

// listenFingerprintTTL is how long a subscription's secret fingerprint is
// kept: its other deliveries, and retries, are usually next, and a
// rotation shows within it.
const listenFingerprintTTL = time.Minute

// ownSecrets looks up, for a delivery not signed with its destination's
// secret, whether its event is a subscription's that signs with a secret
// of its own. A subscription's fingerprint is kept for
// listenFingerprintTTL; one with no secret of its own is not kept (one
// may be added); an event is looked up each time (a delivery names no
// subscription).
type ownSecrets struct {
	env *env
	now func() time.Time
	mu  sync.Mutex
	fps map[string]fingerprintRead // by subscription
}

type fingerprintRead struct {
	fp string
	at time.Time
}

func (e *env) ownSecrets() *ownSecrets {
	return &ownSecrets{env: e, now: time.Now, fps: map[string]fingerprintRead{}}
}

// of says that event eventID is a subscription's that signs with a secret
// of its own, and how to check it: "" when it is not, or when Rivora
// cannot say (an id it does not know: forged).
func (o *ownSecrets) of(ctx context.Context, eventID string) string {
	if eventID == "" {
		return ""
	}
	ev, err := o.env.events().GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: eventID}))
	if err != nil || ev.Msg.GetSubscriptionId() == "" {
		return ""
	}
	sub := ev.Msg.GetSubscriptionId()
	check := "check it with that secret (rivoractl listen --secret, or RIVORA_WEBHOOK_SECRET)"
	fp, err := o.fingerprint(ctx, sub)
	if err != nil {
		return fmt.Sprintf("event %s is subscription %s's, which may sign with a secret of its own: %s", visible(eventID), sub, check)
	}
	if fp == "" {
		return "" // it signs with the destination's secret
	}
	return fmt.Sprintf("event %s is subscription %s's, which signs with its own secret (%s): %s", visible(eventID), sub, fp, check)
}

// fingerprint is subscription sub's own secret's fingerprint ("": it has
// none), read at most listenFingerprintTTL ago.
func (o *ownSecrets) fingerprint(ctx context.Context, sub string) (string, error) {
	o.mu.Lock()
	read, ok := o.fps[sub]
	o.mu.Unlock()
	if ok && o.now().Sub(read.at) < listenFingerprintTTL {
		return read.fp, nil
	}
	s, err := o.env.subscriptions().GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: sub}))
	if err != nil {
		return "", err
	}
	fp := s.Msg.GetSubscription().GetSecretFingerprint()
	o.mu.Lock()
	defer o.mu.Unlock()
	if fp == "" {
		delete(o.fps, sub)
		return "", nil
	}
	if len(o.fps) >= listenMaxTracked {
		clear(o.fps)
	}
	o.fps[sub] = fingerprintRead{fp: fp, at: o.now()}
	return fp, nil
}

// localCheck verifies a request with a secret held here.
func localCheck(v *webhook.Verifier, h http.Header, body []byte) string {
	err := v.Verify(h, body)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, webhook.ErrMissingHeaders) && h.Get(webhook.HeaderID) != "" && h.Get(webhook.HeaderTimestamp) != "":
		// What a destination with --legacy-signature-only sends.
		return "no webhook-signature header, though webhook-id and webhook-timestamp are there: a destination with --legacy-signature-only sends only its partner's legacy signature, which a --secret cannot verify (listen --destination verifies it)"
	case errors.Is(err, webhook.ErrMissingHeaders):
		return "missing webhook-id, webhook-timestamp or webhook-signature header: not sent by Rivora"
	case errors.Is(err, webhook.ErrNoMatch):
		return "no signature matches the secret given: signed with another secret (a subscription with a secret of its own signs with that one, not its destination's), forged, or altered"
	}
	return strings.TrimPrefix(err.Error(), "webhook: ")
}

// pointsAt reports whether a destination URL's host:port is the listen
// address (a wrong port is the usual mistake; a name for the same
// address is taken as pointing here).
func pointsAt(destURL, listen string) bool {
	u, err := url.Parse(destURL)
	if err != nil {
		return false
	}
	_, wantPort, err := net.SplitHostPort(listen)
	if err != nil {
		return true // net.Listen judges the address
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return port == wantPort
}

// serveUntilDone serves r on ln until ctx ends (Ctrl-C), then takes no
// more requests and waits for those being answered (e.stopping): until
// they are, for listenDrain at most, or until a second Ctrl-C. What is
// left is then cut short; each request's line is printed before it
// returns. Only requests are waited for: a connection between requests,
// or opened and silent, does not hold the exit.
func (e *env) serveUntilDone(ctx context.Context, ln net.Listener, r *receiver) error {
	stopped, stop := context.WithCancel(context.Background())
	defer stop()
	r.stopped, r.asked = stopped, ctx
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return stopped }}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("listen: %w", err)
	case <-ctx.Done():
	}
	// Shutdown closes the listener and the idle connections, and ends
	// keep-alives; its own wait (polled, up to 500 ms late) is not used.
	shutdownDone := make(chan struct{})
	go func() {
		srv.Shutdown(stopped)
		close(shutdownDone)
	}()
	if n := r.inFlight(); n > 0 {
		e.stopping(fmt.Sprintf("waiting up to %s for %d %s being answered", listenDrain, n, plural(n, "request")), r.idle(), listenDrain)
	}
	stop() // handlers still waiting print their line, marked interrupted
	srv.Close()
	<-r.idle()
	<-shutdownDone
	<-served
	// The lookups were cancelled with ctx: their lines are on their way.
	r.lookups.close(listenLookupDrain)
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
	return nil
}

// enter and leave count the requests being handled.
func (r *receiver) enter() {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	r.running++
}

func (r *receiver) leave() {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	r.running--
	if r.running == 0 && r.whenIdle != nil {
		close(r.whenIdle)
		r.whenIdle = nil
	}
}

func (r *receiver) inFlight() int {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	return r.running
}

// idle is closed once no request is being handled.
func (r *receiver) idle() <-chan struct{} {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	if r.running == 0 {
		done := make(chan struct{})
		close(done)
		return done
	}
	if r.whenIdle == nil {
		r.whenIdle = make(chan struct{})
	}
	return r.whenIdle
}

// cutShort reports whether listen stopped before answering.
func (r *receiver) cutShort() bool {
	return r.stopped != nil && r.stopped.Err() != nil
}

// delivery is one request as -o json prints it.
type delivery struct {
	Time        time.Time `json:"time"`
	Method      string    `json:"method"`
	Path        string    `json:"path"`
	WebhookID   string    `json:"webhookId"`
	Type        string    `json:"type"`
	Customer    string    `json:"customer"`
	Lane        string    `json:"lane"`
	Attempt     int       `json:"attempt"`
	Bytes       int       `json:"bytes"`
	Verified    bool      `json:"verified"`
	NotVerified string    `json:"notVerified,omitempty"`
	Answered    int       `json:"answered"`
	// Unanswered: Rivora hung up during --delay (its --timeout), so
	// Answered was never sent; the try counts as a timeout.
	Unanswered bool `json:"unanswered,omitempty"`
	// Interrupted: listen stopped (Ctrl-C) before answering, so Answered
	// was never sent; Rivora retries the try.
	Interrupted bool `json:"interrupted,omitempty"`
	Resend      bool `json:"resend,omitempty"`
	Replay      bool `json:"replay,omitempty"`
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.enter()
	defer r.leave()
	d := delivery{Time: time.Now().UTC(), Method: req.Method, Path: req.URL.Path,
		WebhookID: req.Header.Get(webhook.HeaderID), Type: req.Header.Get("rivora-event-type"), Customer: req.Header.Get("rivora-customer"),
		Lane: req.Header.Get("rivora-lane"), Resend: req.Header.Get("rivora-resend") == "1", Replay: req.Header.Get("rivora-replay") == "true"}
	d.Attempt, _ = strconv.Atoi(req.Header.Get("rivora-attempt"))
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, listenMaxBody))
	d.Bytes = len(body)
	switch {
	case err != nil:
		d.NotVerified = fmt.Sprintf("body not read: %v", err)
		d.Answered = http.StatusRequestEntityTooLarge
	default:
		d.NotVerified = r.verify(req.Context(), req.Header, body)
		d.Answered = r.answerFor(d.WebhookID)
	}
	d.Verified = d.NotVerified == ""
	// Why a delivery did not verify may take a lookup: it is answered
	// first, and its line printed once the lookup is done, after this
	// handler returns (explainLater).
	later := err == nil && !d.Verified && r.explain != nil && d.WebhookID != ""
	// With --delay the line is printed once answered: a request Rivora
	// gave up on meanwhile, or that Ctrl-C cut short, was never answered,
	// and says so.
	if r.delay > 0 {
		t := time.NewTimer(r.delay)
		select {
		case <-t.C:
		case <-req.Context().Done(): // stopped is its base context
			t.Stop()
		}
	}
	switch {
	case r.cutShort():
		d.Interrupted = true
	case r.delay > 0 && req.Context().Err() != nil:
		d.Unanswered = true
	}
	if !later {
		r.print(d)
	}
	if !d.Interrupted && !d.Unanswered {
		answerWith(w, d.Answered)
	}
	if later {
		r.explainLater(d)
	}
}

// explainLater prints delivery d's line once a lookup says more of why it
// did not verify (explained). The lookup runs in one of r.lookups, so the
// handler returns once answered: the server reads the next request on the
// connection (Rivora's client reuses them) only then, and a Ctrl-C waits
// only for the requests being answered. When listen is stopping, or
// listenMaxLookups are running, the line is printed without.
func (r *receiver) explainLater(d delivery) {
	if r.asked != nil && r.asked.Err() != nil {
		r.print(d)
		return
	}
	started := r.lookups.start(func() {
		d.NotVerified = r.explained(d)
		r.print(d)
	})
	if !started {
		r.print(d)
	}
}

// answerWith writes the status and a line of text. The whole answer is on
// its way before the handler returns, so a stop that closes the
// connection right after does not cut it.
func answerWith(w http.ResponseWriter, status int) {
	body := fmt.Sprintf("rivoractl listen: %d\n", status)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	io.WriteString(w, body)
	http.NewResponseController(w).Flush()
}

// explained is why delivery d did not verify, with what a lookup of its
// event adds (explain). The lookup runs after the answer, under listen's
// lifetime, not the request's (Rivora may close the connection once
// answered), bounded by listenLookup; the first Ctrl-C cuts it short.
func (r *receiver) explained(d delivery) string {
	base := r.asked
	if base == nil {
		base = context.Background()
	}
	ctx, cancel := context.WithTimeout(base, listenLookup)
	defer cancel()
	if more := r.explain(ctx, d.WebhookID); more != "" {
		return d.NotVerified + "; " + more
	}
	return d.NotVerified
}

// lookups runs the post-answer lookups (receiver.explainLater): at most
// cap(slots) at once, and none once closed, so that close can wait for
// every one it started.
type lookups struct {
	slots   chan struct{}
	mu      sync.Mutex // closed, and running.Add
	closed  bool
	running sync.WaitGroup
}

func newLookups(n int) *lookups { return &lookups{slots: make(chan struct{}, n)} }

// start runs f in a goroutine of l and reports true, or reports false
// (f not run) when every slot is taken or l is closed.
func (l *lookups) start(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	select {
	case l.slots <- struct{}{}:
	default:
		return false
	}
	l.running.Add(1)
	go func() {
		defer l.running.Done()
		defer func() { <-l.slots }()
		f()
	}()
	return true
}

// close refuses new lookups and waits, up to limit, for those running.
func (l *lookups) close(limit time.Duration) {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	done := make(chan struct{})
	go func() {
		l.running.Wait()
		close(done)
	}()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// answerFor is the status for this try of event id: listenFailStatus for
// its first failFirst tries, then status.
func (r *receiver) answerFor(id string) int {
	if r.failFirst == 0 {
		return r.status
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.tries) >= listenMaxTracked {
		clear(r.tries)
	}
	r.tries[id]++
	if r.tries[id] <= r.failFirst {
		return listenFailStatus
	}
	return r.status
}

func (r *receiver) printHeader() {
	fmt.Fprintf(r.out, "%-12s  %-36s  %-16s  %-10s  %-10s  %-7s  %8s  %-12s  %s\n", "TIME", "WEBHOOK-ID", "TYPE", "CUSTOMER", "LANE", "ATTEMPT", "SIZE", "SIGNATURE", "ANSWERED")
}

// print writes one request's line (or JSON object) as it arrives.
func (r *receiver) print(d delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	if r.json {
		b, err := json.Marshal(d)
		if err == nil {
			fmt.Fprintf(r.out, "%s\n", b)
		}
		return
	}
	// The column holds the verdict; why not goes at the end of the line,
	// so that a long reason does not push the columns after it.
	signature, why := "verified", ""
	if !d.Verified {
		signature, why = "NOT VERIFIED", "  (not verified: "+visible(d.NotVerified)+")"
	}
	attempt := "-"
	if d.Attempt > 0 {
		attempt = strconv.Itoa(d.Attempt)
	}
	extra := ""
	if d.Method != http.MethodPost {
		extra = " (" + shown(d.Method+" "+d.Path) + ")"
	}
	if d.Resend {
		extra += " (resend)"
	}
	if d.Replay {
		extra += " (replay)"
	}
	answered := strconv.Itoa(d.Answered)
	switch {
	case d.Interrupted:
		answered = fmt.Sprintf("none: interrupted, listen stopped before answering (Rivora retries), would have been %d", d.Answered)
	case d.Unanswered:
		answered = fmt.Sprintf("none: Rivora hung up during --delay (its timeout), would have been %d", d.Answered)
	}
	fmt.Fprintf(r.out, "%-12s  %-36s  %-16s  %-10s  %-10s  %-7s  %8s  %-12s  %s%s%s\n", d.Time.Local().Format("15:04:05.000"), dash(shown(d.WebhookID)), dash(shown(d.Type)),
		dash(shown(d.Customer)), dash(shown(d.Lane)), attempt, byteSize(d.Bytes), signature, answered, extra, why)
}

// shown makes what a request carries safe to print on a terminal: anyone
// can send one, and control or format characters could rewrite the
// screen (visible escapes them). Long values are cut.
func shown(s string) string {
	s = visible(s)
	if r := []rune(s); len(r) > maxErrorCell {
		return string(r[:maxErrorCell-1]) + "…"
	}
	return s
}

func byteSize(n int) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/1024)
}

// listeningURL is the URL to give Rivora for a listener on addr: one
// bound to every interface ("0.0.0.0:9000", shown by Go as "[::]:9000")
// is reached at 127.0.0.1 from this machine.
func listeningURL(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		return hookBase(addr) + " (every interface)"
	}
	return hookBase(addr)
}
