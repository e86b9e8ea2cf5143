package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/internal/durable"
)

// partitionsFile, in the state dir, records the partition count the cell
// was made with. Events are hashed to partitions by that count and kept in
// their partitions' lanes: another count would send new events elsewhere
// and leave the pending ones unread (not delivered, not counted, not
// listed), so a control plane refuses to start with one.
const partitionsFile = "partitions"

// ConsulPartitionsKey records the partition count of a cell on Consul,
// as partitionsFile does in a state dir.
const ConsulPartitionsKey = "rivora/controlplane/partitions"

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
	return checkPartitions(string(data), n, path)
}

// fixPartitionsConsul is fixPartitions for a cell on Consul, run by each
// control plane as it wins the leader lock: the first records n
// (create-only), and one started with another count gives the lock back
// (the election says why, and tries again later) instead of leading.
func fixPartitionsConsul(ctx context.Context, kv *api.KV, n int) error {
	for range 2 {
		pair, _, err := kv.Get(ConsulPartitionsKey, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("read the partition count: %w", err)
		}
		if pair != nil {
			return checkPartitions(string(pair.Value), n, "Consul key "+ConsulPartitionsKey)
		}
		created, _, err := kv.CAS(&api.KVPair{Key: ConsulPartitionsKey, Value: []byte(strconv.Itoa(n))}, (&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("record the partition count: %w", err)
		}
		if created {
			return nil
		}
		// Another control plane recorded it in between: read it.
	}
	return fmt.Errorf("record the partition count: Consul key %s changed twice while it was read", ConsulPartitionsKey)
}

// checkPartitions compares the recorded count (as stored, at where) with n.
func checkPartitions(recorded string, n int, where string) error {
	fixed, err := strconv.Atoi(strings.TrimSpace(recorded))
	if err != nil || fixed <= 0 {
		return fmt.Errorf("%s holds %q, not a partition count; it records the count this cell was made with (write it back)", where, strings.TrimSpace(recorded))
	}
	if fixed != n {
		return fmt.Errorf("this cell was made with %d partitions, not %d: its pending events are in %d partitions' lanes, which %d would leave unread; start with --partitions %d (the count is fixed for a cell, recorded in %s)", fixed, n, fixed, n, fixed, where)
	}
	return nil
}
