package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/internal/durations"
	"github.com/rivora/rivora/internal/ids"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// LimitsFile is a parsed limits file: reviewed defaults plus per-destination
// entries. Unset fields are zero.
type LimitsFile struct {
	Path         string
	Defaults     *rivorav1.Limits
	Destinations map[string]*rivorav1.Limits
}

// emptyLimitsFile is what applies when no file is given.
func emptyLimitsFile() *LimitsFile {
	return &LimitsFile{Defaults: &rivorav1.Limits{}, Destinations: map[string]*rivorav1.Limits{}}
}

// LoadLimitsFile reads and validates a limits file. Errors name the file
// and line: "limits.yaml:7: burst: must be at least 1, got 0".
func LoadLimitsFile(path string) (*LimitsFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read limits file: %w", err)
	}
	return ParseLimits(path, data)
}

// ParseLimits parses limits YAML:
//
//	defaults:
//	  rate_per_second: 50
//	  burst: 200
//	  max_attempts: 8
//	  window: 72h
//	destinations:
//	  dst_9f31c:
//	    rate_per_second: 25
//
// Every value is checked against the bounds the API uses (checkLimits). An
// empty file (or one with only comments), a second document and a key
// given twice in one mapping are refused: each is more likely a mistake
// than an intent, and an empty file would silently drop every reviewed
// limit.
func ParseLimits(name string, data []byte) (*LimitsFile, error) {
	f := emptyLimitsFile()
	f.Path = name
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s:1: the limits file is empty; give at least \"defaults: {}\" (an empty file would drop every reviewed limit)", name)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil || line == 0 {
			return nil, fmt.Errorf("%s: after the first document: %v", name, err)
		}
		return nil, fmt.Errorf("%s:%d: a second YAML document (---); a limits file holds one", name, line)
	}
	if len(doc.Content) == 0 || (doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null") {
		return nil, fmt.Errorf("%s:%d: the limits file is empty; give at least \"defaults: {}\" (an empty file would drop every reviewed limit)", name, max(doc.Line, 1))
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping with \"defaults\" and \"destinations\"", name, root.Line)
	}
	if err := checkUniqueKeys(name, root); err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], root.Content[i+1]
		switch key.Value {
		case "defaults":
			lim, err := parseLimitsBlock(name, val)
			if err != nil {
				return nil, err
			}
			f.Defaults = lim
		case "destinations":
			if val.Kind == yaml.ScalarNode && val.Tag == "!!null" {
				continue
			}
			if val.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("%s:%d: destinations: want a mapping of destination id to limits", name, val.Line)
			}
			for j := 0; j+1 < len(val.Content); j += 2 {
				id, block := val.Content[j], val.Content[j+1]
				if id.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("%s:%d: destinations: want a destination id as the key", name, id.Line)
				}
				if err := ids.Validate("id", id.Value); err != nil {
					return nil, fmt.Errorf("%s:%d: %w", name, id.Line, err)
				}
				lim, err := parseLimitsBlock(name, block)
				if err != nil {
					return nil, err
				}
				f.Destinations[id.Value] = lim
			}
		default:
			return nil, fmt.Errorf("%s:%d: unknown key %q (want defaults or destinations)", name, key.Line, key.Value)
		}
	}
	return f, nil
}

// checkUniqueKeys refuses a key given twice in any mapping under n (yaml
// decoding into a Node does not): the second would silently win.
func checkUniqueKeys(name string, n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if first, dup := seen[k.Value]; dup && k.Kind == yaml.ScalarNode {
				return fmt.Errorf("%s:%d: %q is given twice (first on line %d); give each key once", name, k.Line, k.Value, first)
			}
			seen[k.Value] = k.Line
		}
	}
	for _, c := range n.Content {
		if err := checkUniqueKeys(name, c); err != nil {
			return err
		}
	}
	return nil
}

func parseLimitsBlock(name string, n *yaml.Node) (*rivorav1.Limits, error) {
	lim := &rivorav1.Limits{}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return lim, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of limit names to values", name, n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		if key.Kind != yaml.ScalarNode || !slices.Contains(limitFields, key.Value) {
			return nil, fmt.Errorf("%s:%d: unknown limit %q (want %s)", name, key.Line, key.Value, strings.Join(limitFields, ", "))
		}
		if err := parseLimit(lim, key.Value, val); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, val.Line, err)
		}
	}
	return lim, nil
}

// parseLimit sets one field of lim from val, checked against its bounds.
// An explicit zero is refused: in the file, unset is leaving the key out.
func parseLimit(lim *rivorav1.Limits, field string, val *yaml.Node) error {
	bad := fmt.Errorf("%s must be %s, got %q", field, limitBound(field), val.Value)
	if val.Kind != yaml.ScalarNode {
		return fmt.Errorf("%s: want a single value, %s", field, limitBound(field))
	}
	switch field {
	case "rate_per_second":
		v, err := strconv.ParseFloat(val.Value, 64)
		if err != nil || v == 0 {
			return bad
		}
		lim.RatePerSecond = v
	case "burst", "max_attempts", "max_in_flight":
		v, err := strconv.ParseInt(val.Value, 10, 32)
		if err != nil || v == 0 {
			return bad
		}
		switch field {
		case "burst":
			lim.Burst = int32(v)
		case "max_attempts":
			lim.MaxAttempts = int32(v)
		default:
			lim.MaxInFlight = int32(v)
		}
	case "window", "timeout":
		d, err := time.ParseDuration(val.Value)
		if err != nil {
			return bad
		}
		if field == "window" {
			lim.Window = durationpb.New(d)
		} else {
			lim.Timeout = durationpb.New(d)
		}
	}
	return checkLimit(lim, field)
}

// limitFields names each field of Limits, in display order.
var limitFields = []string{"rate_per_second", "burst", "max_attempts", "window", "timeout", "max_in_flight"}

// fieldSet reports whether a field of l is set.
func fieldSet(l *rivorav1.Limits, field string) bool {
	switch field {
	case "rate_per_second":
		return l.GetRatePerSecond() != 0
	case "burst":
		return l.GetBurst() != 0
	case "max_attempts":
		return l.GetMaxAttempts() != 0
	case "window":
		return l.GetWindow() != nil
	case "timeout":
		return l.GetTimeout() != nil
	case "max_in_flight":
		return l.GetMaxInFlight() != 0
	}
	return false
}

// copyField copies one field from src to dst.
func copyField(dst, src *rivorav1.Limits, field string) {
	switch field {
	case "rate_per_second":
		dst.RatePerSecond = src.GetRatePerSecond()
	case "burst":
		dst.Burst = src.GetBurst()
	case "max_attempts":
		dst.MaxAttempts = src.GetMaxAttempts()
	case "window":
		dst.Window = src.GetWindow()
	case "timeout":
		dst.Timeout = src.GetTimeout()
	case "max_in_flight":
		dst.MaxInFlight = src.GetMaxInFlight()
	}
}

// fieldText renders one field for people.
func fieldText(l *rivorav1.Limits, field string) string {
	switch field {
	case "rate_per_second":
		return strconv.FormatFloat(l.GetRatePerSecond(), 'g', -1, 64)
	case "burst":
		return strconv.Itoa(int(l.GetBurst()))
	case "max_attempts":
		return strconv.Itoa(int(l.GetMaxAttempts()))
	case "window":
		return durations.Short(l.GetWindow().AsDuration())
	case "timeout":
		return durations.Short(l.GetTimeout().AsDuration())
	case "max_in_flight":
		return strconv.Itoa(int(l.GetMaxInFlight()))
	}
	return ""
}

// layer is one source of limits, lowest precedence first.
type layer struct {
	limits *rivorav1.Limits
	source *rivorav1.LimitSource
}

// mergeLimits resolves each field from the highest layer that sets it.
func mergeLimits(layers []layer) (*rivorav1.Limits, map[string]*rivorav1.LimitSource) {
	out := &rivorav1.Limits{}
	sources := make(map[string]*rivorav1.LimitSource, len(limitFields))
	for _, field := range limitFields {
		for i := len(layers) - 1; i >= 0; i-- {
			if l := layers[i]; l.limits != nil && fieldSet(l.limits, field) {
				copyField(out, l.limits, field)
				sources[field] = proto.Clone(l.source).(*rivorav1.LimitSource)
				break
			}
		}
	}
	return out, sources
}

// describeLimitsFile summarises a limits file for the audit log.
func describeLimitsFile(f *LimitsFile) string {
	parts := []string{"defaults {" + describeSet(f.Defaults) + "}"}
	for _, id := range sortedKeys(f.Destinations) {
		parts = append(parts, id+" {"+describeSet(f.Destinations[id])+"}")
	}
	return strings.Join(parts, "; ")
}

func describeSet(l *rivorav1.Limits) string {
	var out []string
	for _, field := range limitFields {
		if fieldSet(l, field) {
			out = append(out, field+" "+fieldText(l, field))
		}
	}
	return strings.Join(out, ", ")
}

// diffLimitsFiles says, field by field, what a reload changed.
func diffLimitsFiles(before, after *LimitsFile) string {
	var changes []string
	diff := func(scope string, a, b *rivorav1.Limits) {
		if a == nil {
			a = &rivorav1.Limits{}
		}
		if b == nil {
			b = &rivorav1.Limits{}
		}
		for _, field := range limitFields {
			was, is := "unset", "unset"
			if fieldSet(a, field) {
				was = fieldText(a, field)
			}
			if fieldSet(b, field) {
				is = fieldText(b, field)
			}
			if was != is {
				changes = append(changes, fmt.Sprintf("%s.%s %s → %s", scope, field, was, is))
			}
		}
	}
	diff("defaults", before.Defaults, after.Defaults)
	ids := map[string]bool{}
	for id := range before.Destinations {
		ids[id] = true
	}
	for id := range after.Destinations {
		ids[id] = true
	}
	for _, id := range sortedKeys(ids) {
		diff(id, before.Destinations[id], after.Destinations[id])
	}
	if len(changes) == 0 {
		return "no change"
	}
	return strings.Join(changes, "; ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
