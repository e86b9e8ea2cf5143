package controlplane

import "time"

// NotifyDestinationDisabled runs the hook the 410 Gone path calls when it
// disables a destination.
func NotifyDestinationDisabled(cp *ControlPlane, id, reason string, version uint64) {
	cp.notify.destinationDisabled(id, reason, version, time.Now())
}
