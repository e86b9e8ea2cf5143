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

// SetSources makes INGEST's edges' sources exactly one per name (Source),
// and keeps every other source as it is. It reads from each edge where
// its buffer's consumer delivers (DeliverSubject), which names the
// buffer's incarnation:
//   - a source already there that listens on it is left alone (its
//     position in the edge's buffer is INGEST's);
//   - one that listens elsewhere follows an older buffer of the name (the
//     edge's data dir was lost and made anew): it is replaced by a fresh
//     source, in two updates, removed and then added, for a source
//     replaced in one update keeps its position, the old buffer's, and
//     would drop the new buffer's first events as ones it already has;
//   - an edge that cannot be reached keeps its source as it is; one with
//     none gets a source on the subject of a buffer made before
//     incarnations (forwardSubject with none), which is right for such an
//     edge and is replaced once a newer one is reached.
//
// It returns the edges it added, removed and replaced (none: nothing was
// written), and those waiting: unreachable, with a source that may not be
// the one their buffer delivers to (call again soon).
func SetSources(ctx context.Context, js jetstream.JetStream, names []string) (added, removed, replaced, waiting []string, err error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		if err := ids.Validate("edge name", n); err != nil {
			return nil, nil, nil, nil, err
		}
		want[n] = true
	}
	deliver := deliverSubjects(ctx, js, names)
	err = updateSources(ctx, js, func(sources []*jetstream.StreamSource) []*jetstream.StreamSource {
		have := make(map[string]bool)
		next := make([]*jetstream.StreamSource, 0, len(sources)+len(names))
		for _, s := range sources {
			name, isEdge := SourceEdge(s)
			switch {
			case !isEdge:
				next = append(next, s)
			case want[name] && !have[name]:
				have[name] = true
				d, known := deliver[name]
				if known && sourceDeliver(s) != d {
					replaced = append(replaced, name) // dropped now, added below
					continue
				}
				if !known && sourceDeliver(s) == forwardSubject(name, "") {
					waiting = append(waiting, name)
				}
				next = append(next, s)
			default:
				removed = append(removed, name)
			}
		}
		for _, n := range names {
			if have[n] {
				continue
			}
			d, known := deliver[n]
			if !known {
				d = forwardSubject(n, "")
				waiting = append(waiting, n)
			}
			have[n] = true
			added = append(added, n)
			next = append(next, Source(n, d))
		}
		if len(added) == 0 && len(removed) == 0 && len(replaced) == 0 {
			return nil
		}
		return next
	})
	if err == nil && len(replaced) > 0 {
		err = updateSources(ctx, js, func(sources []*jetstream.StreamSource) []*jetstream.StreamSource {
			for _, n := range replaced {
				if !slices.ContainsFunc(sources, func(s *jetstream.StreamSource) bool { return isSourceOf(s, n) }) {
					sources = append(sources, Source(n, deliver[n]))
				}
			}
			return sources
		})
	}
	if err != nil {
		return nil, nil, nil, nil, err
	}
	slices.Sort(added)
	slices.Sort(removed)
	slices.Sort(replaced)
	slices.Sort(waiting)
	return added, removed, replaced, waiting, nil
}

// sourceDeliver is where an edge's source listens ("" for none).
func sourceDeliver(s *jetstream.StreamSource) string {
	if s.Consumer == nil {
		return ""
	}
	return s.Consumer.DeliverSubject
}

// deliverSubjects reads DeliverSubject of every edge it can reach, a few
// at a time, each bounded by reachTimeout: a cut-off edge is left out.
func deliverSubjects(ctx context.Context, js jetstream.JetStream, names []string) map[string]string {
	var mu sync.Mutex
	out := make(map[string]string, len(names))
	var g errgroup.Group
	g.SetLimit(8)
	for _, n := range names {
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(ctx, reachTimeout)
			defer cancel()
			if d, err := DeliverSubject(ctx, js, n); err == nil {
				mu.Lock()
				out[n] = d
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	return out
}

// reachTimeout bounds one read of an edge's consumer across the leaf.
const reachTimeout = 2 * time.Second
