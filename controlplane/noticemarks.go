package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/consul/api"
)

// noticeMarks remember, per destination, the newest dead letter (its
// dead_at) that an operator notice accepted by ingest covered, so a
// restarted notifier neither repeats those notices nor skips the dead
// letters after them. They live beside the control plane's state: a file
// under the state directory, or a Consul key.
type noticeMarks interface {
	load() (map[string]time.Time, error)
	save(marks map[string]time.Time) error
}

// ConsulNoticeMarksKey holds the notice marks with Consul.
const ConsulNoticeMarksKey = "rivora/controlplane/notice-marks"

type fileMarks struct{ path string }

func (f fileMarks) load() (map[string]time.Time, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]time.Time{}, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeMarks(f.path, data)
}

// save writes the marks atomically (temp file, rename); a crash loses at
// most the last mark, which only repeats one notice.
func (f fileMarks) save(marks map[string]time.Time) error {
	data, err := json.Marshal(marks)
	if err != nil {
		return err
	}
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("save notice marks: %w", err)
	}
	return os.Rename(tmp, f.path)
}

type consulMarks struct{ kv *api.KV }

func (c consulMarks) load() (map[string]time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), consulTimeout)
	defer cancel()
	pair, _, err := c.kv.Get(ConsulNoticeMarksKey, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ConsulNoticeMarksKey, err)
	}
	if pair == nil {
		return map[string]time.Time{}, nil
	}
	return decodeMarks(ConsulNoticeMarksKey, pair.Value)
}

func (c consulMarks) save(marks map[string]time.Time) error {
	data, err := json.Marshal(marks)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), consulTimeout)
	defer cancel()
	if _, err := c.kv.Put(&api.KVPair{Key: ConsulNoticeMarksKey, Value: data}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("write %s: %w", ConsulNoticeMarksKey, err)
	}
	return nil
}

func decodeMarks(where string, data []byte) (map[string]time.Time, error) {
	marks := map[string]time.Time{}
	if err := json.Unmarshal(data, &marks); err != nil {
		return nil, fmt.Errorf("parse %s: %w", where, err)
	}
	return marks, nil
}

func newNoticeMarks(cp *ControlPlane) noticeMarks {
	if cp.consul != nil {
		return consulMarks{kv: cp.consul.KV()}
	}
	return fileMarks{path: filepath.Join(cp.cfg.StateDir, "notice-marks.json")}
}
