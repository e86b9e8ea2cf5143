package notices

import (
	"fmt"
	"time"
)

// DefaultParkedAfter is how long a destination stays parked before its
// destination.parked notice (--notify-parked-after).
const DefaultParkedAfter = 5 * time.Minute

// Episodes follows destinations' parked episodes and says when to notify
// them parked and recovered. Not safe for concurrent use: the control
// plane's notifier owns it.
//
// Invariant: a destination has an episode exactly while it is parked, or
// was notified parked and is not yet recovered; notified is set at most
// once per episode.
type Episodes struct {
	// After is how long an episode lasts before it is notified.
	After    time.Duration
	episodes map[string]*episode
}

type episode struct {
	since    time.Time
	cause    string
	notified bool
}

// NewEpisodes returns an Episodes that notifies parks lasting after.
func NewEpisodes(after time.Duration) *Episodes {
	return &Episodes{After: after, episodes: make(map[string]*episode)}
}

// Observe takes a destination's state at now: parked (since when, and
// why) or not. It returns the notice due, if any.
func (e *Episodes) Observe(destination string, parked bool, since time.Time, cause string, now time.Time) (Notice, bool) {
	ep := e.episodes[destination]
	if !parked {
		return e.end(destination, ep, now)
	}
	if ep == nil {
		if since.IsZero() || since.After(now) {
			since = now
		}
		ep = &episode{since: since, cause: cause}
		e.episodes[destination] = ep
	}
	if ep.notified || now.Sub(ep.since) < e.After {
		return Notice{}, false
	}
	ep.notified = true
	return parkedNotice(destination, ep, now), true
}

// end closes a destination's episode: a recovery notice if it was
// notified parked.
func (e *Episodes) end(destination string, ep *episode, now time.Time) (Notice, bool) {
	if ep == nil {
		return Notice{}, false
	}
	delete(e.episodes, destination)
	if !ep.notified {
		return Notice{}, false
	}
	since := ep.since
	return Notice{
		Type: DestinationRecovered, DestinationID: destination, At: now, ParkedSince: &since,
		Message: fmt.Sprintf("destination %s recovered: a delivery got through after %s parked", destination, now.Sub(since).Round(time.Second)),
		Key:     key(DestinationRecovered, destination, since.UnixMilli()),
	}, true
}

// Forget drops a destination that is gone (deleted): no recovery notice.
func (e *Episodes) Forget(destination string) { delete(e.episodes, destination) }

// Tracked lists the destinations with an episode.
func (e *Episodes) Tracked() []string {
	out := make([]string, 0, len(e.episodes))
	for d := range e.episodes {
		out = append(out, d)
	}
	return out
}

func parkedNotice(destination string, ep *episode, now time.Time) Notice {
	since := ep.since
	msg := fmt.Sprintf("destination %s has been parked for %s (one probe a second; its events wait): check the partner", destination, now.Sub(since).Round(time.Second))
	return Notice{
		Type: DestinationParked, DestinationID: destination, At: now, ParkedSince: &since, Reason: ep.cause, Message: msg,
		Key: key(DestinationParked, destination, since.UnixMilli()),
	}
}
