package consullock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"

	"github.com/hashicorp/consul/api"
)

// Only a renewal that got no answer at all may lead to a destroy: an
// error status is Consul answering (a 500 "No cluster leader" during an
// election), and a destroy sent then could be applied once a leader is
// elected, ending every agent's session at once.
func TestOnlyARenewalWithoutAnswerIsUnanswered(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"timed out", &url.Error{Op: "Put", URL: "http://consul/v1/session/renew/x", Err: context.DeadlineExceeded}, true},
		{"reset", &url.Error{Op: "Put", URL: "http://consul/v1/session/renew/x", Err: errors.New("read: connection reset by peer")}, true},
		{"no cluster leader", api.StatusError{Code: 500, Body: "No cluster leader"}, false},
		{"an unexpected code, as Renew reports it", fmt.Errorf("Unexpected response code: %d", 500), false},
	}
	for _, c := range cases {
		if got := unanswered(c.err); got != c.want {
			t.Errorf("%s: unanswered = %v, want %v", c.name, got, c.want)
		}
	}
}
