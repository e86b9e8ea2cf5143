// Package consullock is Rivora's one implementation of Consul leases: the
// fencing both the agent's partition ownership and the control plane's
// leader election rest on. A Session is one Consul session (behaviour
// "release", a TTL, a lock-delay) kept alive by KeepAlive; Lock takes a key
// with it and returns a Lease that says, cheaply and on the monotonic
// clock, whether the key is still surely held.
//
// Invariants:
//   - a Lease is Valid only while its key is held by its session as far as
//     anyone knows, the session has not been reported gone, and a renewal
//     Consul confirmed was sent less than a TTL ago; once not Valid it
//     never is again, and Lost is closed (by Valid itself, the key's
//     watcher or the session's expiry check, whichever notices first);
//   - a Session holds at most one Lease per key;
//   - every goroutine the package starts belongs to a Session: KeepAlive
//     waits for its own, and the Lease watchers end with their Lease and
//     are waited for once the session ends (KeepAlive reporting it gone,
//     or Destroy).
package consullock

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/internal/httpurl"
)

// blockingWait is the longest blocking query on a key.
const blockingWait = 30 * time.Second

// Errors a Session or a Lease reports.
var (
	// ErrHeld: another session holds the key (or Consul's lock-delay still
	// protects it after a holder's session ended), or this session already
	// holds it through another Lease.
	ErrHeld = errors.New("lock is held by another session")
	// ErrGone: Consul says the session no longer exists (it expired, or
	// someone destroyed it); every lock it held is lost.
	ErrGone = errors.New("consul session invalidated")
	// ErrNotRenewed: no renewal was confirmed within the TTL, so Consul may
	// have ended the session; no lock is taken with it until one is.
	ErrNotRenewed = errors.New("consul session not renewed within its TTL")
	// ErrReleased is the Cause of a Lease given back with Release.
	ErrReleased = errors.New("released")
	// ErrDestroyed: the session was ended with Destroy.
	ErrDestroyed = errors.New("consul session destroyed")
)

// TakenError is the Cause of a Lease whose key is no longer held by its
// session: taken by another, or freed.
type TakenError struct {
	Key string
	// Session and Value are the key's holder now; both "" when it is free.
	Session string
	Value   string
}

func (e *TakenError) Error() string {
	return fmt.Sprintf("lock %s no longer held by this session", e.Key)
}

// NewClient makes a Consul API client for the HTTP API at rawURL, an
// http:// or https:// URL with no path (the client adds /v1/… itself).
func NewClient(rawURL string) (*api.Client, error) {
	u, err := httpurl.ParseBase(rawURL)
	if err != nil {
		return nil, fmt.Errorf("consul address %q: want an http:// or https:// URL such as http://127.0.0.1:8500", rawURL)
	}
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Scheme = u.Host, u.Scheme
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul client for %s: %w", rawURL, err)
	}
	return client, nil
}

// NextIndex is the WaitIndex of the blocking query after one that answered
// last, the previous WaitIndex being prev: an index that went backwards
// (Consul's state was restored or rebuilt) starts over from 0, so the next
// query answers at once instead of blocking until the index climbs back.
func NextIndex(prev, last uint64) uint64 {
	if last < prev {
		return 0
	}
	return last
}
