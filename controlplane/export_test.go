package controlplane

import "time"

// NotifyDestinationDisabled runs the hook the 410 Gone path calls when it
// disables a destination.
func NotifyDestinationDisabled(cp *ControlPlane, id, reason string, version uint64) {
	cp.notify.destinationDisabled(id, reason, version, time.Now())
}

// Compact folds the store's change log into a new snapshot.
func (s *FileStore) Compact() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compactLocked()
}
