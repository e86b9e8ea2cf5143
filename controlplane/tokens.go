package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/ids"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// The API token operations behind TokenService (tokens_endpoint.go serves
// them). Tokens are part of the state, as hashes: a change is a new config
// version, audited, and pushed whole to the agents (feed.go), whose keys
// then refuse a revoked token at once. This control plane's own keys
// follow the store (syncKeys).

// maxTokenName bounds a token's name, in characters.
const maxTokenName = 128

// BootstrapTokenName names the admin token the first start creates.
const BootstrapTokenName = "bootstrap"

// syncKeys makes the API tokens in force those of the store.
func (cp *ControlPlane) syncKeys() { cp.keys.SetTokens(cp.store.Tokens()) }

// reloaded follows a state the store reloaded after losing a write race
// (ErrConflict): another control plane's tokens and destinations.
func (cp *ControlPlane) reloaded() {
	cp.syncKeys()
	cp.broadcast()
}

// changeTokens applies fn to the stored tokens as one new config version,
// records it and pushes the tokens to every agent at once.
func (cp *ControlPlane) changeTokens(action string, who actor, fn func(all map[string]*rivorav1.ApiToken) (detail string, err error)) (uint64, error) {
	var detail string
	version, err := cp.store.UpdateTokens(func(all map[string]*rivorav1.ApiToken) error {
		var err error
		detail, err = fn(all)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrConflict) {
			cp.reloaded()
		}
		return 0, err
	}
	cp.syncKeys()
	cp.record(action, "", who, detail, version)
	cp.log.Info("tokens changed", "action", action, "author", who.name, "token_id", who.tokenID, "version", version, "detail", detail)
	cp.broadcast()
	return version, nil
}

// createToken makes a token; it returns the token (shown this once) and
// what is stored of it, hash included.
func (cp *ControlPlane) createToken(m *rivorav1.CreateTokenRequest, who actor) (string, *rivorav1.ApiToken, uint64, error) {
	if err := validateToken(m); err != nil {
		return "", nil, 0, err
	}
	token, id, err := auth.NewToken()
	if err != nil {
		return "", nil, 0, err
	}
	now := cp.now()
	t := &rivorav1.ApiToken{
		Id: id, Name: strings.TrimSpace(m.GetName()), Role: m.GetRole(), Customers: slices.Clone(m.GetCustomers()),
		CreatedAt: timestamppb.New(now), Hash: auth.Hash(token), CreatedBy: who.name,
	}
	if ttl := m.GetTtl().AsDuration(); ttl > 0 {
		t.ExpiresAt = timestamppb.New(now.Add(ttl))
	}
	version, err := cp.changeTokens("token.create", who, func(all map[string]*rivorav1.ApiToken) (string, error) {
		if _, taken := all[t.Id]; taken {
			return "", errorf(ErrExists, "token id %s is taken (a 1 in 2^64 chance): create it again", t.Id)
		}
		all[t.Id] = t
		return describeToken(t), nil
	})
	if err != nil {
		return "", nil, 0, err
	}
	return token, t, version, nil
}

// validateToken checks a CreateTokenRequest (an ErrInvalid).
func validateToken(m *rivorav1.CreateTokenRequest) error {
	name := strings.TrimSpace(m.GetName())
	switch {
	case name == "":
		return tag(ErrInvalid, errors.New("a token needs a name (--name): the audit log names its changes by it"))
	case len([]rune(name)) > maxTokenName:
		return errorf(ErrInvalid, "name: %d characters, the limit is %d", len([]rune(name)), maxTokenName)
	case strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return errorf(ErrInvalid, "name %q: only printable characters", name)
	}
	if _, known := rivorav1.Role_name[int32(m.GetRole())]; !known || m.GetRole() == rivorav1.Role_ROLE_UNSPECIFIED {
		return tag(ErrInvalid, errors.New("a token needs a role (--role): admin, operator, viewer, publisher or customer"))
	}
	switch m.GetRole() {
	case rivorav1.Role_ROLE_PUBLISHER:
		if len(m.GetCustomers()) == 0 {
			return tag(ErrInvalid, errors.New(`a publisher token needs the customers it publishes for (--customer C, repeated; "*" for any)`))
		}
		for _, c := range m.GetCustomers() {
			if c == "*" {
				continue
			}
			if err := ids.Validate("customer", c); err != nil {
				return tag(ErrInvalid, fmt.Errorf(`%w (or "*" for any customer)`, err))
			}
		}
	case rivorav1.Role_ROLE_CUSTOMER:
		if len(m.GetCustomers()) == 0 {
			return tag(ErrInvalid, errors.New("a customer token needs the customers it acts for (--customer C, repeated)"))
		}
		for _, c := range m.GetCustomers() {
			if c == "*" {
				return tag(ErrInvalid, errors.New(`a customer token acts for the customers it names, never "*": a token for every customer is an operator's or a publisher's`))
			}
			if err := ids.Validate("customer", c); err != nil {
				return tag(ErrInvalid, err)
			}
		}
	default:
		if len(m.GetCustomers()) > 0 {
			return errorf(ErrInvalid, "customers scope publisher and customer tokens only; a %s token acts for every customer", auth.RoleName(m.GetRole()))
		}
	}
	if ttl := m.GetTtl(); ttl != nil && (!ttl.IsValid() || ttl.AsDuration() < 0) {
		return errorf(ErrInvalid, "ttl must be zero (no expiry) or positive, got %s", ttl.AsDuration())
	}
	return nil
}

// describeToken says what a token is, for the audit log and the log:
// never the token, nor its hash.
func describeToken(t *rivorav1.ApiToken) string {
	detail := fmt.Sprintf("token %s %q: role %s", t.GetId(), t.GetName(), auth.RoleName(t.GetRole()))
	if len(t.GetCustomers()) > 0 {
		detail += ", customers " + strings.Join(t.GetCustomers(), ",")
	}
	if exp := t.GetExpiresAt(); exp != nil {
		detail += ", expires " + exp.AsTime().UTC().Format(time.RFC3339)
	}
	return detail
}

// tokens lists the tokens, oldest first, without their hashes.
func (cp *ControlPlane) tokens() []*rivorav1.ApiToken {
	out := cp.store.Tokens()
	for _, t := range out {
		t.Hash = ""
	}
	return out
}

// revokeToken removes a token: every agent refuses it once the change
// reaches it. An admin token is kept unless another admin token lasts
// (lastingAdmin): without one, nobody could create tokens again once the
// short-lived ones expire.
func (cp *ControlPlane) revokeToken(id string, who actor) (uint64, error) {
	if id == "" {
		return 0, tag(ErrInvalid, errors.New("which token? give its id (tok_…, see `rivoractl tokens list`)"))
	}
	now := cp.now()
	return cp.changeTokens("token.revoke", who, func(all map[string]*rivorav1.ApiToken) (string, error) {
		t, ok := all[id]
		if !ok {
			return "", errorf(ErrNotFound, "token %q does not exist (revoked already, or never created); see `rivoractl tokens list`", id)
		}
		if usableAdmin(t, now) {
			others := 0
			for _, o := range all {
				if o.GetId() != id && lastingAdmin(o, now) {
					others++
				}
			}
			if others == 0 {
				return "", errorf(ErrPrecondition, "%s is the last admin token (any other expires within %s): revoking it would lock everyone out of tokens and destinations; create another admin token first (rivoractl tokens create --role admin, with no --ttl or one over %s)", id, lastingAdminTTL, lastingAdminTTL)
			}
		}
		delete(all, id)
		return describeToken(t), nil
	})
}

// lastingAdminTTL is how long another admin token must still last for an
// admin token to be revoked: a token about to expire is no way back in.
const lastingAdminTTL = 24 * time.Hour

// lastingAdmin reports whether t is an admin token that never expires or
// lasts at least lastingAdminTTL more.
func lastingAdmin(t *rivorav1.ApiToken, now time.Time) bool {
	return t.GetRole() == rivorav1.Role_ROLE_ADMIN && (t.GetExpiresAt() == nil || !t.GetExpiresAt().AsTime().Before(now.Add(lastingAdminTTL)))
}

// usableAdmin reports whether t is an admin token that has not expired.
func usableAdmin(t *rivorav1.ApiToken, now time.Time) bool {
	return t.GetRole() == rivorav1.Role_ROLE_ADMIN && (t.GetExpiresAt() == nil || now.Before(t.GetExpiresAt().AsTime()))
}

// bootstrap creates the admin token "bootstrap" when no admin token is
// usable — the first start, or every admin token has expired (a restart
// is then the way back in) — and writes it to Config.AdminTokenPath, mode
// 0600, before storing it: a failed write stores nothing, and the next
// start tries again.
func (cp *ControlPlane) bootstrap() error {
	path := cp.cfg.AdminTokenPath
	now := cp.now()
	if slices.ContainsFunc(cp.store.Tokens(), func(t *rivorav1.ApiToken) bool { return usableAdmin(t, now) }) {
		if path != "" {
			if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
				cp.log.Info("the bootstrap admin token was made on an earlier start and is not at its path any more; use a token you keep (rivoractl tokens create)", "path", path)
			}
		}
		return nil
	}
	if path == "" {
		cp.log.Warn("no API token is stored and no admin token path is set: no caller can be let in until a token is stored")
		return nil
	}
	token, id, err := auth.NewToken()
	if err != nil {
		return err
	}
	t := &rivorav1.ApiToken{Id: id, Name: BootstrapTokenName, Role: rivorav1.Role_ROLE_ADMIN, CreatedAt: timestamppb.New(cp.now()), Hash: auth.Hash(token)}
	if err := writeSecretFile(path, token+"\n"); err != nil {
		return fmt.Errorf("bootstrap admin token: %w", err)
	}
	if _, err := cp.changeTokens("token.create", systemActor, func(all map[string]*rivorav1.ApiToken) (string, error) {
		for _, o := range all {
			if usableAdmin(o, now) {
				return "", errorf(ErrExists, "an admin token exists already")
			}
		}
		all[t.Id] = proto.Clone(t).(*rivorav1.ApiToken)
		return describeToken(t) + " (bootstrap, written to " + path + ")", nil
	}); err != nil {
		return fmt.Errorf("bootstrap admin token: %w", err)
	}
	cp.log.Info("bootstrap admin token written (mode 0600); call the API with it: rivoractl --token-file PATH", "path", path, "token_id", id)
	return nil
}

// writeSecretFile writes data to path, mode 0600, atomically: a temp file
// in the same directory, fsynced, renamed over path.
func writeSecretFile(path, data string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteString(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
