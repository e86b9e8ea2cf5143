package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A destination created with a fullwidth host (１２７.０.０.１, which IDNA
// maps to 127.0.0.1) is stored, shown and fed to the agent in ASCII, and
// its events are delivered: the agent's HTTP client dials a host as
// written, so it must be given the ASCII form.
func TestUnicodeHostDelivered(t *testing.T) {
	r := startAgent(t, t.TempDir())
	p := newPartner(t, nil)
	ascii := p.URL()
	unicode := strings.Replace(ascii, "127.0.0.1", "１２７.０.０.１", 1)
	r.create(destination("fullwidth", unicode, 3))
	got, err := r.Admin.GetDestination(context.Background(), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "fullwidth"}))
	if err != nil {
		t.Fatal(err)
	}
	if u := got.Msg.GetDestination().GetUrl(); u != ascii {
		t.Fatalf("destination created at %s is shown at %s, want %s", unicode, u, ascii)
	}
	ids := []string{r.publish("fullwidth", "acme", "l1"), r.publish("fullwidth", "acme", "l2")}
	p.WaitDelivered(t, ids, 15*time.Second)
}
