package edge

import (
	"context"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

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
// in one update, and keeps every other source as it is. An edge's source
// already there is left alone (its position in the edge's buffer is
// INGEST's). It returns the edges it added and removed (none: nothing was
// written).
func SetSources(ctx context.Context, js jetstream.JetStream, names []string) (added, removed []string, err error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		if err := ids.Validate("edge name", n); err != nil {
			return nil, nil, err
		}
		want[n] = true
	}
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
				next = append(next, s)
			default:
				removed = append(removed, name)
			}
		}
		for _, n := range names {
			if !have[n] {
				have[n] = true
				added = append(added, n)
				next = append(next, Source(n))
			}
		}
		if len(added) == 0 && len(removed) == 0 {
			return nil
		}
		return next
	})
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(added)
	slices.Sort(removed)
	return added, removed, nil
}
