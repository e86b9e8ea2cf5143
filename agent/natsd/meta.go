package natsd

import (
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The cluster's meta group, through which every stream and consumer
// create goes, has a leader too: a stopping member that leads it leaves
// the cell without one from its exit until an election timeout later,
// and the creates of the agents that take its partitions over wait
// meanwhile. Its step-down is a request of the system account only
// ($JS.API.META.LEADER.STEPDOWN), which the agent's user is not in, and
// nats-server exports no call that reaches the meta group. So a server
// with a password has a second user, in the system account, made for
// that request alone: its password is drawn at Start and never leaves
// the process, only an in-process connection may log in as it (no
// listener, client or leaf, takes it whatever it presents), and it may
// publish nothing but the step-down.
//
// A server without a password (--insecure, rivora dev) serves every
// client in one account, with no user: it has no system user, and its
// meta leadership moves by the election at its exit.

// systemUser is the system account's user of a server with a password.
const systemUser = "rivora-system"

// metaStepDown is the system account's request for the meta leader to
// step down.
const metaStepDown = "$JS.API.META.LEADER.STEPDOWN"

// systemAccess adds the system user, with a fresh random password, to
// opts, whose client user is user (the agent's); it returns the
// password.
func systemAccess(opts *server.Options, user *server.User) (string, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", fmt.Errorf("embedded nats: the system user's password: %w", err)
	}
	password := fmt.Sprintf("%x", secret)
	// Given users of the system account and of none other, nats-server
	// lets every client that presents no credential in, as a user of
	// the global account, unless an authorization block was defined,
	// as an operator's file would have beside them: define one.
	if err := opts.ProcessConfigString("authorization {}"); err != nil {
		return "", fmt.Errorf("embedded nats: the authorization block: %w", err)
	}
	sys := server.NewAccount(server.DEFAULT_SYSTEM_ACCOUNT)
	opts.Accounts = append(opts.Accounts, sys)
	opts.Users = append(opts.Users, user, &server.User{
		Username: systemUser, Password: password, Account: sys,
		AllowedConnectionTypes: map[string]struct{}{"IN_PROCESS": {}},
		Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{metaStepDown}},
			Subscribe: &server.SubjectPermission{Allow: []string{nats.InboxPrefix + ">"}},
		},
	})
	return password, nil
}

// HandOverMeta hands the cluster's meta leadership, if this server
// holds it, to a peer that is current (caught up, online), and waits
// up to wait until this server hears of that peer's lead: it returns
// the new leader's name, or "" with a nil error when there was nothing
// to hand (not the meta leader, not in a cluster, or no password and so
// no system user). With no caught-up peer the leadership stays here,
// an error says so: stepping down would leave the cell without a meta
// leader until this server was elected again.
func (s *Server) HandOverMeta(wait time.Duration) (string, error) {
	if !s.ns.JetStreamIsClustered() || !s.ns.JetStreamIsLeader() || s.system == "" {
		return "", nil
	}
	deadline := time.Now().Add(wait)
	meta := s.metaInfo()
	if meta == nil {
		return "", errors.New("meta leadership kept: no meta group information")
	}
	preferred := caughtUp(meta.Replicas)
	if preferred == "" {
		return "", errors.New("meta leadership kept: no caught-up peer to take it")
	}
	// Without this server, the peers that are current must still make a
	// quorum: else the new leader loses it at this server's exit, and
	// stays a leader without quorum (requests time out) until it notices,
	// seconds later, where an election after the exit answers sooner.
	if current := currentPeers(meta.Replicas); current < meta.QuorumNeeded {
		return "", fmt.Errorf("meta leadership kept: %d current peers would not make the quorum of %d without this server", current, meta.QuorumNeeded)
	}
	if err := s.stepDownMeta(preferred, min(handOverTry, time.Until(deadline))); err != nil {
		return "", fmt.Errorf("meta leadership to %s: %w", preferred, err)
	}
	for {
		if m := s.metaInfo(); m != nil && m.Leader != "" && m.Leader != s.ns.Name() {
			return m.Leader, nil
		}
		if !time.Now().Before(deadline) {
			return "", fmt.Errorf("meta leadership stepped down to %s: no new leader heard of within %s", preferred, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metaInfo is this server's view of the meta group (nil: none).
func (s *Server) metaInfo() *server.MetaClusterInfo {
	jsz, err := s.ns.Jsz(&server.JSzOptions{})
	if err != nil || jsz.Disabled {
		return nil
	}
	return jsz.Meta
}

// stepDownMeta asks the meta leader (this server) to hand its
// leadership to preferred, as the system user, on a connection opened
// for it.
func (s *Server) stepDownMeta(preferred string, timeout time.Duration) error {
	nc, err := nats.Connect("", nats.InProcessServer(s.ns), nats.Name(systemUser), nats.UserInfo(systemUser, s.system), nats.Timeout(timeout))
	if err != nil {
		return fmt.Errorf("connect as the system user: %w", err)
	}
	defer nc.Close()
	return requestStepDown(nc, metaStepDown, preferred, timeout)
}

// currentPeers counts the peers in replicas that are current and online.
func currentPeers(replicas []*server.PeerInfo) int {
	n := 0
	for _, peer := range replicas {
		if peer.Current && !peer.Offline {
			n++
		}
	}
	return n
}
