package natsd

// LeaderElected runs what the leader-elected advisory runs, at once.
func LeaderElected(p *Publisher) { p.leaderElected() }
