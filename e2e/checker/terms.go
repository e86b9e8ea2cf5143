package checker

import (
	"bufio"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Log lines of rivora agent (agent/partitions) that start and end a
// term; ParseTerms reads them.
const (
	msgOwned   = `msg="partition owned"`
	msgLost    = `msg="partition ownership lost; stopped"`
	msgHandoff = `msg="partition reassigned; handing it off"`
	msgFailed  = `msg="partition failed; reopening it"`
	// msgStalled: its store could not be written (cut off from its
	// quorum); no attempt starts from here on, and the lock goes back
	// once those in flight ended.
	msgStalled = `msg="partition store unreachable; giving the partition up until it can be written again"`
	runMarker  = "==== run " // e2e/process starts each run's output with it
)

var (
	timeRE      = regexp.MustCompile(`^time=(\S+)`)
	partitionRE = regexp.MustCompile(`\bpartition=(\d+)`)
	epochRE     = regexp.MustCompile(`\bepoch=(\d+)`)
)

// ParseTerms reads one agent's log (every run of the process, as
// e2e/process appends them) and returns its terms. A term still open
// when a run ends (kill -9) stays open: a dead process sends nothing, and
// the next term of the partition, here or elsewhere, has a newer epoch.
// One open at the end of the log stays open (To zero).
func ParseTerms(agent string, log io.Reader) ([]Term, error) {
	var terms []Term
	open := map[int]int{} // partition → index in terms
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		m := timeRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		pm := partitionRE.FindStringSubmatch(line)
		if pm == nil {
			continue
		}
		p, _ := strconv.Atoi(pm[1])
		switch {
		case strings.Contains(line, msgOwned):
			if i, ok := open[p]; ok {
				terms[i].To = at
			}
			var epoch uint64
			if em := epochRE.FindStringSubmatch(line); em != nil {
				epoch, _ = strconv.ParseUint(em[1], 10, 64)
			}
			open[p] = len(terms)
			terms = append(terms, Term{Partition: p, Agent: agent, Epoch: epoch, From: at})
		case strings.Contains(line, msgLost), strings.Contains(line, msgHandoff), strings.Contains(line, msgFailed),
			strings.Contains(line, msgStalled):
			if i, ok := open[p]; ok {
				terms[i].To = at
				delete(open, p)
			}
		}
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i].From.Before(terms[j].From) })
	return terms, sc.Err()
}
