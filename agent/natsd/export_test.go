package natsd

import "github.com/nats-io/nats.go"

// LeaderElected runs what the leader-elected advisory runs, at once.
func LeaderElected(p *Publisher) { p.leaderElected() }

// LeadsMeta tells whether s leads the cluster's meta group.
func LeadsMeta(s *Server) bool { return s.ns.JetStreamIsLeader() }

// SystemUser is the system user and its password ("": none).
func SystemUser(s *Server) (user, password string) { return systemUser, s.system }

// ConnectSystem connects to s in process as its system user.
func ConnectSystem(s *Server, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect("", append(opts, nats.InProcessServer(s.ns), nats.UserInfo(systemUser, s.system))...)
}
