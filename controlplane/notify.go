package controlplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/controlplane/notices"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/backoff"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk/eventid"
	"github.com/rivora/rivora/sdk/webhook"
)

// Operator notices (--operator-webhook). The notifier derives them from
// what the control plane already knows — agents' destination health
// (parked, recovered), the dead-letter archive (dead letters), and its own
// changes (an expired override, a destination disabled by Rivora) — and
// publishes each through an agent's ingest to the reserved destination
// notices.DestinationID. From there a notice is an event like any other:
// stored in JetStream before it counts as sent, signed, retried, ordered
// per destination it is about, and paced by the reserved destination's own
// budget, so a notice never waits for, or delays, the destination it is
// about.
//
// At-least-once across a restart: a notice accepted by ingest is durable.
// Before that it is only in the notifier's queue, so every trigger is
// re-derived when the notifier starts: the audit log (override expiries,
// disabled destinations) is scanned back noticeLookback; the archive
// (dead letters) too, after each destination's notice mark (the newest
// dead letter an accepted notice covered, noticemarks.go); health is
// polled afresh (a parked episode is keyed by the agent's transition
// time). The audit's notices are re-derived only past the config version
// up to which ingest accepted them all (auditMark), so a clean restart
// repeats none; one dropped from a full queue is not derived again once
// later ones were accepted (the drop is logged). Re-derived notices carry the same
// idempotency key where the trigger is the same, so within the dedup
// window they are stored once; beyond it an operator may get a notice
// twice (a health episode's, or one accepted just before a crash).

const (
	// noticePoll is how often the leader polls agents' health (and reads
	// the archive where it changed).
	noticePoll = time.Second
	// noticeLookback is how far back a starting notifier re-derives
	// notices from the audit log and the archive.
	noticeLookback = 10 * time.Minute
	// archiveSlack re-reads dead letters this far behind the newest one
	// seen: another agent may archive one that died earlier, later.
	archiveSlack = 2 * time.Minute
	// fullScanEvery spaces reads of every destination's new dead letters;
	// in between only destinations whose archived counter moved are read.
	fullScanEvery = 5 * time.Minute
	// maxQueuedNotices bounds the notices waiting for ingest.
	maxQueuedNotices = 10000
	// operatorMaxAttempts lets the reserved destination's window, not its
	// attempts, bound how long a notice is retried.
	operatorMaxAttempts = 1000
)

// notifier owns operator notices: the episode and batch state that decides
// them (notices.Episodes, notices.Batcher, touched only by its poll loop)
// and the queue of notices not yet accepted by ingest (under mu).
type notifier struct {
	cp       *ControlPlane
	url      string
	secret   string // "" = keep the stored one, or generate one
	episodes *notices.Episodes
	batcher  *notices.Batcher

	// scan decides which archive reads to make and which dead letters are
	// new (poll loop only).
	scan *notices.Scan
	// marks persists notice marks; loaded holds them as of start: dead
	// letters up to a destination's loaded mark were notified before.
	marks  noticeMarks
	loaded map[string]time.Time

	mu    sync.Mutex
	queue []notices.Notice
	// marked is the notice marks, advanced as notices are accepted.
	marked map[string]time.Time
	wake   chan struct{}

	// certWarning is --cert-expiry-warning; warned holds the client
	// certificates (destination + fingerprint) notified as expiring (poll
	// loop only).
	certWarning time.Duration
	warned      map[string]bool
}

func newNotifier(cp *ControlPlane, url, secret string, parkedAfter time.Duration) *notifier {
	if parkedAfter <= 0 {
		parkedAfter = notices.DefaultParkedAfter
	}
	return &notifier{
		cp: cp, url: url, secret: secret,
		episodes: notices.NewEpisodes(parkedAfter), batcher: notices.NewBatcher(notices.DefaultBatchEvery, notices.DefaultGather),
		marks: newNoticeMarks(cp), marked: map[string]time.Time{}, wake: make(chan struct{}, 1),
		certWarning: cp.certExpiryWarning(), warned: map[string]bool{},
	}
}

// destinationDisabled notices a destination Rivora disabled (a partner
// that answered 410 Gone) by the config change version. Safe on a nil
// notifier (no --operator-webhook).
func (n *notifier) destinationDisabled(id, reason string, version uint64, at time.Time) {
	if n != nil {
		n.enqueue(notices.Disabled(id, reason, version, at))
	}
}

// overrideExpired notices an expired override, removed by version.
func (n *notifier) overrideExpired(id string, version uint64, at time.Time) {
	if n != nil {
		n.enqueue(notices.Expired(id, version, at))
	}
}

func (n *notifier) enqueue(ns ...notices.Notice) {
	if len(ns) == 0 {
		return
	}
	n.mu.Lock()
	n.queue = append(n.queue, ns...)
	if drop := len(n.queue) - maxQueuedNotices; drop > 0 {
		n.cp.log.Error("operator notices dropped: ingest has not accepted any for a while", "dropped", drop)
		n.queue = n.queue[drop:]
	}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *notifier) head() (notices.Notice, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.queue) == 0 {
		return notices.Notice{}, false
	}
	return n.queue[0], true
}

func (n *notifier) pop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.queue = n.queue[1:]
}

// run polls while this control plane leads and publishes what it
// decides, until ctx ends.
func (n *notifier) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { n.publishLoop(ctx) })
	t := time.NewTicker(noticePoll)
	defer t.Stop()
	started := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.cp.leaderOnly() != nil {
			started = false // a new term re-derives: triggers of another leader's term may be unsent
			continue
		}
		if !started {
			if err := n.start(); err != nil {
				n.cp.log.Error("operator webhook: set up the reserved destination; retrying", "destination", notices.DestinationID, "error", err)
				continue
			}
			started = true
		}
		n.pollHealth(ctx)
		n.checkCertificates()
		n.pollDeadLetters(ctx)
		n.enqueue(n.batcher.Due(n.cp.now())...)
	}
}

// start sets up the reserved destination and re-derives the notices a
// previous run may not have handed to ingest.
func (n *notifier) start() error {
	if err := n.cp.ensureOperatorDestination(n.url, n.secret); err != nil {
		return err
	}
	marked, err := n.marks.load()
	if err != nil {
		return fmt.Errorf("operator notice marks: %w", err)
	}
	n.loaded = marked
	n.mu.Lock()
	n.marked = maps.Clone(marked)
	n.mu.Unlock()
	now := n.cp.now()
	n.scan = notices.NewScan(now.Add(-noticeLookback), archiveSlack, fullScanEvery)
	n.rederiveFromAudit(now.Add(-noticeLookback), auditVersion(marked))
	return nil
}

// auditMark is the marks' key (no destination id can be it) of the
// audit's notices: the config version up to which every audited change's
// notice was accepted by ingest. The marks hold times; this one holds
// that version as nanoseconds since the epoch (auditVersion).
const auditMark = "*audit-version"

// auditVersion is the audit mark's version (0: none).
func auditVersion(marks map[string]time.Time) uint64 {
	if t, ok := marks[auditMark]; ok && t.UnixNano() > 0 {
		return uint64(t.UnixNano())
	}
	return 0
}

// rederiveFromAudit queues the notices of audited changes at or after
// since whose config version is past through (the audit mark).
func (n *notifier) rederiveFromAudit(since time.Time, through uint64) {
	entries, err := n.cp.audit.List(1000, "")
	if err != nil {
		n.cp.log.Warn("operator notices: read the audit log to re-derive notices", "error", err)
		return
	}
	for _, e := range entries {
		if e.GetAt().AsTime().Before(since) || e.GetVersion() <= through || e.GetDestinationId() == notices.DestinationID {
			continue
		}
		switch {
		case e.GetAction() == "limits.expire":
			n.overrideExpired(e.GetDestinationId(), e.GetVersion(), e.GetAt().AsTime())
		case e.GetAction() == "destination.disable":
			n.destinationDisabled(e.GetDestinationId(), e.GetReason(), e.GetVersion(), e.GetAt().AsTime())
		}
	}
}

// pollHealth feeds every destination's parked state (parked on any agent)
// to the episodes and the agents' archived counters to the scan. A round
// where an agent did not answer is skipped: it says nothing about
// recovery.
func (n *notifier) pollHealth(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	views, err := n.cp.agents.healthViews(ctx, "", false, n.cp.cfg.Partitions)
	if err != nil {
		return
	}
	_, archived := summarize(views.all)
	n.scan.Archived(archived)
	// Whether a destination is parked is its partition's owner's word
	// alone. The other agents see it idle, and while a partition has no
	// owner, or its new owner is still rebuilding it, nobody knows:
	// judging then took a failover for a recovery (destination.recovered
	// without a single 2xx). Such a partition's destinations are left as
	// they were this round; the others are judged.
	park, _ := summarize(views.owners)
	now := n.cp.now()
	_, dests := n.cp.store.Snapshot()
	known := make(map[string]bool, len(dests))
	for _, d := range dests {
		if id := d.GetId(); id != notices.DestinationID {
			known[id] = true
			if views.undecided(uint32(lanes.Partition(id, n.cp.cfg.Partitions))) {
				continue
			}
			p, isParked := park[id]
			if nt, ok := n.episodes.Observe(id, isParked, p.since, p.cause, now); ok {
				n.enqueue(nt)
			}
		}
	}
	for _, id := range n.episodes.Tracked() {
		if !known[id] {
			n.episodes.Forget(id)
		}
	}
}

// checkCertificates notices each client certificate that expires within
// the warning, once per certificate while this control plane runs (a
// restart re-derives it under the same idempotency key).
func (n *notifier) checkCertificates() {
	now := n.cp.now()
	_, dests := n.cp.store.Snapshot()
	for _, d := range dests {
		c := d.GetClientCertificate()
		if c == nil || !certificateExpiring(c, now, n.certWarning) {
			continue
		}
		mark := d.GetId() + " " + c.GetFingerprint()
		if !n.warned[mark] {
			n.warned[mark] = true
			n.enqueue(notices.Expiring(d.GetId(), c.GetFingerprint(), c.GetNotAfter().AsTime(), now))
		}
	}
}

// parked is a destination parked on some agent: since when (the earliest
// agent's transition) and why.
type parked struct {
	since time.Time
	cause string
}

// summarize folds the agents' health answers per destination: where it
// is parked, and its archived counters summed.
func summarize(health []*rivorav1.DestinationHealth) (map[string]parked, map[string]int64) {
	park := make(map[string]parked)
	archived := make(map[string]int64)
	for _, h := range health {
		id := h.GetDestinationId()
		if h.GetArchivedDeadLetters() > 0 {
			archived[id] += h.GetArchivedDeadLetters()
		}
		if h.GetState() != "parked" {
			continue
		}
		p := parked{}
		if tr := h.GetLastTransition(); tr.GetTo() == "parked" {
			p = parked{since: tr.GetAt().AsTime(), cause: tr.GetCause()}
		}
		if q, ok := park[id]; ok && (p.since.IsZero() || (!q.since.IsZero() && q.since.Before(p.since))) {
			p = q
		}
		park[id] = p
	}
	return park, archived
}

// pollDeadLetters reads the archive where the scan says new dead letters
// may be, and counts the new ones into the batcher.
func (n *notifier) pollDeadLetters(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	full, fullSince, dests := n.scan.Due(n.cp.now())
	if full {
		if n.readDeadLetters(ctx, "", fullSince) {
			n.scan.Read("", n.cp.now())
		}
		return
	}
	for d, since := range dests {
		if n.readDeadLetters(ctx, d, since) {
			n.scan.Read(d, n.cp.now())
		}
	}
}

// readDeadLetters reads a destination's (or, for "", every
// destination's) dead letters from since, page by page, and reports
// whether every agent answered.
func (n *notifier) readDeadLetters(ctx context.Context, destination string, since time.Time) bool {
	for range 10 {
		dls, truncated, err := n.cp.agents.deadLetters(ctx, destination, since)
		if err != nil {
			return false
		}
		for _, dl := range dls {
			n.countDead(dl)
			if at := dl.GetDeadAt().AsTime(); at.After(since) {
				since = at
			}
		}
		if !truncated {
			return true
		}
	}
	return true // the rest on the next read, from the newest seen
}

func (n *notifier) countDead(dl *rivorav1.DeadLetter) {
	id, dest, at := dl.GetEvent().GetEventId(), dl.GetEvent().GetDestinationId(), dl.GetDeadAt().AsTime()
	if dest == notices.DestinationID || !n.scan.New(dest, id, at) {
		return
	}
	if !at.After(n.loaded[dest]) {
		return // an accepted notice covered it before this start
	}
	n.batcher.Add(dest, id, at, n.cp.now())
}

// advance moves a destination's notice mark once ingest accepted a
// deadletter.created notice, or the audit's mark once it accepted a
// notice re-derived from the audit log, and saves the marks.
func (n *notifier) advance(nt notices.Notice) {
	key, through := nt.DestinationID, nt.Through
	switch nt.Type {
	case notices.DeadLetterCreated:
	case notices.OverrideExpired, notices.DestinationDisabled:
		// Up to this one's version, but short of any audit notice still
		// queued: notices do not reach the queue in version order (an
		// expiry and a 410 race), and one queued must be re-derived.
		version := nt.AuditVersion
		n.mu.Lock()
		for _, q := range n.queue {
			if q.AuditVersion > 0 && q.AuditVersion <= version {
				version = q.AuditVersion - 1
			}
		}
		n.mu.Unlock()
		key, through = auditMark, time.Unix(0, int64(version)).UTC()
	default:
		return
	}
	n.mu.Lock()
	if !through.After(n.marked[key]) {
		n.mu.Unlock()
		return
	}
	n.marked[key] = through
	marks := maps.Clone(n.marked)
	n.mu.Unlock()
	if err := n.marks.save(marks); err != nil {
		n.cp.log.Warn("save operator notice marks (a restart may repeat a deadletter.created notice)", "error", err)
	}
}

// publishLoop hands queued notices to ingest, oldest first, retrying
// while no agent takes them.
func (n *notifier) publishLoop(ctx context.Context) {
	retry := backoff.Backoff{Initial: 200 * time.Millisecond, Max: 10 * time.Second}
	failing := false
	for ctx.Err() == nil {
		nt, ok := n.head()
		if !ok {
			select {
			case <-ctx.Done():
			case <-n.wake:
			}
			continue
		}
		id, dup, err := n.publish(ctx, nt)
		if err != nil {
			if !failing && ctx.Err() == nil {
				n.cp.log.Warn("operator notice not accepted yet; retrying", "type", nt.Type, "destination", nt.DestinationID, "error", err)
			}
			failing = true
			backoff.Sleep(ctx, retry.Next())
			continue
		}
		failing = false
		retry.Reset()
		n.pop()
		n.advance(nt)
		n.cp.log.Info("operator notice accepted", "type", nt.Type, "destination", nt.DestinationID, "event_id", id, "duplicate", dup)
	}
}

// publish offers a notice to each healthy agent's ingest until one
// accepts it.
func (n *notifier) publish(ctx context.Context, nt notices.Notice) (string, bool, error) {
	body, err := nt.Payload()
	if err != nil {
		return "", false, err
	}
	req := &rivorav1.PublishRequest{
		DestinationId: notices.DestinationID, CustomerId: notices.Customer, LaneKey: nt.DestinationID,
		Type: nt.Type, Payload: body, ContentType: "application/json", IdempotencyKey: nt.Key,
	}
	agents := n.cp.agents.connected()
	if len(agents) == 0 {
		return "", false, errNoAgents
	}
	var errs []error
	for _, a := range agents {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := rivorav1connect.NewIngestServiceClient(n.cp.agents.http, a.address, n.cp.agents.cell).Publish(cctx, connect.NewRequest(req))
		cancel()
		if err == nil {
			return resp.Msg.GetEventId(), resp.Msg.GetDuplicate(), nil
		}
		if connect.CodeOf(err) == connect.CodeAlreadyExists {
			// Its key was published already, with other content (another
			// leader's rendering of the same notice): that one stands.
			return eventid.FromKey(req.DestinationId, req.CustomerId, req.IdempotencyKey), true, nil
		}
		errs = append(errs, fmt.Errorf("agent %s: %w", a.name, err))
	}
	return "", false, errors.Join(errs...)
}

// deadLetters lists a destination's ("" = every destination's) dead
// letters that died at or after since, from every connected agent's
// archive (agents may share one: the caller
// dedupes), oldest first per agent; truncated: some agent had more. An
// agent that answered from its ledgers (the archive cannot be read) is an
// error, as before the ledgers could answer: the read is retried.
func (r *agentRegistry) deadLetters(ctx context.Context, destination string, since time.Time) ([]*rivorav1.DeadLetter, bool, error) {
	truncated := false
	var mu sync.Mutex
	answers, err := askAll(r, func(a *agentState) ([]*rivorav1.DeadLetter, error) {
		resp, err := rivorav1connect.NewArchiveServiceClient(r.http, a.address, r.cell).ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{
			Filter: &rivorav1.DeadLetterFilter{DestinationId: destination, Since: timestamppb.New(since)}, Limit: 1000,
		}))
		if err != nil {
			return nil, err
		}
		if why := resp.Msg.GetArchiveUnavailable(); why != "" {
			// The agent's ledgers answered: not the archive, which this
			// read is of (its ledgers are read again, from the archive,
			// once it can be).
			return nil, fmt.Errorf("the archive cannot be read (%s): a ledgers' answer is not the archive's; retried later", why)
		}
		mu.Lock()
		truncated = truncated || resp.Msg.GetTruncated()
		mu.Unlock()
		return resp.Msg.GetDeadLetters(), nil
	})
	var all []*rivorav1.DeadLetter
	for _, dls := range answers {
		all = append(all, dls...)
	}
	return all, truncated, err
}

// ensureOperatorDestination creates or updates the reserved destination
// from --operator-webhook and --operator-webhook-secret. A secret it
// generates is written to OperatorSecretPath, here; later runs keep the
// stored one.
func (cp *ControlPlane) ensureOperatorDestination(url, secret string) error {
	id := notices.DestinationID
	d, ok := cp.store.Get(id)
	if !ok {
		if secret == "" {
			// Kept before it is stored: a failed write stores nothing.
			var err error
			if secret, err = webhook.NewSecret(); err != nil {
				return err
			}
			if err := cp.keepOperatorSecret(secret); err != nil {
				return err
			}
		}
		now := timestamppb.New(cp.now())
		nd := &rivorav1.Destination{
			Id: id, Url: url, Secret: secret, Configured: &rivorav1.Limits{MaxAttempts: operatorMaxAttempts},
			CreatedAt: now, UpdatedAt: now, PriorityClass: rivorav1.PriorityClass_PRIORITY_CLASS_NORMAL,
		}
		if _, err := cp.change("destination.create", id, rivoraActor, "operator webhook", func(tx *DestinationTx) (string, error) {
			nd.CreatedVersion = tx.Version()
			tx.Put(nd)
			return "operator notices to " + url, nil
		}); err != nil {
			return err
		}
		return nil
	}
	if d.GetUrl() == url && (secret == "" || secret == d.GetSecret()) {
		return nil
	}
	_, _, err := cp.changeDestination("destination.update", id, rivoraActor, "operator webhook", func(d *rivorav1.Destination) (string, error) {
		detail := "url " + url
		d.Url = url
		if secret != "" && secret != d.Secret {
			d.Secret = secret
			detail += ", secret rotated"
		}
		d.UpdatedAt = timestamppb.New(cp.now())
		return detail, nil
	})
	return err
}

// reserved refuses user changes to the reserved destination.
func reserved(id string) error {
	if id != notices.DestinationID {
		return nil
	}
	return errorf(ErrInvalid, "destination id %q is reserved for operator notices; rivora controlplane --operator-webhook URL sets it", id)
}

// keepOperatorSecret writes a generated operator webhook secret to
// Config.OperatorSecretPath (mode 0600), where the receiver's operator
// picks it up: it is never logged nor answered, like every signing secret.
func (cp *ControlPlane) keepOperatorSecret(secret string) error {
	path := cp.cfg.OperatorSecretPath
	if path == "" {
		cp.log.Warn("operator webhook secret generated but no path to keep it: set --operator-webhook-secret so the receiver can verify notices", "fingerprint", auth.Fingerprint(secret))
		return nil
	}
	if err := writeSecretFile(path, secret+"\n"); err != nil {
		return fmt.Errorf("operator webhook secret: %w", err)
	}
	cp.log.Info("operator webhook secret generated and written (mode 0600): verify notices with it, or set --operator-webhook-secret", "path", path, "fingerprint", auth.Fingerprint(secret))
	return nil
}
