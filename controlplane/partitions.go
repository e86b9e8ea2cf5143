package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rivora/rivora/internal/durable"
)

// partitionsFile, in the state dir, records the partition count the cell
// was made with. Events are hashed to partitions by that count and kept in
// their partitions' lanes: another count would send new events elsewhere
// and leave the pending ones unread (not delivered, not counted, not
// listed), so a control plane refuses to start with one.
const partitionsFile = "partitions"

// fixPartitions records n as the state dir's partition count on the first
// start (and on the first start of a state dir made before the count was
// recorded), and refuses any other count later.
func fixPartitions(dir string, n int) error {
	path := filepath.Join(dir, partitionsFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if err := durable.WriteFile(path, []byte(strconv.Itoa(n)+"\n")); err != nil {
			return fmt.Errorf("record the partition count: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the partition count: %w", err)
	}
	fixed, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || fixed <= 0 {
		return fmt.Errorf("%s holds %q, not a partition count; it records the count this cell was made with (write it back)", path, strings.TrimSpace(string(data)))
	}
	if fixed != n {
		return fmt.Errorf("this cell was made with %d partitions, not %d: its pending events are in %d partitions' lanes, which %d would leave unread; start with --partitions %d (the count is fixed for a data dir, recorded in %s)", fixed, n, fixed, n, fixed, path)
	}
	return nil
}
