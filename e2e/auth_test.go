package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/rivora/rivora/e2e/creds"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/tlsconf/tlstest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// rpcCase is one RPC of the access matrix: where it is served, a request
// that changes nothing harmful when let in, and who is let in.
type rpcCase struct {
	at   []string // "cp", "agent"
	body string   // Connect JSON request
	// allow: the callers let in (admin, operator, viewer, publisher,
	// customer, cell); everyone else is refused, without a token with 401.
	allow string
	// scoped: a publisher or customer token for another customer than the
	// request's (or answer's) is refused, 403.
	scoped bool
	// hidden: an answer of another customer is not_found, as for an
	// absent id, not 403 (which would tell that the id exists).
	hidden bool
	stream bool
}

// callers of the matrix, in order: "pub" and "cust" are a publisher and
// a customer token for c1, "pub-other" and "cust-other" for c2.
var matrixCallers = []string{"none", "bad", "pub-other", "pub", "cust-other", "cust", "viewer", "operator", "admin", "cell"}

// expected is the answer class ("401", "403", "404" or "ok") of c for
// caller.
func (c rpcCase) expected(caller string) string {
	allowed := strings.Split(c.allow, ",")
	switch caller {
	case "none", "bad":
		return "401"
	case "pub-other", "cust-other":
		role := map[string]string{"pub-other": "publisher", "cust-other": "customer"}[caller]
		switch {
		case !slices.Contains(allowed, role):
			return "403"
		case !c.scoped:
			return "ok"
		case c.hidden:
			return "404"
		}
		return "403"
	case "pub":
		caller = "publisher"
	case "cust":
		caller = "customer"
	}
	if slices.Contains(allowed, caller) {
		return "ok"
	}
	return "403"
}

// TestAuthMatrix calls every RPC of every service, on every process that
// serves it, as each kind of caller, and checks the answer is the
// expected 401, 403 or "let in" (any other answer: the handler ran). The
// table must name every RPC the protos define. Along the way: no answer
// but CreateDestination's carries a signing secret, none at all a client
// certificate's private key or an OAuth2 client secret (d2 has both), and
// the audit names the token whatever the request's author says.
func TestAuthMatrix(t *testing.T) {
	ctx, w := newAuthWorld(t)
	cases := w.cases()
	for _, proc := range allProcedures(t) {
		if _, ok := cases[proc]; !ok {
			t.Errorf("%s is not in the access matrix: add it with who may call it", proc)
		}
	}
	t.Run("no stranger takes over an agent", func(t *testing.T) { w.noStrangerTakesOverAnAgent(ctx, t) })
	t.Run("publisher scope", func(t *testing.T) { w.publisherScope(ctx, t) })
	t.Run("customer scope", func(t *testing.T) { w.customerScope(ctx, t) })
	t.Run("audit names the token", func(t *testing.T) { w.auditNamesTheToken(ctx, t) })
	w.matrix(ctx, t, cases)
}

// authWorld is what TestAuthMatrix's phases share: a cell with two
// destinations (d1 delivers, d2 paused) and c1's own (c1-own), a
// subscription of c1, a delivered event and a dead letter of customer c1,
// and a token per kind of caller.
type authWorld struct {
	c               *cell
	cpURL, agentURL string
	admin           string
	adminC          rivorav1connect.AdminServiceClient
	p               *partner.Partner
	secrets         []string
	tokens          map[string]string
	ingest          rivorav1connect.IngestServiceClient // as publisher c1
	delivered       string                              // event id
	dead            string                              // event id
	sub             string                              // c1's subscription
}

// newAuthWorld starts the cell and makes what the matrix calls with; the
// context bounds the test from then on.
func newAuthWorld(t *testing.T) (context.Context, *authWorld) {
	c := startCell(t, cellOptions{})
	r := c.rig()
	cpURL, agentURL := c.cp.URL(), c.agent.URL()
	admin := creds.For(cpURL)
	p := newPartner(t)
	ctx := ctxTimeout(t, 2*time.Minute)

	// d1 delivers; d2 is paused, so its event waits, and skipping it makes
	// a dead letter of customer c1.
	created, err := tokenClient(cpURL, admin).CreateToken(ctx, connect.NewRequest(&rivorav1.CreateTokenRequest{Name: "probe", Role: rivorav1.Role_ROLE_VIEWER}))
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	if created.Msg.GetTokenInfo().GetHash() != "" {
		t.Fatalf("CreateToken answered the token's hash")
	}
	adminC := adminClient(cpURL, admin)
	d1, err := adminC.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "d1", Url: p.URL()}))
	if err != nil {
		t.Fatalf("CreateDestination d1: %v", err)
	}
	secret := d1.Msg.GetDestination().GetSecret()
	if secret == "" || d1.Msg.GetDestination().GetSecretFingerprint() != auth.Fingerprint(secret) {
		t.Fatalf("CreateDestination's answer: secret %q, fingerprint %q", secret, d1.Msg.GetDestination().GetSecretFingerprint())
	}
	if err := p.SetSecret(secret); err != nil {
		t.Fatal(err)
	}
	d2, err := adminC.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "d2", Url: p.URL()}))
	if err != nil {
		t.Fatalf("CreateDestination d2: %v", err)
	}
	secrets := []string{secret, d2.Msg.GetDestination().GetSecret()}
	// d3 signs ed25519 too and keeps a partner's legacy signature: its
	// secret key and the legacy secret join the secrets no answer carries
	// (not even create's).
	signingKey, _, err := webhook.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	const legacySecret = "legacy-probe-s3cret"
	d3, err := adminC.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "d3", Url: p.URL(), SignatureScheme: "both", SigningKey: signingKey,
		LegacySignature: &rivorav1.LegacySignature{Header: "X-Signature", Secret: legacySecret}}))
	if err != nil {
		t.Fatalf("CreateDestination d3: %v", err)
	}
	if answer := protojson.Format(d3.Msg); strings.Contains(answer, signingKey) || strings.Contains(answer, legacySecret) || d3.Msg.GetDestination().GetPublicKey() == "" {
		t.Fatalf("CreateDestination d3 answered a secret key or legacy secret, or no public key: %s", answer)
	}
	secrets = append(secrets, d3.Msg.GetDestination().GetSecret(), signingKey, legacySecret)
	pause, err := adminC.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "d2", Reason: "hold for the dead letter"}))
	if err != nil {
		t.Fatalf("pause d2: %v", err)
	}
	r.waitApplied(t, pause.Msg.GetVersion())
	secrets = append(secrets, endpointAuthSecrets(ctx, t, adminC)...)

	tokens := map[string]string{
		"admin":      admin,
		"bad":        auth.TokenPrefix + "not-a-token-of-this-cell",
		"pub":        mintToken(t, cpURL, admin, "pub-c1", rivorav1.Role_ROLE_PUBLISHER, "c1"),
		"pub-other":  mintToken(t, cpURL, admin, "pub-c2", rivorav1.Role_ROLE_PUBLISHER, "c2"),
		"cust":       mintToken(t, cpURL, admin, "portal-c1", rivorav1.Role_ROLE_CUSTOMER, "c1"),
		"cust-other": mintToken(t, cpURL, admin, "portal-c2", rivorav1.Role_ROLE_CUSTOMER, "c2"),
		"viewer":     mintToken(t, cpURL, admin, "viewer-1", rivorav1.Role_ROLE_VIEWER),
		"operator":   mintToken(t, cpURL, admin, "ops-1", rivorav1.Role_ROLE_OPERATOR),
		"cell":       cellToken(t),
	}
	ingest := rivorav1connect.NewIngestServiceClient(plainHTTP, agentURL, connect.WithInterceptors(auth.Bearer(tokens["pub"])))
	delivered, err := ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "d1", CustomerId: "c1", LaneKey: "u1", Type: "t", Payload: []byte(`{}`)}))
	if err != nil {
		t.Fatalf("publisher c1 publishes as c1: %v", err)
	}
	p.WaitDelivered(t, []string{delivered.Msg.GetEventId()}, 30*time.Second)
	held, err := ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "d2", CustomerId: "c1", LaneKey: "u1", Type: "t", Payload: []byte(`{}`)}))
	if err != nil {
		t.Fatalf("publish to d2: %v", err)
	}
	dead := held.Msg.GetEventId()
	lanes := rivorav1connect.NewLaneServiceClient(plainHTTP, cpURL, connect.WithInterceptors(auth.Bearer(admin)))
	err = poll.Check(20*time.Second, 50*time.Millisecond, func() error {
		_, err := lanes.SkipLaneHead(ctx, connect.NewRequest(&rivorav1.SkipLaneHeadRequest{DestinationId: "d2", CustomerId: "c1", LaneKey: "u1", Reason: "make a dead letter", HeadEventId: dead}))
		return err
	})
	if err != nil {
		t.Fatalf("skip d2's head: %v", err)
	}
	archive := rivorav1connect.NewArchiveServiceClient(plainHTTP, cpURL, connect.WithInterceptors(auth.Bearer(admin)))
	err = poll.Check(20*time.Second, 50*time.Millisecond, func() error {
		_, err := archive.GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: dead, DestinationId: "d2"}))
		return err
	})
	if err != nil {
		t.Fatalf("the skipped head in the archive: %v", err)
	}

	// c1's portal: its own destination and a subscription with its own
	// secret, which no answer but create's shows.
	// On a partner of its own: a customer token may not own a destination
	// on a shared one's origin (d1's).
	own, err := adminClient(cpURL, tokens["cust"]).CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "c1-own", Url: newPartner(t).URL(), OwnerCustomer: "c1"}))
	if err != nil {
		t.Fatalf("customer c1 creates its own destination: %v", err)
	}
	sub, err := subscriptionClient(cpURL, tokens["cust"]).CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "d1", Types: []string{"order.*"}, GenerateSecret: true}))
	if err != nil {
		t.Fatalf("customer c1 subscribes to d1: %v", err)
	}
	secrets = append(secrets, own.Msg.GetDestination().GetSecret(), sub.Msg.GetSubscription().GetSecret())

	return ctx, &authWorld{c: c, cpURL: cpURL, agentURL: agentURL, admin: admin, adminC: adminC, p: p, secrets: secrets,
		tokens: tokens, ingest: ingest, delivered: delivered.Msg.GetEventId(), dead: dead, sub: sub.Msg.GetSubscription().GetId()}
}

// cases is the access matrix: every RPC, where it is served, who may
// call it.
func (w *authWorld) cases() map[string]rpcCase {
	j := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	publish := `{"destinationId":"d1","customerId":"c1","laneKey":"m","type":"t","payload":"e30="}`
	sub := j(map[string]string{"id": w.sub})
	absentSub := `{"id":"sub_0000000000000000"}`
	return map[string]rpcCase{
		rivorav1connect.AdminServiceCreateDestinationProcedure:    {at: cp, body: `{"ownerCustomer":"c1"}`, allow: "admin,customer", scoped: true},
		rivorav1connect.AdminServiceUpdateDestinationProcedure:    {at: cp, body: `{"id":"nope"}`, allow: "admin"},
		rivorav1connect.AdminServiceDeleteDestinationProcedure:    {at: cp, body: `{"id":"nope"}`, allow: "admin,customer"},
		rivorav1connect.AdminServiceGetDestinationProcedure:       {at: cp, body: `{"id":"c1-own"}`, allow: "admin,operator,viewer,customer", scoped: true, hidden: true},
		rivorav1connect.AdminServiceListDestinationsProcedure:     {at: cp, body: `{}`, allow: "admin,operator,viewer,customer"},
		rivorav1connect.AdminServiceGetDestinationHealthProcedure: {at: cp, body: `{"destinationId":"c1-own"}`, allow: "admin,operator,viewer,customer", scoped: true, hidden: true},
		rivorav1connect.AdminServiceGetLimitsProcedure:            {at: cp, body: `{"destinationId":"d1"}`, allow: "admin,operator,viewer"},
		rivorav1connect.AdminServiceDiffLimitsProcedure:           {at: cp, body: `{}`, allow: "admin,operator,viewer"},
		rivorav1connect.AdminServiceListAuditProcedure:            {at: cp, body: `{}`, allow: "admin,operator,viewer"},
		rivorav1connect.AdminServiceGetConfigStatusProcedure:      {at: cp, body: `{}`, allow: "admin,operator,viewer,customer"},
		rivorav1connect.AdminServiceVerifyDeliveryProcedure:       {at: cp, body: `{"destinationId":"c1-own"}`, allow: "admin,operator,viewer,customer", scoped: true, hidden: true},
		rivorav1connect.AdminServiceListEdgesProcedure:            {at: cp, body: `{}`, allow: "admin,operator,viewer"},
		rivorav1connect.AdminServiceGetEdgeProcedure:              {at: cp, body: `{"name":"nope"}`, allow: "admin,operator,viewer"},
		rivorav1connect.AdminServiceRemoveEdgeProcedure:           {at: cp, body: `{"name":"nope"}`, allow: "admin"},
		rivorav1connect.AdminServiceSetPriorityProcedure:          {at: cp, body: `{"destinationId":"nope"}`, allow: "admin,operator"},
		rivorav1connect.AdminServicePauseDestinationProcedure:     {at: cp, body: `{"destinationId":"nope","reason":"x"}`, allow: "admin,operator"},
		rivorav1connect.AdminServiceResumeDestinationProcedure:    {at: cp, body: `{"destinationId":"nope"}`, allow: "admin,operator"},
		rivorav1connect.AdminServiceSetLimitsOverrideProcedure:    {at: cp, body: `{"destinationId":"nope","reason":"x","ratePerSecond":1}`, allow: "admin,operator"},
		rivorav1connect.AdminServiceClearLimitsOverrideProcedure:  {at: cp, body: `{"destinationId":"nope","reason":"x"}`, allow: "admin,operator"},

		rivorav1connect.AdminServiceRotateDestinationSecretProcedure: {at: cp, body: `{"destinationId":"nope"}`, allow: "admin,customer"},

		rivorav1connect.TokenServiceCreateTokenProcedure: {at: cp, body: `{}`, allow: "admin"},
		rivorav1connect.TokenServiceListTokensProcedure:  {at: cp, body: `{}`, allow: "admin"},
		rivorav1connect.TokenServiceWhoAmIProcedure:      {at: cp, body: `{}`, allow: "admin,operator,viewer,publisher,customer"},
		rivorav1connect.TokenServiceRevokeTokenProcedure: {at: cp, body: `{"id":"tok_0000000000000000"}`, allow: "admin"},

		rivorav1connect.SubscriptionServiceCreateSubscriptionProcedure:       {at: cp, body: `{"customerId":"c1","destinationId":"nope","types":["*"]}`, allow: "admin,operator,customer", scoped: true},
		rivorav1connect.SubscriptionServiceGetSubscriptionProcedure:          {at: cp, body: sub, allow: "admin,operator,viewer,customer", scoped: true, hidden: true},
		rivorav1connect.SubscriptionServiceListSubscriptionsProcedure:        {at: cp, body: `{}`, allow: "admin,operator,viewer,customer"},
		rivorav1connect.SubscriptionServiceUpdateSubscriptionProcedure:       {at: cp, body: sub, allow: "admin,operator,customer", scoped: true, hidden: true},
		rivorav1connect.SubscriptionServicePauseSubscriptionProcedure:        {at: cp, body: absentSub, allow: "admin,operator,customer"},
		rivorav1connect.SubscriptionServiceResumeSubscriptionProcedure:       {at: cp, body: sub, allow: "admin,operator,customer", scoped: true, hidden: true},
		rivorav1connect.SubscriptionServiceRotateSubscriptionSecretProcedure: {at: cp, body: absentSub, allow: "admin,operator,customer"},
		rivorav1connect.SubscriptionServiceDeleteSubscriptionProcedure:       {at: cp, body: absentSub, allow: "admin,operator,customer"},

		rivorav1connect.EventTypeServiceCreateEventTypeProcedure:    {at: cp, body: `{}`, allow: "admin"},
		rivorav1connect.EventTypeServiceUpdateEventTypeProcedure:    {at: cp, body: `{"name":"nope"}`, allow: "admin"},
		rivorav1connect.EventTypeServiceDeprecateEventTypeProcedure: {at: cp, body: `{"name":"nope"}`, allow: "admin"},
		rivorav1connect.EventTypeServiceGetEventTypeProcedure:       {at: cp, body: `{"name":"order.created"}`, allow: "admin,operator,viewer,publisher,customer"},
		rivorav1connect.EventTypeServiceListEventTypesProcedure:     {at: cp, body: `{}`, allow: "admin,operator,viewer,publisher,customer"},

		rivorav1connect.IngestServicePublishProcedure:      {at: ag, body: publish, allow: "admin,publisher,customer,cell", scoped: true},
		rivorav1connect.IngestServicePublishBatchProcedure: {at: ag, body: `{"events":[` + publish + `]}`, allow: "admin,publisher,customer", scoped: true},

		rivorav1connect.EventServiceGetEventProcedure:    {at: both, body: j(map[string]string{"eventId": w.delivered}), allow: "admin,operator,viewer,publisher,customer", scoped: true, hidden: true},
		rivorav1connect.EventServiceListEventsProcedure:  {at: both, body: `{"destinationId":"d1","customerId":"c1"}`, allow: "admin,operator,viewer,publisher,customer", scoped: true},
		rivorav1connect.EventServiceResendEventProcedure: {at: both, body: `{"eventId":"01900000-0000-7000-8000-000000000000","reason":"x"}`, allow: "admin,operator,customer"},

		rivorav1connect.LaneServiceListLanesProcedure:    {at: both, body: `{"destinationId":"d1","customerId":"c1"}`, allow: "admin,operator,viewer,customer", scoped: true},
		rivorav1connect.LaneServiceSkipLaneHeadProcedure: {at: both, body: `{"destinationId":"d1","customerId":"c9","laneKey":"none","reason":"x"}`, allow: "admin,operator"},

		rivorav1connect.ArchiveServiceListDeadLettersProcedure: {at: both, body: `{"filter":{"customerId":"c1"}}`, allow: "admin,operator,viewer,publisher,customer,cell", scoped: true},
		rivorav1connect.ArchiveServiceGetDeadLetterProcedure:   {at: both, body: j(map[string]string{"eventId": w.dead, "destinationId": "d2"}), allow: "admin,operator,viewer,publisher,customer", scoped: true, hidden: true},
		rivorav1connect.ArchiveServiceDeadLetterStatsProcedure: {at: both, body: `{"filter":{"customerId":"c1"}}`, allow: "admin,operator,viewer,customer", scoped: true},
		// A dry run only counts: a viewer may (a replay itself it may not:
		// internal/auth's TestAViewerMayDryRunAReplay).
		rivorav1connect.ArchiveServiceReplayProcedure: {at: both, body: `{"filter":{"destinationId":"d2","customerId":"c1"},"dryRun":true}`, allow: "admin,operator,viewer,customer", scoped: true, stream: true},

		rivorav1connect.AgentServiceReportAppliedProcedure: {at: cp, body: `{"agentName":"ghost","version":1}`, allow: "cell"},
		rivorav1connect.AgentServiceReportOwnedProcedure:   {at: cp, body: `{"agentName":"ghost"}`, allow: "cell"},
		rivorav1connect.AgentServiceReportGoneProcedure:    {at: cp, body: `{"agentName":"ghost","destinationId":"nope"}`, allow: "cell"},
		// An agent the control plane does not know: let in, refused as such.
		rivorav1connect.AgentServiceReportLeavingProcedure: {at: cp, body: `{"agentName":"ghost","session":"none"}`, allow: "cell"},
		rivorav1connect.AgentServiceRecordAuditProcedure:   {at: cp, body: `{"entry":{"action":"e2e.probe","detail":"access matrix"}}`, allow: "cell"},
		// An edge's name that cannot be one: let in, WatchEdge registers nothing.
		rivorav1connect.EdgeServiceReportEdgeProcedure: {at: cp, body: `{"edgeName":"ghost-edge"}`, allow: "cell"},
		rivorav1connect.EdgeServiceWatchEdgeProcedure:  {at: cp, body: `{"edgeName":"not an edge"}`, allow: "cell", stream: true},
		// Watch last: let in, it registers an agent "ghost".
		rivorav1connect.AgentServiceWatchProcedure: {at: cp, body: `{"agentName":"ghost","address":"http://127.0.0.1:1"}`, allow: "cell", stream: true},

		rivorav1connect.PartitionServiceCountPendingProcedure:   {at: ag, body: `{"destinationId":"d1"}`, allow: "cell"},
		rivorav1connect.PartitionServiceArchivePendingProcedure: {at: ag, body: `{"destinationId":"nope"}`, allow: "cell"},
		rivorav1connect.PartitionServiceGetHealthProcedure:      {at: ag, body: `{"destinationId":"d1"}`, allow: "cell"},
	}
}

// noStrangerTakesOverAnAgent: Watch and ReportOwned in an agent's name
// are refused without the cell token.
func (w *authWorld) noStrangerTakesOverAnAgent(ctx context.Context, t *testing.T) {
	c, cpURL, agentURL, adminC, tokens := w.c, w.cpURL, w.agentURL, w.adminC, w.tokens
	for _, caller := range []string{"none", "bad", "admin"} {
		var opts []connect.ClientOption
		if tk := tokens[caller]; tk != "" {
			opts = append(opts, connect.WithInterceptors(auth.Bearer(tk)))
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := rivorav1connect.NewAgentServiceClient(plainHTTP, cpURL, opts...).Watch(wctx, connect.NewRequest(&rivorav1.WatchRequest{AgentName: c.agentName, Address: "http://127.0.0.1:1"}))
		if err == nil {
			if s.Receive() {
				t.Errorf("Watch as %s with %s credentials got config", c.agentName, caller)
			}
			err = s.Err()
			s.Close()
		}
		cancel()
		if code := connect.CodeOf(err); code != connect.CodeUnauthenticated && code != connect.CodePermissionDenied {
			t.Errorf("Watch as %s with %s credentials: %v, want unauthenticated or permission_denied", c.agentName, caller, err)
		}
		_, err = rivorav1connect.NewAgentServiceClient(plainHTTP, cpURL, opts...).ReportOwned(ctx, connect.NewRequest(&rivorav1.ReportOwnedRequest{AgentName: c.agentName}))
		if code := connect.CodeOf(err); code != connect.CodeUnauthenticated && code != connect.CodePermissionDenied {
			t.Errorf("ReportOwned as %s with %s credentials: %v, want refused", c.agentName, caller, err)
		}
	}
	st, err := adminC.GetConfigStatus(ctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range st.Msg.GetAgents() {
		if a.GetName() == c.agentName && (a.GetAddress() != agentURL || !a.GetConnected()) {
			t.Fatalf("after the attempts, agent %s = %v; want it connected at %s", c.agentName, a, agentURL)
		}
	}
}

// publisherScope: a publisher reaches only its customer's events and
// dead letters, and another customer's look absent.
func (w *authWorld) publisherScope(ctx context.Context, t *testing.T) {
	cpURL, agentURL, admin, p, tokens, ingest := w.cpURL, w.agentURL, w.admin, w.p, w.tokens, w.ingest
	other, err := rivorav1connect.NewIngestServiceClient(plainHTTP, agentURL, connect.WithInterceptors(auth.Bearer(admin))).Publish(ctx,
		connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "d1", CustomerId: "c2", LaneKey: "u1", Type: "t", Payload: []byte(`{}`)}))
	if err != nil {
		t.Fatalf("admin publishes as c2: %v", err)
	}
	_, err = ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "d1", CustomerId: "c2", LaneKey: "u1", Type: "t", Payload: []byte(`{}`)}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("publisher c1 publishing as c2: %v, want permission_denied", err)
	}
	p.WaitDelivered(t, []string{other.Msg.GetEventId()}, 30*time.Second)
	// Another customer's event or dead letter is answered exactly as
	// an absent one (same code, same message but for the id asked):
	// the answer must not tell whether the id exists, nor whose it is.
	absentEvent, absentDead := "01900000-0000-7000-8000-0000000000ab", "01900000-0000-7000-8000-0000000000cd"
	same := func(what, url string, errOf func(id string) error, theirs, absent string) {
		t.Helper()
		gotTheirs, gotAbsent := errOf(theirs), errOf(absent)
		if connect.CodeOf(gotTheirs) != connect.CodeNotFound || connect.CodeOf(gotAbsent) != connect.CodeNotFound {
			t.Errorf("%s at %s: another customer's: %v; absent: %v; want not_found for both", what, url, gotTheirs, gotAbsent)
			return
		}
		if a, b := strings.ReplaceAll(gotTheirs.Error(), theirs, "ID"), strings.ReplaceAll(gotAbsent.Error(), absent, "ID"); a != b || strings.Contains(a, "c2") || strings.Contains(a, "c1") {
			t.Errorf("%s at %s: another customer's answers %q, an absent id %q: want the same, naming no customer", what, url, a, b)
		}
	}
	for _, url := range []string{agentURL, cpURL} {
		events := rivorav1connect.NewEventServiceClient(plainHTTP, url, connect.WithInterceptors(auth.Bearer(tokens["pub"])))
		same("publisher c1: events get", url, func(id string) error {
			_, err := events.GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
			return err
		}, other.Msg.GetEventId(), absentEvent)
		if _, err := events.GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: w.delivered})); err != nil {
			t.Errorf("publisher c1: events get of its own event at %s: %v", url, err)
		}
		archive := rivorav1connect.NewArchiveServiceClient(plainHTTP, url, connect.WithInterceptors(auth.Bearer(tokens["pub-other"])))
		same("publisher c2: dlq show", url, func(id string) error {
			_, err := archive.GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: id, DestinationId: "d2"}))
			return err
		}, w.dead, absentDead)
	}
}

// customerScope: a customer token lists only what its customers own, and
// another customer's subscription answers as an absent one.
func (w *authWorld) customerScope(ctx context.Context, t *testing.T) {
	for caller, want := range map[string]string{"cust": "c1-own", "cust-other": ""} {
		dests, err := adminClient(w.cpURL, w.tokens[caller]).ListDestinations(ctx, connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range dests.Msg.GetDestinations() {
			got = append(got, d.GetId())
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%s lists destinations %v, want %q", caller, got, want)
		}
		subs, err := subscriptionClient(w.cpURL, w.tokens[caller]).ListSubscriptions(ctx, connect.NewRequest(&rivorav1.ListSubscriptionsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(subs.Msg.GetSubscriptions()); (caller == "cust") != (n == 1) {
			t.Errorf("%s lists %d subscriptions", caller, n)
		}
	}
	other := subscriptionClient(w.cpURL, w.tokens["cust-other"])
	absent := "sub_00000000000000ab"
	_, theirs := other.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: w.sub}))
	_, none := other.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: absent}))
	if connect.CodeOf(theirs) != connect.CodeNotFound || strings.ReplaceAll(theirs.Error(), w.sub, "ID") != strings.ReplaceAll(none.Error(), absent, "ID") {
		t.Errorf("c2 gets c1's subscription: %v; an absent one: %v; want the same not_found", theirs, none)
	}
}

// auditNamesTheToken: the audit names the token, whatever the request's
// author says.
func (w *authWorld) auditNamesTheToken(ctx context.Context, t *testing.T) {
	cpURL, admin, adminC, tokens := w.cpURL, w.admin, w.adminC, w.tokens
	ops := adminClient(cpURL, tokens["operator"])
	resp, err := ops.SetPriority(ctx, connect.NewRequest(&rivorav1.SetPriorityRequest{DestinationId: "d1", CustomerId: "c1", Weight: new(2.0), Author: "mallory"}))
	if err != nil {
		t.Fatalf("operator sets a weight: %v", err)
	}
	audit, err := adminC.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "d1"}))
	if err != nil {
		t.Fatal(err)
	}
	var found *rivorav1.AuditEntry
	for _, e := range audit.Msg.GetEntries() {
		if e.GetVersion() == resp.Msg.GetVersion() {
			found = e
		}
	}
	opsID := tokenID(t, cpURL, admin, "ops-1")
	if found == nil || found.GetAuthor() != "ops-1" || found.GetTokenId() != opsID {
		t.Fatalf("audit entry of the weight change = %v, want author ops-1 token %s (the request said mallory)", found, opsID)
	}
}

// matrix calls every RPC where it is served as each caller.
func (w *authWorld) matrix(ctx context.Context, t *testing.T, cases map[string]rpcCase) {
	cpURL, agentURL, tokens, secrets := w.cpURL, w.agentURL, w.tokens, w.secrets
	// Last: the matrix lets a Watch with the cell token in, which
	// registers an agent "ghost".
	servers := map[string]string{"cp": cpURL, "agent": agentURL}
	procs := make([]string, 0, len(cases))
	for proc := range cases {
		procs = append(procs, proc)
	}
	slices.SortFunc(procs, func(a, b string) int {
		// Watch last (see above), else by name.
		wa, wb := a == rivorav1connect.AgentServiceWatchProcedure, b == rivorav1connect.AgentServiceWatchProcedure
		if wa != wb {
			if wa {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	calls := 0
	for _, proc := range procs {
		rc := cases[proc]
		for _, where := range rc.at {
			for _, caller := range matrixCallers {
				got, body := callAs(ctx, servers[where], proc, rc, tokens[caller])
				calls++
				want := rc.expected(caller)
				if want == "404" && got == "ok" && strings.Contains(body, `"code":"not_found"`) {
					got = "404"
				}
				if got != want {
					t.Errorf("%s at %s as %s: %s (%s), want %s", proc, where, caller, got, oneLine(body), want)
				}
				if proc != rivorav1connect.AdminServiceCreateDestinationProcedure && !strings.HasPrefix(proc, "/rivora.v1.AgentService/") {
					for _, s := range secrets {
						if strings.Contains(body, s) {
							t.Errorf("%s at %s as %s answered a signing secret: %s", proc, where, caller, body)
						}
					}
				}
			}
		}
	}
	t.Logf("%d calls over %d RPCs × %d callers", calls, len(cases), len(matrixCallers))
}

// plainHTTP trusts the run's CA and sends no credential of its own.
var plainHTTP = &http.Client{Transport: harnessTransport()}

var (
	cp   = []string{"cp"}
	ag   = []string{"agent"}
	both = []string{"cp", "agent"}
)

// callAs calls proc at server with token ("" = none) and classifies the
// answer: "401", "403" or "ok" (let in: any other answer), with the body.
func callAs(ctx context.Context, server, proc string, rc rpcCase, token string) (string, string) {
	if rc.stream {
		return streamAs(ctx, server, proc, rc, token)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server+proc, strings.NewReader(rc.body))
	if err != nil {
		return "error", err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := plainHTTP.Do(req)
	if err != nil {
		return "error", err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e struct {
		Code string `json:"code"`
	}
	if resp.StatusCode != http.StatusOK {
		_ = json.Unmarshal(body, &e)
	}
	return classify(e.Code), string(body)
}

func classify(code string) string {
	switch code {
	case "unauthenticated":
		return "401"
	case "permission_denied":
		return "403"
	}
	return "ok"
}

// streamAs opens one of the two server streams and reads its first answer.
func streamAs(ctx context.Context, server, proc string, rc rpcCase, token string) (string, string) {
	var opts []connect.ClientOption
	if token != "" {
		opts = append(opts, connect.WithInterceptors(auth.Bearer(token)))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	var first string
	switch proc {
	case rivorav1connect.AgentServiceWatchProcedure:
		req := &rivorav1.WatchRequest{}
		must(jsonInto(rc.body, req))
		s, e := rivorav1connect.NewAgentServiceClient(plainHTTP, server, opts...).Watch(ctx, connect.NewRequest(req))
		if err = e; err == nil {
			if s.Receive() {
				first = fmt.Sprint(len(s.Msg().GetDestinations()), " destinations")
			}
			err = s.Err()
			s.Close()
		}
	case rivorav1connect.EdgeServiceWatchEdgeProcedure:
		req := &rivorav1.WatchEdgeRequest{}
		must(jsonInto(rc.body, req))
		s, e := rivorav1connect.NewEdgeServiceClient(plainHTTP, server, opts...).WatchEdge(ctx, connect.NewRequest(req))
		if err = e; err == nil {
			if s.Receive() {
				first = fmt.Sprint(len(s.Msg().GetConfig().GetDestinations()), " destinations")
			}
			err = s.Err()
			s.Close()
		}
	case rivorav1connect.ArchiveServiceReplayProcedure:
		req := &rivorav1.ReplayRequest{}
		must(jsonInto(rc.body, req))
		s, e := rivorav1connect.NewArchiveServiceClient(plainHTTP, server, opts...).Replay(ctx, connect.NewRequest(req))
		if err = e; err == nil {
			for s.Receive() {
				first = s.Msg().String()
			}
			err = s.Err()
			s.Close()
		}
	default:
		return "error", "no stream call for " + proc
	}
	if err != nil {
		return classify(connect.CodeOf(err).String()), err.Error()
	}
	return "ok", first
}

func jsonInto(body string, m proto.Message) error { return protojson.Unmarshal([]byte(body), m) }

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// allProcedures is every RPC of the rivora.v1 services.
func allProcedures(t testing.TB) []string {
	var out []string
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if fd.Package() != "rivora.v1" {
			return true
		}
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				out = append(out, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
		return true
	})
	if len(out) < 30 {
		t.Fatalf("only %d RPCs found: the registry walk is broken", len(out))
	}
	return out
}

func tokenClient(url, token string) rivorav1connect.TokenServiceClient {
	return rivorav1connect.NewTokenServiceClient(plainHTTP, url, connect.WithInterceptors(auth.Bearer(token)))
}

func subscriptionClient(url, token string) rivorav1connect.SubscriptionServiceClient {
	return rivorav1connect.NewSubscriptionServiceClient(plainHTTP, url, connect.WithInterceptors(auth.Bearer(token)))
}

func adminClient(url, token string) rivorav1connect.AdminServiceClient {
	return rivorav1connect.NewAdminServiceClient(plainHTTP, url, connect.WithInterceptors(auth.Bearer(token)))
}

// mintToken creates a token and returns it.
func mintToken(t testing.TB, url, admin, name string, role rivorav1.Role, customers ...string) string {
	t.Helper()
	resp, err := tokenClient(url, admin).CreateToken(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.CreateTokenRequest{Name: name, Role: role, Customers: customers}))
	if err != nil {
		t.Fatalf("create token %s: %v", name, err)
	}
	return resp.Msg.GetToken()
}

// tokenID is the id of the token named name.
func tokenID(t testing.TB, url, admin, name string) string {
	t.Helper()
	resp, err := tokenClient(url, admin).ListTokens(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.ListTokensRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range resp.Msg.GetTokens() {
		if tk.GetName() == name {
			return tk.GetId()
		}
	}
	t.Fatalf("no token named %s", name)
	return ""
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// WhoAmI tells any token what it is, without its hash: what the console
// reads to show only what the role may do.
func TestWhoAmI(t *testing.T) {
	d := startDev(t, devOptions{})
	admin := readAdminToken(t, d.DataDir())
	for _, tc := range []struct {
		name      string
		role      rivorav1.Role
		customers []string
	}{{"night-viewer", rivorav1.Role_ROLE_VIEWER, nil}, {"acme-app", rivorav1.Role_ROLE_PUBLISHER, []string{"acme"}}, {"acme-portal", rivorav1.Role_ROLE_CUSTOMER, []string{"acme"}}} {
		token := mintToken(t, d.URL(), admin, tc.name, tc.role, tc.customers...)
		resp, err := tokenClient(d.URL(), token).WhoAmI(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.WhoAmIRequest{}))
		if err != nil {
			t.Fatalf("WhoAmI as %s: %v", tc.name, err)
		}
		got := resp.Msg.GetToken()
		if got.GetName() != tc.name || got.GetRole() != tc.role || !slices.Equal(got.GetCustomers(), tc.customers) || got.GetId() != tokenID(t, d.URL(), admin, tc.name) || got.GetHash() != "" {
			t.Fatalf("WhoAmI as %s = %v; want its own name, role, customers and id, no hash", tc.name, got)
		}
	}
	if _, err := tokenClient(d.URL(), "rvk_not-a-token").WhoAmI(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.WhoAmIRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("WhoAmI with a wrong token: %v; want Unauthenticated", err)
	}
}

// endpointAuthSecrets gives the paused d2 a client certificate and OAuth2
// credentials and returns what would show if an answer carried them: a
// line of the private key and the client secret. Neither the answer to
// the update nor any answer of the matrix may (the matrix's
// CreateDestination makes a destination without them).
func endpointAuthSecrets(ctx context.Context, t *testing.T, adminC rivorav1connect.AdminServiceClient) []string {
	t.Helper()
	dir := t.TempDir()
	_, certFile, keyFile := tlstest.Write(t, dir)
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	const clientSecret = "probe-oauth2-client-secret-7f3a"
	// A client certificate goes with an https URL; d2 stays paused, so
	// nothing is sent there.
	upd, err := adminC.UpdateDestination(ctx, connect.NewRequest(&rivorav1.UpdateDestinationRequest{Id: "d2", Url: proto.String("https://127.0.0.1:9/hook"),
		ClientCertificate: &rivorav1.Certificate{CertificatePem: string(certPEM), KeyPem: string(keyPEM)},
		Oauth2:            &rivorav1.OAuth2ClientCredentials{TokenUrl: "http://127.0.0.1:9/token", ClientId: "probe", ClientSecret: clientSecret},
	}))
	if err != nil {
		t.Fatalf("give d2 a client certificate and OAuth2 credentials: %v", err)
	}
	keyLine := strings.Split(string(keyPEM), "\n")[1]
	out, err := protojson.Marshal(upd.Msg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{keyLine, clientSecret} {
		if strings.Contains(string(out), s) {
			t.Fatalf("UpdateDestination answered a client key or OAuth2 secret: %s", out)
		}
	}
	return []string{keyLine, clientSecret}
}
