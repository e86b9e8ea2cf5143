package checker

import (
	"sort"
	"time"
)

// Recovery is how long after heal every lane was moving again: for each
// lane with an acknowledged event not yet delivered at heal (or published
// after it), the first 2xx delivery after heal; the latest of those. Lanes
// of destinations in skip (failing on purpose) are left out. stuck names
// a lane that had such events and no 2xx after heal (then the duration is
// meaningless).
func Recovery(h History, heal time.Time, skip map[string]bool) (took time.Duration, slowest string, stuck string) {
	firstOK := map[string]time.Time{}    // id → its first 2xx
	movedAfter := map[string]time.Time{} // lane → its first 2xx after heal
	laneOf := map[string]string{}
	for _, p := range h.Acked {
		laneOf[p.ID] = p.Destination + "/" + p.Customer + "/" + p.Lane
	}
	deliveries := append([]Delivery(nil), h.Deliveries...)
	sort.SliceStable(deliveries, func(i, j int) bool { return deliveries[i].At.Before(deliveries[j].At) })
	for _, d := range deliveries {
		if d.Status/100 != 2 {
			continue
		}
		if _, ok := firstOK[d.ID]; !ok {
			firstOK[d.ID] = d.At
		}
		lane, known := laneOf[d.ID]
		if _, ok := movedAfter[lane]; known && !ok && !d.At.Before(heal) {
			movedAfter[lane] = d.At
		}
	}
	waiting := map[string]bool{}
	for _, p := range h.Acked {
		if skip[p.Destination] {
			continue
		}
		if at, ok := firstOK[p.ID]; !ok || !at.Before(heal) {
			waiting[laneOf[p.ID]] = true
		}
	}
	lanes := make([]string, 0, len(waiting))
	for lane := range waiting {
		lanes = append(lanes, lane)
	}
	sort.Strings(lanes)
	for _, lane := range lanes {
		at, ok := movedAfter[lane]
		if !ok {
			return 0, "", lane
		}
		if d := at.Sub(heal); d > took {
			took, slowest = d, lane
		}
	}
	return took, slowest, ""
}
