package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/reserved"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// Every RPC that lets a customer token in either checks its request or
// answer against the token's customers, or is Owned (its handler scopes):
// a customer token never reaches an unscoped RPC. And it never reaches
// tokens (but WhoAmI), the audit, limits, priorities, pauses of
// destinations or the lanes' skip. (The config status it reaches scoped:
// whether the agents applied a change, for its --wait.)
func TestCustomerRoleIsAlwaysScoped(t *testing.T) {
	never := []string{
		rivorav1connect.TokenServiceCreateTokenProcedure, rivorav1connect.TokenServiceListTokensProcedure, rivorav1connect.TokenServiceRevokeTokenProcedure,
		rivorav1connect.AdminServiceListAuditProcedure, rivorav1connect.AdminServiceGetLimitsProcedure, rivorav1connect.AdminServiceDiffLimitsProcedure,
		rivorav1connect.AdminServiceSetLimitsOverrideProcedure, rivorav1connect.AdminServiceClearLimitsOverrideProcedure, rivorav1connect.AdminServiceSetPriorityProcedure,
		rivorav1connect.AdminServicePauseDestinationProcedure, rivorav1connect.AdminServiceResumeDestinationProcedure,
		rivorav1connect.AdminServiceUpdateDestinationProcedure, rivorav1connect.LaneServiceSkipLaneHeadProcedure,
		rivorav1connect.EventTypeServiceCreateEventTypeProcedure, rivorav1connect.EventTypeServiceUpdateEventTypeProcedure, rivorav1connect.EventTypeServiceDeprecateEventTypeProcedure,
	}
	for proc, rule := range Policies {
		if !slices.Contains(rule.Roles, customer) {
			if rule.Owned {
				t.Errorf("%s is Owned but does not let customer tokens in", proc)
			}
			continue
		}
		if slices.Contains(never, proc) {
			t.Errorf("%s lets customer tokens in", proc)
		}
		unscoped := rule.Request == nil && rule.Answer == nil && !rule.Owned
		if unscoped && proc != rivorav1connect.TokenServiceWhoAmIProcedure && proc != rivorav1connect.EventTypeServiceGetEventTypeProcedure &&
			proc != rivorav1connect.EventTypeServiceListEventTypesProcedure && proc != reflectV1 && proc != reflectV1Alpha {
			t.Errorf("%s lets customer tokens in without checking their customers (Request, Answer) or scoping in the handler (Owned)", proc)
		}
	}
}

func TestCustomerPrincipal(t *testing.T) {
	c := &Principal{Role: customer, Customers: []string{"c1", "c3"}}
	if !c.MayActFor("c1") || !c.MayActFor("c3") || c.MayActFor("c2") || c.MayActFor("") || !c.Scoped() || !c.SelfService() {
		t.Fatalf("customer token for c1, c3: MayActFor c1 %v, c3 %v, c2 %v, empty %v; Scoped %v", c.MayActFor("c1"), c.MayActFor("c3"), c.MayActFor("c2"), c.MayActFor(""), c.Scoped())
	}
	if star := (&Principal{Role: customer, Customers: []string{"*"}}); star.MayActFor("c1") || star.MayActFor("*") {
		t.Fatal(`a customer token naming "*" (never made) acts for customers`)
	}
	if pub := (&Principal{Role: publisher, Customers: []string{"*"}}); !pub.MayActFor("c9") || pub.Scoped() || pub.SelfService() {
		t.Fatal(`a publisher for "*" is scoped`)
	}
	ctx := WithPrincipal(context.Background(), c)
	if !CallerMayActFor(ctx, "c1") || CallerMayActFor(ctx, "c2") || !CallerMayActFor(context.Background(), "c2") {
		t.Fatal("CallerMayActFor does not follow the caller's principal")
	}
	if r, ok := ParseRole("customer"); !ok || r != customer || RoleName(customer) != "customer" {
		t.Fatalf("ParseRole(customer) = %v, %v", r, ok)
	}
}

// What a customer token's requests must name.
func TestCustomerRequestChecks(t *testing.T) {
	p := &Principal{TokenID: "tok_1", Name: "portal", Role: customer, Customers: []string{"c1"}}
	check := func(proc string, req any) error { return Policies[proc].Request(p, req) }
	for _, tc := range []struct {
		what string
		proc string
		req  any
		ok   bool
	}{
		{"publish for c1", rivorav1connect.IngestServicePublishProcedure, &rivorav1.PublishRequest{CustomerId: "c1"}, true},
		{"publish for c2", rivorav1connect.IngestServicePublishProcedure, &rivorav1.PublishRequest{CustomerId: "c2"}, false},
		{"a batch with one event of c2", rivorav1connect.IngestServicePublishBatchProcedure, &rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{{CustomerId: "c1"}, {CustomerId: "c2"}}}, false},
		{"own destination", rivorav1connect.AdminServiceCreateDestinationProcedure, &rivorav1.CreateDestinationRequest{OwnerCustomer: "c1"}, true},
		{"a destination it does not own", rivorav1connect.AdminServiceCreateDestinationProcedure, &rivorav1.CreateDestinationRequest{}, false},
		{"c2's destination", rivorav1connect.AdminServiceCreateDestinationProcedure, &rivorav1.CreateDestinationRequest{OwnerCustomer: "c2"}, false},
		{"own destination with limits", rivorav1connect.AdminServiceCreateDestinationProcedure, &rivorav1.CreateDestinationRequest{OwnerCustomer: "c1", Limits: &rivorav1.Limits{}}, false},
		{"subscribe c1", rivorav1connect.SubscriptionServiceCreateSubscriptionProcedure, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1"}, true},
		{"subscribe c2", rivorav1connect.SubscriptionServiceCreateSubscriptionProcedure, &rivorav1.CreateSubscriptionRequest{CustomerId: "c2"}, false},
		{"list its subscriptions", rivorav1connect.SubscriptionServiceListSubscriptionsProcedure, &rivorav1.ListSubscriptionsRequest{}, true},
		{"list c2's subscriptions", rivorav1connect.SubscriptionServiceListSubscriptionsProcedure, &rivorav1.ListSubscriptionsRequest{CustomerId: "c2"}, false},
		{"lanes of c1", rivorav1connect.LaneServiceListLanesProcedure, &rivorav1.ListLanesRequest{DestinationId: "d", CustomerId: "c1"}, true},
		{"lanes naming no customer (c1's: its only one)", rivorav1connect.LaneServiceListLanesProcedure, &rivorav1.ListLanesRequest{DestinationId: "d"}, true},
		{"dead-letter stats of c1", rivorav1connect.ArchiveServiceDeadLetterStatsProcedure, &rivorav1.DeadLetterStatsRequest{Filter: &rivorav1.DeadLetterFilter{CustomerId: "c1"}}, true},
		{"dead-letter stats naming no customer (c1's)", rivorav1connect.ArchiveServiceDeadLetterStatsProcedure, &rivorav1.DeadLetterStatsRequest{}, true},
		{"replay c1", rivorav1connect.ArchiveServiceReplayProcedure, &rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{CustomerId: "c1", DestinationId: "d"}}, true},
		{"replay a destination (c1's dead letters on it)", rivorav1connect.ArchiveServiceReplayProcedure, &rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "d"}}, true},
		{"events of c2", rivorav1connect.EventServiceListEventsProcedure, &rivorav1.ListEventsRequest{DestinationId: "d", CustomerId: "c2"}, false},
	} {
		err := check(tc.proc, tc.req)
		if (err == nil) != tc.ok || (err != nil && connect.CodeOf(err) != connect.CodePermissionDenied) {
			t.Errorf("%s: %v, want allowed %v (else permission_denied)", tc.what, err, tc.ok)
		}
	}
	if ev := Policies[rivorav1connect.EventServiceGetEventProcedure].Answer(p, &rivorav1.GetEventResponse{EventId: "e", CustomerId: "c2"}); connect.CodeOf(ev) != connect.CodeNotFound {
		t.Errorf("c2's event answered to c1: %v, want not_found", ev)
	}
}

// A list naming no customer is the caller's one customer's, when its
// token names exactly one: the request reaches the handler with it filled
// in (events list, lanes list, dlq list/stats, replay). A token of several
// customers must still name one; an unscoped caller's request is left as
// it came (every customer's).
func TestOneCustomerTokenListsItsCustomerByDefault(t *testing.T) {
	one := &Principal{Role: customer, Customers: []string{"c1"}}
	pub := &Principal{Role: publisher, Customers: []string{"c1"}}
	two := &Principal{Role: customer, Customers: []string{"c1", "c2"}}
	op := &Principal{Role: operator}
	type list struct {
		proc     string
		req      func() any
		customer func(any) string
	}
	lists := map[string]list{
		"events": {rivorav1connect.EventServiceListEventsProcedure, func() any { return &rivorav1.ListEventsRequest{DestinationId: "d"} },
			func(m any) string { return m.(*rivorav1.ListEventsRequest).GetCustomerId() }},
		"lanes": {rivorav1connect.LaneServiceListLanesProcedure, func() any { return &rivorav1.ListLanesRequest{DestinationId: "d"} },
			func(m any) string { return m.(*rivorav1.ListLanesRequest).GetCustomerId() }},
		"dlq list": {rivorav1connect.ArchiveServiceListDeadLettersProcedure, func() any { return &rivorav1.ListDeadLettersRequest{} },
			func(m any) string { return m.(*rivorav1.ListDeadLettersRequest).GetFilter().GetCustomerId() }},
		"dlq stats": {rivorav1connect.ArchiveServiceDeadLetterStatsProcedure, func() any { return &rivorav1.DeadLetterStatsRequest{} },
			func(m any) string { return m.(*rivorav1.DeadLetterStatsRequest).GetFilter().GetCustomerId() }},
		"replay": {rivorav1connect.ArchiveServiceReplayProcedure, func() any { return &rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "d"}} },
			func(m any) string { return m.(*rivorav1.ReplayRequest).GetFilter().GetCustomerId() }},
	}
	for name, l := range lists {
		for _, p := range []*Principal{one, pub} {
			if !slices.Contains(Policies[l.proc].Roles, p.Role) {
				continue // a publisher's token lists events and dead letters only
			}
			req := l.req()
			if err := Policies[l.proc].Request(p, req); err != nil || l.customer(req) != "c1" {
				t.Errorf("%s by a %s token of c1 naming no customer: %v, customer %q; want allowed, for c1", name, RoleName(p.Role), err, l.customer(req))
			}
		}
		req := l.req()
		err := Policies[l.proc].Request(two, req)
		if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "name one with --customer") || l.customer(req) != "" {
			t.Errorf("%s by a token of c1 and c2 naming no customer: %v, customer %q; want permission_denied, name one", name, err, l.customer(req))
		}
		req = l.req()
		if err := Policies[l.proc].Request(op, req); err != nil || l.customer(req) != "" {
			t.Errorf("%s by an operator naming no customer: %v, customer %q; want every customer's", name, err, l.customer(req))
		}
	}
	if req := (&rivorav1.ListDeadLettersRequest{}); Policies[rivorav1connect.ArchiveServiceListDeadLettersProcedure].Request(op, req) != nil || req.Filter != nil {
		t.Errorf("an operator's dlq list without a filter was given one: %v", req.Filter)
	}
}

type replayStub struct {
	rivorav1connect.UnimplementedArchiveServiceHandler
	customers chan string // the customer of each replay the handler ran
}

func (s replayStub) Replay(_ context.Context, req *connect.Request[rivorav1.ReplayRequest], out *connect.ServerStream[rivorav1.ReplayResponse]) error {
	if s.customers != nil {
		s.customers <- req.Msg.GetFilter().GetCustomerId()
	}
	return out.Send(&rivorav1.ReplayResponse{Done: true, Total: 1})
}

// A server stream's one request is checked before the handler runs: a
// customer token replays only with a filter naming its customer (its one
// customer, filled in, when it names none).
func TestServerStreamRequestIsChecked(t *testing.T) {
	token, id, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	keys := NewKeys(CellToken{})
	keys.SetTokens([]*rivorav1.ApiToken{{Id: id, Name: "portal", Role: customer, Customers: []string{"c1"}, Hash: Hash(token)}})
	mux := http.NewServeMux()
	stub := replayStub{customers: make(chan string, 2)}
	mux.Handle(rivorav1connect.NewArchiveServiceHandler(stub, connect.WithInterceptors(NewInterceptor(keys))))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client := rivorav1connect.NewArchiveServiceClient(srv.Client(), srv.URL, connect.WithInterceptors(Bearer(token)))
	replay := func(customer string) error {
		s, err := client.Replay(context.Background(), connect.NewRequest(&rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "d", CustomerId: customer}}))
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	}
	if err := replay("c1"); err != nil {
		t.Fatalf("replay of c1: %v", err)
	}
	if got := <-stub.customers; got != "c1" {
		t.Fatalf("replay of c1 reached the handler for %q", got)
	}
	// The token's one customer is the filter's when it names none: the
	// handler sees it filled in.
	if err := replay(""); err != nil {
		t.Fatalf("replay naming no customer by a token of c1: %v", err)
	}
	if got := <-stub.customers; got != "c1" {
		t.Fatalf("replay naming no customer reached the handler for %q, want c1", got)
	}
	if err := replay("c2"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("replay with customer c2: %v, want permission_denied", err)
	}
}

// A viewer may count what a replay would send (a dry run), not replay:
// through the interceptor, as a call comes (the rule alone held, but the
// interceptor ran it only for scoped callers, so a viewer's replay ran).
func TestAViewerMayDryRunAReplay(t *testing.T) {
	keys := NewKeys(CellToken{})
	tokens := map[rivorav1.Role]string{}
	var stored []*rivorav1.ApiToken
	for _, role := range []rivorav1.Role{viewer, operator} {
		token, id, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tokens[role] = token
		stored = append(stored, &rivorav1.ApiToken{Id: id, Name: RoleName(role), Role: role, Hash: Hash(token)})
	}
	keys.SetTokens(stored)
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewArchiveServiceHandler(replayStub{}, connect.WithInterceptors(NewInterceptor(keys))))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	replay := func(role rivorav1.Role, dryRun bool) error {
		client := rivorav1connect.NewArchiveServiceClient(srv.Client(), srv.URL, connect.WithInterceptors(Bearer(tokens[role])))
		s, err := client.Replay(context.Background(), connect.NewRequest(&rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "d"}, DryRun: dryRun}))
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	}
	if err := replay(viewer, true); err != nil {
		t.Fatalf("a viewer's dry run: %v, want allowed", err)
	}
	err := replay(viewer, false)
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "--dry-run") {
		t.Fatalf("a viewer's replay: %v, want permission_denied naming --dry-run", err)
	}
	if err := replay(operator, false); err != nil {
		t.Fatalf("an operator's replay: %v", err)
	}
}

type publishStub struct {
	rivorav1connect.UnimplementedIngestServiceHandler
}

func (publishStub) Publish(context.Context, *connect.Request[rivorav1.PublishRequest]) (*connect.Response[rivorav1.PublishResponse], error) {
	return connect.NewResponse(&rivorav1.PublishResponse{EventId: "e"}), nil
}

func (publishStub) PublishBatch(context.Context, *connect.Request[rivorav1.PublishBatchRequest]) (*connect.Response[rivorav1.PublishBatchResponse], error) {
	return connect.NewResponse(&rivorav1.PublishBatchResponse{}), nil
}

// Only the cell (the control plane's notifier) publishes to the reserved
// operator destination: its receiver trusts what arrives signed with the
// operator webhook's secret, and a customer's or an admin's publish there
// was delivered, signed, as a notice.
func TestOnlyTheCellPublishesOperatorNotices(t *testing.T) {
	cell := CellTokenOf(strings.Repeat("c", MinCellTokenBytes))
	keys := NewKeys(cell)
	tokens := map[string]string{"cell": cell.String()}
	var stored []*rivorav1.ApiToken
	for name, tok := range map[string]*rivorav1.ApiToken{
		"admin":     {Role: admin},
		"publisher": {Role: publisher, Customers: []string{"*"}},
		"customer":  {Role: customer, Customers: []string{reserved.OperatorDestination, "acme"}},
	} {
		token, id, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = token
		tok.Id, tok.Name, tok.Hash = id, name, Hash(token)
		stored = append(stored, tok)
	}
	keys.SetTokens(stored)
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewIngestServiceHandler(publishStub{}, connect.WithInterceptors(NewInterceptor(keys))))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ev := &rivorav1.PublishRequest{DestinationId: reserved.OperatorDestination, CustomerId: "acme", LaneKey: "erp", Type: "destination.parked", Payload: []byte(`{}`)}
	for name, token := range tokens {
		client := rivorav1connect.NewIngestServiceClient(srv.Client(), srv.URL, connect.WithInterceptors(Bearer(token)))
		_, err := client.Publish(context.Background(), connect.NewRequest(ev))
		if name == "cell" {
			if err != nil {
				t.Fatalf("the cell's notice: %v", err)
			}
			continue
		}
		if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "reserved for operator notices") {
			t.Errorf("%s's publish to %s: %v, want permission_denied (reserved)", name, reserved.OperatorDestination, err)
		}
		_, err = client.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{{DestinationId: "d", CustomerId: "acme"}, ev}}))
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s's batch with an event to %s: %v, want permission_denied", name, reserved.OperatorDestination, err)
		}
	}
}

// What a customer owns is hidden from tokens limited to other customers;
// what no customer owns (a shared destination) from no one: a publisher
// scoped to acme listing a shared destination's events was told it did
// not exist.
func TestOwnerHidden(t *testing.T) {
	acme := WithPrincipal(context.Background(), &Principal{Role: publisher, Customers: []string{"acme"}})
	op := WithPrincipal(context.Background(), &Principal{Role: operator})
	for _, c := range []struct {
		ctx    context.Context
		owner  string
		hidden bool
	}{
		{acme, "", false}, {acme, "acme", false}, {acme, "beta", true},
		{op, "beta", false}, {context.Background(), "beta", false},
	} {
		if got := OwnerHidden(c.ctx, c.owner); got != c.hidden {
			t.Errorf("OwnerHidden(%v, %q) = %v, want %v", FromContext(c.ctx), c.owner, got, c.hidden)
		}
	}
}

type limitsStub struct {
	rivorav1connect.UnimplementedAdminServiceHandler
}

func (limitsStub) SetLimitsOverride(_ context.Context, req *connect.Request[rivorav1.SetLimitsOverrideRequest]) (*connect.Response[rivorav1.SetLimitsOverrideResponse], error) {
	return connect.NewResponse(&rivorav1.SetLimitsOverrideResponse{DryRun: req.Msg.GetDryRun()}), nil
}

// A viewer may preview a limits override (a dry run changes nothing),
// not set one; an operator sets one; a customer token does neither.
func TestAViewerMayDryRunALimitsOverride(t *testing.T) {
	keys := NewKeys(CellToken{})
	tokens := map[rivorav1.Role]string{}
	var stored []*rivorav1.ApiToken
	for _, role := range []rivorav1.Role{viewer, operator, customer} {
		token, id, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tokens[role] = token
		stored = append(stored, &rivorav1.ApiToken{Id: id, Name: RoleName(role), Role: role, Hash: Hash(token), Customers: []string{"c1"}})
	}
	keys.SetTokens(stored)
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewAdminServiceHandler(limitsStub{}, connect.WithInterceptors(NewInterceptor(keys))))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	set := func(role rivorav1.Role, dryRun bool) error {
		client := rivorav1connect.NewAdminServiceClient(srv.Client(), srv.URL, connect.WithInterceptors(Bearer(tokens[role])))
		_, err := client.SetLimitsOverride(context.Background(), connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{DestinationId: "d", RatePerSecond: new(5.0), Reason: "r", DryRun: dryRun}))
		return err
	}
	if err := set(viewer, true); err != nil {
		t.Fatalf("a viewer's dry run: %v, want allowed", err)
	}
	err := set(viewer, false)
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "--dry-run") {
		t.Fatalf("a viewer's override: %v, want permission_denied naming --dry-run", err)
	}
	if err := set(operator, false); err != nil {
		t.Fatalf("an operator's override: %v", err)
	}
	for _, dryRun := range []bool{true, false} {
		if err := set(customer, dryRun); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("a customer token's override (dry run %v): %v, want permission_denied", dryRun, err)
		}
	}
}
