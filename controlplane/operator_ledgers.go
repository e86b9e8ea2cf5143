package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/bounds"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// While the archive cannot be read, an agent answers dlq list, stats and
// show from the dead letters waiting in the ledgers of the partitions it
// owns (archive_unavailable says so). The router first asks the other
// agents' archives (askArchive: the first agent's link to it may be the
// only one cut, or the agent may not answer at all). If none can read it: in a cell each agent owns only
// some partitions, so the router asks every connected agent for its
// ledgers (ledgers_only) and merges their answers, saying which
// partitions no answer covered and why rather than leaving them out
// silently. The archive's error (archive_unavailable) is passed on as the
// agent made it: it had the caller's token, and told a customer token
// only that the archive cannot be read (auth.ArchiveErrorFor).

// ledgerAnswer is one agent's answer from its ledgers: resp, or err.
type ledgerAnswer[T any] struct {
	agent *agentState
	resp  T
	err   error
	// read and unread are resp's ledger_partitions and unread_ledgers.
	read   []uint32
	unread []*rivorav1.UnreadLedger
}

// ledgerMsg is an answer from the ledgers (list, stats) as *M.
type ledgerMsg[M any] interface {
	*M
	GetLedgerPartitions() []uint32
	GetUnreadLedgers() []*rivorav1.UnreadLedger
}

// askLedgers asks every connected agent at once, each for at most
// askTimeout, with call (a ledgers_only request), and decides whose answer
// counts for each partition (cover). An answer that refuses the request
// itself (invalid, not found, denied: every agent has the same tokens and
// subscriptions) is the answer; others that failed count as the agent's
// partitions missing. answered holds the answers that came, in
// agent-name order; c's unread is as the caller may be told it
// (auth.UnreadLedgersFor).
func askLedgers[M any, T ledgerMsg[M]](ctx context.Context, r *operatorRouter, call func(context.Context, rivorav1connect.ArchiveServiceClient) (*connect.Response[M], error)) (answered []ledgerAnswer[T], c ledgerCoverage, err error) {
	answers, err := askAll(r.agents, func(a *agentState) (ledgerAnswer[T], error) {
		// askTimeout even within the caller's deadline: an agent whose
		// calls hang must not hold the others' answers past it.
		ctx, cancel := context.WithTimeout(ctx, r.askTimeout)
		defer cancel()
		resp, err := call(ctx, r.archive(a))
		if err != nil {
			return ledgerAnswer[T]{agent: a, err: fromAgent(a, err)}, nil
		}
		msg := T(resp.Msg)
		return ledgerAnswer[T]{agent: a, resp: msg, read: msg.GetLedgerPartitions(), unread: msg.GetUnreadLedgers()}, nil
	})
	if err != nil {
		return nil, c, err // no agent connected
	}
	for _, a := range answers {
		switch connect.CodeOf(a.err) {
		case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodePermissionDenied, connect.CodeUnauthenticated:
			return nil, c, a.err
		}
	}
	c = cover(r, answers)
	c.unread = auth.UnreadLedgersFor(ctx, c.unread)
	for _, a := range answers {
		if a.err == nil {
			answered = append(answered, a)
		}
	}
	return answered, c, nil
}

// ledgerCoverage is which answer counts for each partition's ledger, and
// the partitions no answer read, with why.
type ledgerCoverage struct {
	from   map[uint32]string // partition → the agent whose answer counts for it
	unread []*rivorav1.UnreadLedger
}

// counts reports whether an agent's answer counts for partition p: of the
// agents that read p (during a handoff, the old owner and the new may
// both), its current owner's (agentRegistry.ownerOf), else the first by
// name, so that a partition is not counted twice.
func (c ledgerCoverage) counts(agent string, p uint32) bool { return c.from[p] == agent }

// countsAll reports whether agent's answer counts for every partition in
// read.
func (c ledgerCoverage) countsAll(agent string, read []uint32) bool {
	for _, p := range read {
		if !c.counts(agent, p) {
			return false
		}
	}
	return true
}

// cover decides the coverage of the agents' answers over the cell's
// partitions. A partition no answer read is missing: said unread by its
// owner (opening it), its owner did not answer, nobody owns it, or it
// moved between the answers.
func cover[T any](r *operatorRouter, answers []ledgerAnswer[T]) ledgerCoverage {
	c := ledgerCoverage{from: make(map[uint32]string)}
	said := make(map[uint32]*rivorav1.UnreadLedger)
	failed := make(map[string]error)
	for _, a := range answers {
		if a.err != nil {
			failed[a.agent.name] = a.err
			continue
		}
		for _, p := range a.read {
			if _, ok := c.from[p]; !ok || r.isOwner(a.agent, p) {
				c.from[p] = a.agent.name
			}
		}
		for _, u := range a.unread {
			if u.GetAgent() == "" {
				continue // not held by that agent: its holder's answer says
			}
			for _, p := range u.GetPartitions() {
				said[p] = u
			}
		}
	}
	byWhy := make(map[[2]string]*rivorav1.UnreadLedger)
	for p := range uint32(r.partitions) {
		if _, ok := c.from[p]; ok {
			continue
		}
		agent, why := r.whyUnread(p, said[p], failed)
		u := byWhy[[2]string{agent, why}]
		if u == nil {
			u = &rivorav1.UnreadLedger{Agent: agent, Reason: why}
			byWhy[[2]string{agent, why}] = u
			c.unread = append(c.unread, u)
		}
		u.Partitions = append(u.Partitions, p)
	}
	return c
}

// isOwner reports whether a is partition p's current owner.
func (r *operatorRouter) isOwner(a *agentState, p uint32) bool {
	owner, ok := r.agents.ownerOf(p)
	return ok && owner.name == a.name
}

// whyUnread says why no answer read partition p's ledger, and whose it is.
func (r *operatorRouter) whyUnread(p uint32, said *rivorav1.UnreadLedger, failed map[string]error) (agent, why string) {
	if said != nil {
		return said.GetAgent(), said.GetReason()
	}
	owner, ok := r.agents.ownerOf(p)
	switch {
	case !ok:
		return "", "no agent owns it right now (see `rivoractl agents list`); retry"
	case failed[owner.name] != nil:
		return owner.name, fmt.Sprintf("its owner did not answer: %v", failed[owner.name])
	}
	return owner.name, "it moved between agents while they were asked; retry"
}

// read lists the partitions some answer read, sorted.
func (c ledgerCoverage) read() []uint32 {
	out := make([]uint32, 0, len(c.from))
	for p := range c.from {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// listLedgers answers ListDeadLetters from every agent's ledgers: at most
// the request's limit, destination by destination as the archive lists
// them (each destination is one partition's, so one agent's answer holds
// its dead letters in ledger order), and how many more matched. why is
// the archive's failure ("" when the caller asked for ledgers_only).
func (r *operatorRouter) listLedgers(ctx context.Context, req *rivorav1.ListDeadLettersRequest, why string) (*connect.Response[rivorav1.ListDeadLettersResponse], error) {
	ask := proto.Clone(req).(*rivorav1.ListDeadLettersRequest)
	ask.LedgersOnly = true
	answers, c, err := askLedgers(ctx, r, func(ctx context.Context, client rivorav1connect.ArchiveServiceClient) (*connect.Response[rivorav1.ListDeadLettersResponse], error) {
		return client.ListDeadLetters(ctx, connect.NewRequest(ask))
	})
	if err != nil {
		return nil, err
	}
	out := &rivorav1.ListDeadLettersResponse{ArchiveUnavailable: why, LedgerPartitions: c.read(), UnreadLedgers: c.unread}
	var dls []*rivorav1.DeadLetter
	more, unknownMore := int64(0), false
	for _, a := range answers {
		for _, dl := range a.resp.GetDeadLetters() {
			if c.counts(a.agent.name, dl.GetPartition()) {
				dls = append(dls, dl)
			}
		}
		// An answer's overflow is of all its partitions: counted only when
		// every one counts, else unknown (it may be another answer's).
		if c.countsAll(a.agent.name, a.read) {
			more += a.resp.GetMoreUnarchived()
		} else if a.resp.GetMoreUnarchived() > 0 {
			unknownMore = true
		}
	}
	sort.SliceStable(dls, func(i, j int) bool {
		return dls[i].GetEvent().GetDestinationId() < dls[j].GetEvent().GetDestinationId()
	})
	limit := int(req.GetLimit())
	if limit <= 0 || limit > bounds.DeadLetterList {
		limit = bounds.DeadLetterList
	}
	if len(dls) > limit {
		more += int64(len(dls) - limit)
		dls = dls[:limit]
	}
	out.DeadLetters, out.MoreUnarchived, out.Truncated = dls, more, more > 0 || unknownMore
	return connect.NewResponse(out), nil
}

// statsLedgers answers DeadLetterStats from every agent's ledgers (see
// listLedgers): each count is of one destination, so of one agent.
func (r *operatorRouter) statsLedgers(ctx context.Context, req *rivorav1.DeadLetterStatsRequest, why string) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
	ask := proto.Clone(req).(*rivorav1.DeadLetterStatsRequest)
	ask.LedgersOnly = true
	answers, c, err := askLedgers(ctx, r, func(ctx context.Context, client rivorav1connect.ArchiveServiceClient) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
		return client.DeadLetterStats(ctx, connect.NewRequest(ask))
	})
	if err != nil {
		return nil, err
	}
	out := &rivorav1.DeadLetterStatsResponse{ArchiveUnavailable: why, LedgerPartitions: c.read(), UnreadLedgers: c.unread}
	for _, a := range answers {
		for _, n := range a.resp.GetCounts() {
			if c.counts(a.agent.name, uint32(lanes.Partition(n.GetDestinationId(), r.partitions))) {
				out.Counts = append(out.Counts, n)
				out.Total += n.GetCount()
			}
		}
	}
	sortCounts(out.Counts)
	return connect.NewResponse(out), nil
}

// sortCounts orders counts as an agent does: newest dead letter first,
// then by destination, customer, subscription and reason.
func sortCounts(counts []*rivorav1.DeadLetterCount) {
	sort.SliceStable(counts, func(i, j int) bool {
		a, b := counts[i], counts[j]
		if !a.GetNewest().AsTime().Equal(b.GetNewest().AsTime()) {
			return a.GetNewest().AsTime().After(b.GetNewest().AsTime())
		}
		for _, k := range [][2]string{{a.GetDestinationId(), b.GetDestinationId()}, {a.GetCustomerId(), b.GetCustomerId()}, {a.GetSubscriptionId(), b.GetSubscriptionId()}} {
			if k[0] != k[1] {
				return k[0] < k[1]
			}
		}
		return a.GetReason() < b.GetReason()
	})
}

// getLedgers answers GetDeadLetter from every agent's ledgers. archiveErr
// is the agent's answer that the archive could not be read and that its
// own ledgers do not hold it (nil when the caller asked for ledgers_only).
func (r *operatorRouter) getLedgers(ctx context.Context, req *rivorav1.GetDeadLetterRequest, archiveErr error) (*connect.Response[rivorav1.GetDeadLetterResponse], error) {
	ask := proto.Clone(req).(*rivorav1.GetDeadLetterRequest)
	ask.LedgersOnly = true
	answers, err := askAll(r.agents, func(a *agentState) (ledgerAnswer[*rivorav1.GetDeadLetterResponse], error) {
		// askTimeout even within the caller's deadline: an agent whose
		// calls hang must not hold the others' answers past it.
		ctx, cancel := context.WithTimeout(ctx, r.askTimeout)
		defer cancel()
		resp, err := r.archive(a).GetDeadLetter(ctx, connect.NewRequest(ask))
		if err != nil {
			return ledgerAnswer[*rivorav1.GetDeadLetterResponse]{agent: a, err: fromAgent(a, err)}, nil
		}
		return ledgerAnswer[*rivorav1.GetDeadLetterResponse]{agent: a, resp: resp.Msg}, nil
	})
	if err != nil {
		return nil, err
	}
	var failed []string
	for _, a := range answers {
		switch code := connect.CodeOf(a.err); {
		case a.err == nil:
			md, _ := errkind.Info(archiveErr, errkind.ArchiveUnavailableReason)
			a.resp.ArchiveUnavailable = md["archive_error"]
			return connect.NewResponse(a.resp), nil
		case code == connect.CodePermissionDenied, code == connect.CodeUnauthenticated, code == connect.CodeInvalidArgument:
			return nil, a.err
		case code != connect.CodeNotFound:
			failed = append(failed, fmt.Sprintf("agent %s did not answer (%v)", a.agent.name, a.err))
		}
	}
	if len(failed) > 0 && hiddenAgents(ctx) {
		failed = []string{"an agent did not answer"}
	}
	return r.getLedgersMissing(req, archiveErr, failed)
}

// hiddenAgents: the caller of ctx's call is a customer token, which is
// not told agents' names nor their errors (auth.UnreadLedgersFor).
func hiddenAgents(ctx context.Context) bool {
	p := auth.FromContext(ctx)
	return p != nil && p.SelfService()
}

// getLedgersMissing is getLedgers' answer when no agent's ledger holds
// the dead letter; failed names the agents that did not answer.
func (r *operatorRouter) getLedgersMissing(req *rivorav1.GetDeadLetterRequest, archiveErr error, failed []string) (*connect.Response[rivorav1.GetDeadLetterResponse], error) {
	missing := "no agent's ledger holds it"
	if len(failed) > 0 {
		missing += "; but " + strings.Join(failed, ", ") + ": retry"
	}
	if archiveErr == nil {
		if len(failed) == 0 {
			return nil, errorf(ErrNotFound, "event %s: no dead letter of it waits in the ledgers (%s)", req.GetEventId(), missing)
		}
		return nil, errorf(ErrUnavailable, "event %s: %s", req.GetEventId(), missing)
	}
	md, _ := errkind.Info(archiveErr, errkind.ArchiveUnavailableReason)
	return nil, errorf(ErrUnavailable, "dead letter %s: the archive cannot be read (%s), and %s", req.GetEventId(), md["archive_error"], missing)
}

// archiveDownErr reports whether an agent's error says the archive could
// not be read and the dead letter is not in that agent's ledgers
// (errkind.ArchiveUnavailableReason).
func archiveDownErr(err error) bool {
	_, ok := errkind.Info(err, errkind.ArchiveUnavailableReason)
	return ok && !errors.Is(err, context.Canceled)
}
