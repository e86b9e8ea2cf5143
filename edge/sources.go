package edge

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/rivora/rivora/internal/ids"
)

// SourceEdge tells whether s is an edge's source on INGEST (the shape
// Source gives it) and names the edge: sources of any other shape are
// not edges' and are never touched here.
func SourceEdge(s *jetstream.StreamSource) (string, bool) {
	if s == nil || s.Name != StreamName || s.External == nil {
		return "", false
	}
	domain, ok := strings.CutPrefix(s.External.APIPrefix, "$JS.")
	if !ok {
		return "", false
	}
	domain, ok = strings.CutSuffix(domain, ".API")
	if !ok || domain == "" {
		return "", false
	}
	return domain, true
}

// SetSources makes INGEST's edges' sources exactly one per edge of
// deliver, in one update, and keeps every other source as it is. deliver
// gives, per edge, where its buffer's consumer delivers (DeliverSubject,
// read from the edge), "" when it could not be read:
//   - a source already there that listens on that subject is left alone
//     (its position in the edge's buffer is INGEST's);
//   - one that listens elsewhere follows an older buffer of the name (the
//     edge's data dir was lost and made anew, and its consumer delivers
//     under the new buffer's incarnation): it is changed to listen on the
//     new subject. NATS then sets the source up again, sees the edge's
//     stream was recreated and starts it afresh at the new consumer's
//     position;
//   - an edge whose subject is unknown keeps its source as it is, and gets
//     none while it has none (it cannot be reached, so it forwards nothing
//     anyway): it is waiting.
//
// It returns the edges it added, removed and changed (none: nothing was
// written), and those waiting.
func SetSources(ctx context.Context, js jetstream.JetStream, deliver map[string]string) (added, removed, changed, waiting []string, err error) {
	names := make([]string, 0, len(deliver))
	for n := range deliver {
		if err := ids.Validate("edge name", n); err != nil {
			return nil, nil, nil, nil, err
		}
		names = append(names, n)
	}
	slices.Sort(names)
	err = updateSources(ctx, js, func(sources []*jetstream.StreamSource) []*jetstream.StreamSource {
		have := make(map[string]bool)
		next := make([]*jetstream.StreamSource, 0, len(sources)+len(names))
		for _, s := range sources {
			name, isEdge := SourceEdge(s)
			d, wanted := deliver[name]
			switch {
			case !isEdge:
				next = append(next, s)
			case wanted && !have[name]:
				have[name] = true
				if d != "" && sourceDeliver(s) != d {
					changed = append(changed, name)
					s = Source(name, d)
				}
				next = append(next, s)
			default:
				removed = append(removed, name)
			}
		}
		for _, n := range names {
			switch d := deliver[n]; {
			case have[n]:
			case d == "":
				waiting = append(waiting, n)
			default:
				have[n] = true
				added = append(added, n)
				next = append(next, Source(n, d))
			}
		}
		if len(added) == 0 && len(removed) == 0 && len(changed) == 0 {
			return nil
		}
		return next
	})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	slices.Sort(removed)
	return added, removed, changed, waiting, nil
}

// sourceDeliver is where an edge's source listens ("" for none).
func sourceDeliver(s *jetstream.StreamSource) string {
	if s.Consumer == nil {
		return ""
	}
	return s.Consumer.DeliverSubject
}

// DeliverSubjects reads DeliverSubject of each edge of names, a few at a
// time, each bounded by ReachTimeout. An edge it cannot read is left out
// of subjects, and its error is in errs: its caller says why an edge gets
// no source (ErrOtherEdgesBuffer: it never will).
func DeliverSubjects(ctx context.Context, js jetstream.JetStream, names []string) (subjects map[string]string, errs map[string]error) {
	var mu sync.Mutex
	subjects, errs = make(map[string]string, len(names)), map[string]error{}
	var g errgroup.Group
	g.SetLimit(8)
	for _, n := range names {
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(ctx, ReachTimeout)
			defer cancel()
			d, err := DeliverSubject(ctx, js, n)
			mu.Lock()
			if err == nil {
				subjects[n] = d
			} else {
				errs[n] = err
			}
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	return subjects, errs
}

// ReachTimeout bounds one read of an edge's consumer across the leaf.
const ReachTimeout = 2 * time.Second
