package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Keys is what a process checks callers against: the cell token and the
// API tokens in force (by hash), replaced whole by SetTokens whenever the
// control plane's tokens change. Until the first SetTokens an API token
// is answered Unavailable, which clients retry, not Unauthenticated; a
// process that expects its tokens soon (ExpectTokens: an agent restarted
// in a roll, listening before its first config) has such a call wait for
// them first, up to FirstTokensWait or the call's deadline, until it
// finds its control plane out of reach (NoTokensSoon). Safe for
// concurrent use; a check takes no lock.
type Keys struct {
	cell CellToken
	now  func() time.Time
	// tokens is nil until the first SetTokens.
	tokens atomic.Pointer[map[string]*rivorav1.ApiToken]
	// staleNote, when set, says why a token this process does not know
	// may still be good ("" when there is no reason to think so): an
	// edge cut off from its control plane has not had the tokens
	// created since.
	staleNote atomic.Pointer[func() string]
	// changed is closed, and replaced, by every SetTokens: what a
	// stream's watch (standing.go) and a call before the first tokens
	// (awaitFirstTokens) wait on.
	changed atomic.Pointer[chan struct{}]
	// expecting: the first tokens are on their way (ExpectTokens), and
	// calls before them wait for them (awaitFirstTokens).
	expecting atomic.Bool
	// firstWait bounds awaitFirstTokens (FirstTokensWait; tests shorten it).
	firstWait time.Duration
	// awaiting counts the calls waiting in awaitFirstTokens.
	awaiting atomic.Int64
}

// maxFirstTokenWaiters bounds the calls awaitFirstTokens holds at once;
// past it a call is answered at once, as if nothing were expected.
const maxFirstTokenWaiters = 1024

// FirstTokensWait is how long a call that comes before a process's first
// API tokens waits for them. A restarted agent listens before its first
// config reaches it; a publisher pinned to it (a sidecar's SDK, whose
// five tries span ~1.5 s) would otherwise be refused until it gave up.
const FirstTokensWait = 5 * time.Second

// SetStaleNote sets what a refusal of an unknown token adds: note says,
// at the time of the call, why the token may be newer than the tokens
// this process has ("" when there is no reason to think so).
func (k *Keys) SetStaleNote(note func() string) { k.staleNote.Store(&note) }

// NewKeys returns keys with the cell token (zero: --insecure, the cell
// services open to anyone) and no API token yet.
func NewKeys(cell CellToken) *Keys {
	k := &Keys{cell: cell, now: time.Now, firstWait: FirstTokensWait}
	changed := make(chan struct{})
	k.changed.Store(&changed)
	return k
}

// changes is closed by the next SetTokens (or NoTokensSoon).
func (k *Keys) changes() <-chan struct{} { return *k.changed.Load() }

// wake closes the channel changes returned, and replaces it.
func (k *Keys) wake() {
	next := make(chan struct{})
	close(*k.changed.Swap(&next))
}

// ExpectTokens says that this process's first API tokens are on their
// way: a call that comes before them waits for them (awaitFirstTokens).
func (k *Keys) ExpectTokens() { k.expecting.Store(true) }

// NoTokensSoon says that the first API tokens are not coming soon (the
// control plane is out of reach): the calls waiting for them are
// answered now, and later ones at once.
func (k *Keys) NoTokensSoon() {
	if k.expecting.Swap(false) {
		k.wake()
	}
}

// Loaded reports whether this process has had its first API tokens.
func (k *Keys) Loaded() bool { return k.tokens.Load() != nil }

// Awaiting is how many calls wait for the first API tokens now.
func (k *Keys) Awaiting() int { return int(k.awaiting.Load()) }

// awaitFirstTokens returns once this process has had its first API
// tokens, or after firstWait, or when ctx ends, or when they are no
// longer expected (NoTokensSoon), whichever comes first; at once when
// they are not expected, or when maxFirstTokenWaiters calls wait already.
func (k *Keys) awaitFirstTokens(ctx context.Context) {
	if k.tokens.Load() != nil || !k.expecting.Load() {
		return
	}
	if k.awaiting.Add(1) > maxFirstTokenWaiters {
		k.awaiting.Add(-1)
		return
	}
	defer k.awaiting.Add(-1)
	timeout := time.NewTimer(k.firstWait)
	defer timeout.Stop()
	for {
		// The channel is read before the state: SetTokens and
		// NoTokensSoon change it before they close the channel they
		// replace, so either the check sees the change or the channel
		// read is closed.
		changed := k.changes()
		if k.tokens.Load() != nil || !k.expecting.Load() {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		case <-timeout.C:
			return
		}
	}
}

// byHash is the tokens in force (none before the first SetTokens).
func (k *Keys) byHash() map[string]*rivorav1.ApiToken {
	if m := k.tokens.Load(); m != nil {
		return *m
	}
	return nil
}

// Cell is the cell token (for this process's own cell calls).
func (k *Keys) Cell() CellToken { return k.cell }

// SetTokens replaces the API tokens in force.
func (k *Keys) SetTokens(tokens []*rivorav1.ApiToken) {
	m := make(map[string]*rivorav1.ApiToken, len(tokens))
	for _, t := range tokens {
		if t.GetHash() != "" {
			m[t.GetHash()] = t
		}
	}
	k.tokens.Store(&m)
	k.wake()
}

// Count is the number of API tokens in force.
func (k *Keys) Count() int { return len(k.byHash()) }

var errNoBearer = errors.New("missing `Authorization: Bearer <token>` (rivoractl: --token, RIVORA_TOKEN or --token-file; `rivora dev` wrote an admin token to <data-dir>/admin.token)")

// bearer is the token of an Authorization header.
func bearer(header string) (string, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if ok && !strings.EqualFold(scheme, "Bearer") {
		return "", connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("the Authorization header uses the %q scheme: send `Authorization: Bearer <token>` (rivoractl: --token, RIVORA_TOKEN or --token-file)", oneWord(scheme)))
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", connect.NewError(connect.CodeUnauthenticated, errNoBearer)
	}
	return strings.TrimSpace(token), nil
}

// Caller names the caller of an Authorization header: its token as the
// Door reads it (any spelling of the scheme, any spaces), hashed so that
// whoever keeps it keeps no secret; "" for a header without a token.
func Caller(header string) string {
	token, err := bearer(header)
	if err != nil {
		return ""
	}
	return Hash(token)
}

// oneWord bounds a caller's scheme name for an error message.
func oneWord(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}

// user authenticates an API token; the cell token only where cellToo.
func (k *Keys) user(token string, cellToo bool) (*Principal, error) {
	if cellToo && k.cell.Matches(token) {
		return &Principal{Name: "cell", Cell: true, bearer: token}, nil
	}
	if k.cell.Matches(token) {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("the cell token opens only AgentService and PartitionService; call with an API token (`rivoractl tokens create`)"))
	}
	if k.tokens.Load() == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("this process has not had the API tokens from its control plane yet (starting, or cut off from it); retry"))
	}
	t, ok := k.byHash()[Hash(token)]
	if !ok {
		msg := "token not recognised: revoked, expired long ago, or mistyped"
		if note := k.staleNote.Load(); note != nil {
			if why := (*note)(); why != "" {
				msg += "; or created since: " + why
			}
		}
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New(msg))
	}
	if exp := t.GetExpiresAt(); exp != nil && !k.now().Before(exp.AsTime()) {
		return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("token %s (%s) expired at %s", t.GetId(), t.GetName(), exp.AsTime().UTC().Format(time.RFC3339)))
	}
	return &Principal{TokenID: t.GetId(), Name: t.GetName(), Role: t.GetRole(), Customers: t.GetCustomers(), bearer: token}, nil
}

// cellCaller authenticates the cell token.
func (k *Keys) cellCaller(header string) (*Principal, error) {
	if k.cell.IsZero() {
		return &Principal{Name: "cell (insecure)", Cell: true}, nil
	}
	token, err := bearer(header)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("missing `Authorization: Bearer <cell token>`: only agents and control planes of this cell (--cell-token-file) call this service"))
	}
	if !k.cell.Matches(token) {
		if _, ok := k.byHash()[Hash(token)]; ok {
			return nil, connect.NewError(connect.CodePermissionDenied, errors.New("API tokens, admin included, do not open the cell's internal services; only the cell token (--cell-token-file) does"))
		}
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("not this cell's token (--cell-token-file)"))
	}
	return &Principal{Name: "cell", Cell: true, bearer: token}, nil
}
