// Package auth is Rivora's security boundary: API tokens and their roles,
// the cell token that opens the services agents and control planes call
// each other on, and the one interceptor that checks every call against a
// table of RPC → who may call it (policy.go). A call the table does not
// name is refused.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// TokenPrefix starts every API token, so a leaked one is recognisable
// (secret scanners, logs).
const TokenPrefix = "rvk_"

// NewToken returns a new API token (TokenPrefix + 32 random bytes,
// base64url) and its public id ("tok_" + 16 hex digits).
func NewToken() (token, id string, err error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", "", fmt.Errorf("generate a token: %w", err)
	}
	idBytes := make([]byte, 8)
	if _, err := rand.Read(idBytes); err != nil {
		return "", "", fmt.Errorf("generate a token id: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(secret), "tok_" + hex.EncodeToString(idBytes), nil
}

// Hash is how a token is kept: SHA-256, hex. A token is 256 random bits,
// so a fast hash is enough (no dictionary to attack).
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Fingerprint names a secret without revealing it: "sha256:" and the
// first 16 hex digits of its SHA-256.
func Fingerprint(secret string) string {
	if secret == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// CellToken is the shared secret of a cell's control planes and agents.
type CellToken struct {
	secret []byte
}

// MinCellTokenBytes is the shortest cell token accepted.
const MinCellTokenBytes = 32

// LoadCellToken reads a cell token file (surrounding space trimmed). The
// token must be at least MinCellTokenBytes long; `openssl rand -hex 32`
// makes one.
func LoadCellToken(path string) (CellToken, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return CellToken{}, fmt.Errorf("cell token: %w", err)
	}
	t := strings.TrimSpace(string(data))
	if len(t) < MinCellTokenBytes {
		return CellToken{}, fmt.Errorf("cell token %s: %d bytes, want at least %d (make one with `openssl rand -hex 32`)", path, len(t), MinCellTokenBytes)
	}
	return CellToken{secret: []byte(t)}, nil
}

// NewCellToken returns a random cell token, for a process that is its own
// cell (rivora dev).
func NewCellToken() (CellToken, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return CellToken{}, fmt.Errorf("generate a cell token: %w", err)
	}
	return CellToken{secret: []byte(hex.EncodeToString(b))}, nil
}

// CellTokenOf wraps a token already in hand (tests, tools).
func CellTokenOf(s string) CellToken { return CellToken{secret: []byte(s)} }

// IsZero reports whether no cell token is set (--insecure).
func (c CellToken) IsZero() bool { return len(c.secret) == 0 }

// String is the token itself, for the Authorization header of cell calls.
func (c CellToken) String() string { return string(c.secret) }

// Matches compares in constant time.
func (c CellToken) Matches(presented string) bool {
	return len(c.secret) > 0 && subtle.ConstantTimeCompare(c.secret, []byte(presented)) == 1
}

// Derive is a credential for one use of the cell token (such as the
// embedded NATS servers' password), so the token itself is not sent there.
func (c CellToken) Derive(purpose string) string {
	sum := sha256.Sum256(append([]byte("rivora/"+purpose+"/"), c.secret...))
	return hex.EncodeToString(sum[:])
}
