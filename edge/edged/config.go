package edged

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/internal/durable"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// configStore is the whole config the edge applied (every delta folded
// into the snapshot it started from) and the file it is kept in, so that
// an edge restarted while cut off from the control plane accepts and
// authenticates by it at once. Its one user is the edge's follower (and
// New, before the follower starts).
type configStore struct {
	path string
	// whole is the config applied: a snapshot (nil before the first).
	whole *rivorav1.WatchResponse
}

func newConfigStore(path string) *configStore { return &configStore{path: path} }

// load reads the config kept on disk: nil when there is none yet.
func (s *configStore) load() (*rivorav1.WatchResponse, error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the config kept at %s: %w", s.path, err)
	}
	whole := &rivorav1.WatchResponse{}
	if err := proto.Unmarshal(data, whole); err != nil {
		return nil, fmt.Errorf("the config kept at %s is unreadable (%w); remove it and start the edge where it reaches the control plane", s.path, err)
	}
	whole.Snapshot = true
	return whole, nil
}

// fold returns the whole config after msg: msg itself when it is a
// snapshot, else the current whole with msg's changes.
func (s *configStore) fold(msg *rivorav1.WatchResponse) *rivorav1.WatchResponse {
	if msg.GetSnapshot() || s.whole == nil {
		next := proto.CloneOf(msg)
		next.Snapshot, next.Partitions = true, nil
		return next
	}
	next := proto.CloneOf(s.whole)
	next.Version = msg.GetVersion()
	if n := msg.GetPartitionCount(); n > 0 {
		next.PartitionCount = n
	}
	next.Destinations = foldByID(next.GetDestinations(), msg.GetDestinations(), msg.GetRemovedDestinationIds(), (*rivorav1.Destination).GetId)
	next.Subscriptions = foldByID(next.GetSubscriptions(), msg.GetSubscriptions(), msg.GetRemovedSubscriptionIds(), (*rivorav1.Subscription).GetId)
	if msg.GetTokensChanged() {
		next.Tokens = msg.GetTokens()
	}
	if msg.GetEventTypesChanged() {
		next.EventTypes, next.StrictEventTypes = msg.GetEventTypes(), msg.GetStrictEventTypes()
	}
	return next
}

// foldByID is list with changed replacing (or added to) its items by id
// and removed taken out, sorted by id.
func foldByID[T proto.Message](list, changed []T, removed []string, id func(T) string) []T {
	byID := make(map[string]T, len(list)+len(changed))
	for _, x := range list {
		byID[id(x)] = x
	}
	for _, x := range changed {
		byID[id(x)] = x
	}
	for _, r := range removed {
		delete(byID, r)
	}
	out := make([]T, 0, len(byID))
	for _, x := range byID {
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b T) int { return cmp.Compare(id(a), id(b)) })
	return out
}

// keep makes whole the config applied and writes it to disk: a temp file,
// fsync, rename, fsync of the directory, so that a crash leaves the old
// file or the new one, whole.
func (s *configStore) keep(whole *rivorav1.WatchResponse) error {
	s.whole = whole
	data, err := proto.Marshal(whole)
	if err != nil {
		return fmt.Errorf("encode the config: %w", err)
	}
	if err := durable.WriteFile(s.path, data); err != nil {
		return fmt.Errorf("keep the config at %s: %w", s.path, err)
	}
	return nil
}

// noSecret stands in for the signing secrets the edge's config leaves
// out: an edge never signs, but the registry it checks destinations in
// holds a signer for each.
var noSecret = webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("an edge never signs"))

// unsigned are destinations as the edge's registry takes them: their
// secrets (left out of the edge's config, or whatever stands for them
// there) replaced by noSecret.
func unsigned(list []*rivorav1.Destination) []*rivorav1.Destination {
	out := make([]*rivorav1.Destination, len(list))
	for i, d := range list {
		d = proto.CloneOf(d)
		d.Secret, d.PreviousSecret, d.PreviousSecretExpiresAt = noSecret, "", nil
		// An edge never delivers: it gets no client key or OAuth2 secret,
		// and signs nothing: an ed25519 or legacy signature's key, left
		// out of its feed, would fail the registry's checks (the
		// destination registered unusable, warned about on every config).
		d.ClientCertificate, d.PreviousClientCertificate, d.Oauth2 = nil, nil, nil
		d.SignatureScheme, d.SigningKey, d.PreviousSigningKey, d.PreviousSigningKeyExpiresAt = "", "", "", nil
		d.LegacySignature = nil
		out[i] = d
	}
	return out
}

// unsignedSubscriptions are subscriptions without their secrets.
func unsignedSubscriptions(list []*rivorav1.Subscription) []*rivorav1.Subscription {
	out := make([]*rivorav1.Subscription, len(list))
	for i, s := range list {
		s = proto.CloneOf(s)
		s.Secret, s.PreviousSecret, s.PreviousSecretExpiresAt = "", "", nil
		out[i] = s
	}
	return out
}
