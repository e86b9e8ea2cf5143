package agent_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
)

// A caller limited to some customers (a customer token, a scoped
// publisher) asking for another customer's own destination by id is
// answered, over HTTP, byte for byte as for an id that does not exist:
// events list (every state, pending only, history only) and lanes list.
// Its owner and an operator are answered as before.
func TestAnotherCustomersDestinationListsAsAbsent(t *testing.T) {
	r := startAgent(t, t.TempDir())
	p := newPartner(t, func(partner.Request) int { return 503 }) // beta's events stay pending
	own := destination("beta-hooks", p.URL(), 3)
	own.OwnerCustomer = "beta"
	r.create(own)
	r.publish("beta-hooks", "beta", "b1")
	r.publish("beta-hooks", "beta", "b2")

	post := func(token, procedure, body string) (int, string) {
		t.Helper()
		return postJSON(t, r, token, procedure, body)
	}
	calls := map[string][]string{
		rivorav1connect.EventServiceListEventsProcedure: {
			`{"destinationId":%q,"customerId":%q}`,
			`{"destinationId":%q,"customerId":%q,"state":"EVENT_STATE_PENDING"}`,
			`{"destinationId":%q,"customerId":%q,"state":"EVENT_STATE_DELIVERED"}`,
			`{"destinationId":%q,"customerId":%q,"state":"EVENT_STATE_DEAD","limit":5}`,
		},
		rivorav1connect.LaneServiceListLanesProcedure: {
			`{"destinationId":%q,"customerId":%q}`,
			`{"destinationId":%q,"customerId":%q,"stuck":true}`,
		},
	}
	// Each caller lists one of its customers' events.
	type caller struct{ token, customer string }
	tokens := map[string]caller{
		"acme's customer token":   {r.Token(rivorav1.Role_ROLE_CUSTOMER, "acme"), "acme"},
		"acme's publisher token":  {r.Token(rivorav1.Role_ROLE_PUBLISHER, "acme"), "acme"},
		"beta's customer token":   {r.Token(rivorav1.Role_ROLE_CUSTOMER, "beta"), "beta"},
		"an operator's token":     {r.Token(rivorav1.Role_ROLE_OPERATOR), "acme"},
		"a publisher for any one": {r.Token(rivorav1.Role_ROLE_PUBLISHER, "*"), "acme"},
	}
	for procedure, bodies := range calls {
		for _, format := range bodies {
			for who, c := range tokens {
				if procedure == rivorav1connect.LaneServiceListLanesProcedure && strings.Contains(who, "publisher") {
					continue // publishers do not list lanes
				}
				absentStatus, absent := post(c.token, procedure, fmt.Sprintf(format, "nope-x", c.customer))
				status, got := post(c.token, procedure, fmt.Sprintf(format, "beta-hooks", c.customer))
				want := strings.ReplaceAll(absent, "nope-x", "beta-hooks")
				hidden := strings.HasPrefix(who, "acme's")
				switch {
				case absentStatus != http.StatusNotFound:
					t.Errorf("%s %s for an absent destination: %d %s; want 404 not_found", who, procedure, absentStatus, absent)
				case hidden && (status != absentStatus || got != want):
					t.Errorf("%s %s for beta's own destination: %d %s; want the absent destination's answer, %d %s", who, procedure, status, got, absentStatus, want)
				case !hidden && status != http.StatusOK:
					t.Errorf("%s %s for beta's own destination: %d %s; want it answered", who, procedure, status, got)
				}
			}
		}
	}
}

// Every other call a customer token makes naming a destination answers
// another customer's own destination byte for byte as an absent one, on
// the agent and the control plane alike (a replay's is
// TestReplayAnswersAnotherCustomersDestinationAsAbsent's).
func TestAnotherCustomersDestinationIsAbsentToEveryCall(t *testing.T) {
	r := startAgent(t, t.TempDir())
	p := newPartner(t, func(partner.Request) int { return 200 })
	own := destination("beta-hooks", p.URL(), 3)
	own.OwnerCustomer = "beta"
	r.create(own)
	token := r.Token(rivorav1.Role_ROLE_CUSTOMER, "acme")
	post := func(procedure, body string) (int, string) { t.Helper(); return postJSON(t, r, token, procedure, body) }
	for _, c := range [][2]string{
		{rivorav1connect.ArchiveServiceListDeadLettersProcedure, `{"filter":{"destinationId":%q,"customerId":"acme"}}`},
		{rivorav1connect.ArchiveServiceDeadLetterStatsProcedure, `{"filter":{"destinationId":%q,"customerId":"acme"}}`},
		{rivorav1connect.ArchiveServiceGetDeadLetterProcedure, `{"eventId":"01a24c03-0000-7000-8000-000000000000","destinationId":%q}`},
		{rivorav1connect.IngestServicePublishProcedure, `{"destinationId":%q,"customerId":"acme","laneKey":"l","type":"t","payload":"e30="}`},
		{rivorav1connect.IngestServicePublishBatchProcedure, `{"events":[{"destinationId":%q,"customerId":"acme","laneKey":"l","type":"t","payload":"e30="}]}`},
		{rivorav1connect.AdminServiceGetDestinationProcedure, `{"id":%q}`},
		{rivorav1connect.AdminServiceGetDestinationHealthProcedure, `{"destinationId":%q}`},
		{rivorav1connect.AdminServiceVerifyDeliveryProcedure, `{"destinationId":%q}`},
		{rivorav1connect.AdminServiceRotateDestinationSecretProcedure, `{"destinationId":%q}`},
		{rivorav1connect.AdminServiceDeleteDestinationProcedure, `{"id":%q}`},
		{rivorav1connect.SubscriptionServiceCreateSubscriptionProcedure, `{"customerId":"acme","destinationId":%q,"types":["*"]}`},
		{rivorav1connect.SubscriptionServiceListSubscriptionsProcedure, `{"customerId":"acme","destinationId":%q}`},
	} {
		procedure, format := c[0], c[1]
		absentStatus, absent := post(procedure, fmt.Sprintf(format, "nope-x"))
		status, got := post(procedure, fmt.Sprintf(format, "beta-hooks"))
		if want := strings.ReplaceAll(absent, "nope-x", "beta-hooks"); status != absentStatus || got != want {
			t.Errorf("%s of beta's own destination: %d %s; want the absent destination's answer, %d %s", procedure, status, got, absentStatus, want)
		}
	}
}

// postJSON calls procedure on r with a JSON body as curl does, and
// returns the status and body.
func postJSON(t *testing.T, r *running, token, procedure, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.URL+procedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := r.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(bytes.TrimSpace(out))
}
