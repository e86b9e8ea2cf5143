package api

import (
	"strings"
	"testing"

	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
)

// What `rivoractl lanes skip` answers when the owner refuses.
func TestTakeHeadErrorTellsWhatToDo(t *testing.T) {
	id := lanes.ID{Destination: "p500", Customer: "beta", Key: "sb"}
	cases := []struct {
		name string
		err  error
		want []string
	}{
		// A parked destination's probe sends the head again as each
		// attempt ends: waiting for the attempt to end never works.
		{"in flight, parked", &scheduler.HeadInFlightError{DestinationParked: true}, []string{"its destination is parked", "rivoractl destinations pause p500", "then rivoractl destinations resume p500"}},
		// Otherwise the attempt ends soon by itself and the lane waits
		// for its retry: no pause to advise.
		{"in flight", &scheduler.HeadInFlightError{}, []string{"lane head is in flight; try again once its attempt ends"}},
		// The lane exists, routed by a subscription.
		{"routed by a subscription", &scheduler.OtherSubscriptionsError{Subscriptions: []string{"sub_1"}}, []string{"routed by subscription sub_1: add --subscription sub_1"}},
		{"published and routed", &scheduler.OtherSubscriptionsError{Subscriptions: []string{"", "sub_1"}}, []string{"leave out --subscription", "add --subscription sub_1"}},
	}
	for _, c := range cases {
		msg := takeHeadError(id, "", c.err).Error()
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", c.name, msg, w)
			}
		}
	}
	if msg := takeHeadError(id, "", &scheduler.HeadInFlightError{}).Error(); strings.Contains(msg, "pause") {
		t.Errorf("in flight on a destination that is not parked: %q advises a pause", msg)
	}
}
