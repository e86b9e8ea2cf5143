package e2e

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/poll"
)

// A second `rivora edge` started under the name of a running one (its
// own data dir, the same cell): it exits non-zero at its start, once it
// has waited for the name, its log naming the name and what to do, and
// it never joins the cell; the first stays connected throughout (before,
// the two took turns on the leaf connection, each down every other
// second) and keeps delivering. Stopped and started again on its data
// dir, the first gets its name back.
func TestEdgeSecondUnderTakenNameRefused(t *testing.T) {
	w := newDevEdgeWorld(t, "edge-twice", edgeOptions{})
	w.publishRounds(2)
	w.p.WaitDelivered(t, w.pub.all(), 60*time.Second)

	dup := &edgeProc{opts: w.e.opts, dataDir: t.TempDir()}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	dup.proc = newProc(t, "rivora edge edge-twice (second)", rivoraBin, addr, dup.args(addr))
	dup.watchExit = false // its exit is the point
	dup.start()
	var dropped []string
	err := poll.Check(60*time.Second, 100*time.Millisecond, func() error {
		if up, err := w.e.metric("rivora_edge_cell_connected"); err != nil || up != 1 {
			dropped = append(dropped, time.Now().Format(time.RFC3339Nano))
		}
		if _, exited := dup.Exited(); !exited {
			return errNotYet
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the second edge under edge-twice still runs: %v", err)
	}
	exitErr, _ := dup.Exited()
	log := dup.Tail(8 << 10)
	if exitErr == nil {
		t.Fatalf("the second edge exited 0:\n%s", log)
	}
	for _, want := range []string{`edge name \"edge-twice\" is in use by another running edge`, "another --name", "stop the other one"} {
		if !strings.Contains(log, want) {
			t.Fatalf("the second edge's log does not say %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "confirmed this edge's name") {
		t.Fatalf("the refused edge joined the cell:\n%s", log)
	}
	if len(dropped) > 0 {
		t.Fatalf("the first edge's link to the cell was down while the second tried (at %v)", dropped)
	}
	if e := waitEdgeListed(t, w.r.adminURL, w.name, "connected", 10*time.Second, func(e edgeJSON) bool { return e.Connected }); !e.Connected {
		t.Fatalf("edges list: %s", e)
	}
	w.publishRounds(2)
	w.p.WaitDelivered(t, w.pub.all(), 60*time.Second)

	// Its own restart on its data dir is the name's holder still (the
	// instance id is the data dir's): it starts, and delivers.
	w.e.stop(30 * time.Second)
	w.e.run()
	w.e.waitMetrics("connected again after its restart", 30*time.Second, func(m edgeMetrics) bool { return m.Connected })
	w.publishRounds(2)
	if err := w.p.AwaitDelivered(w.pub.all(), 60*time.Second); err != nil {
		t.Fatal(errors.Join(errors.New("after the first edge's restart"), err))
	}
}
