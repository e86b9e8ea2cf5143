//go:build !linux

package natsd

import "errors"

// storeSync has no group commit outside Linux (no syncfs(2)): the server
// falls back to JetStream's SyncAlways, a sync per write.
func storeSync(string) (func() error, func() error, error) {
	return nil, nil, errors.New("group commit needs syncfs(2) (Linux)")
}
