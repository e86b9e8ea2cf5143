// Package lanes names the pieces of Rivora's pending store: partitions,
// stream names and the subjects that identify a lane. A lane is
// (destination, customer, lane_key), and for an event routed by a
// subscription (destination, customer, lane_key, subscription); its subject
// is "lane.<p>.<destination>.<customer>.<escaped lane_key>[.<subscription>]"
// (p: partition), so one JetStream
// stream per partition holds every lane as a subject and a lane's FIFO order
// is the stream's sequence order.
//
// It is vocabulary both sides share: the agent stores and schedules by it,
// the control plane routes a destination to its partition and checks ids
// by it. So it sits below both and imports nothing of theirs.
package lanes

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rivora/rivora/internal/ids"
)

// Limits on identifiers. Destination and customer ids are used verbatim as
// subject tokens, so their alphabet excludes '.', '*', '>' and whitespace.
const (
	MaxIDLen      = ids.MaxLen
	MaxLaneKeyLen = 256
	MaxEventIDLen = 128
)

// Partition returns the partition of a destination: fnv-1a(destination) mod n.
func Partition(destination string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(destination))
	return int(h.Sum32() % uint32(n))
}

// PartitionsText names a sorted set of partitions the short way, as
// answers and operators say them: "partition 4", "partitions 0-3, 5".
func PartitionsText(ps []uint32) string {
	var parts []string
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.FormatUint(uint64(ps[i]), 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ps[i], ps[j]))
		}
		i = j + 1
	}
	if len(ps) == 1 {
		return "partition " + parts[0]
	}
	return "partitions " + strings.Join(parts, ", ")
}

// Stream names and subject prefixes. Every partition's streams have their
// own subject space ("lane.<p>.…", "ledger.<p>.…"), because JetStream
// streams may not share subjects.
const (
	IngestStream = "INGEST"
	ingestPrefix = "ingest."
)

// LanesStream is the name of partition p's lane store.
func LanesStream(p int) string { return fmt.Sprintf("LANES_%d", p) }

// LedgerStream is the name of partition p's ledger (attempt state of lane
// heads that failed, and dead letters awaiting the archive).
func LedgerStream(p int) string { return fmt.Sprintf("LEDGER_%d", p) }

// LanesFilter is every lane subject of partition p.
func LanesFilter(p int) string { return fmt.Sprintf("lane.%d.>", p) }

// LedgerFilter is every ledger subject of partition p.
func LedgerFilter(p int) string { return fmt.Sprintf("ledger.%d.>", p) }

// IngestSubject is where the gateway publishes an event for destination d.
func IngestSubject(p int, destination string) string {
	return fmt.Sprintf("%s%d.%s", ingestPrefix, p, destination)
}

// IngestFilter selects partition p's share of the INGEST stream.
func IngestFilter(p int) string { return fmt.Sprintf("%s%d.>", ingestPrefix, p) }

// ID identifies a lane. Subscription is set for the lanes of events a
// subscription routed: each subscription's events keep their own order
// and can be held on their own (a paused subscription), while fairness
// between customers at the destination is unchanged (it is per customer,
// not per lane).
type ID struct {
	Destination  string
	Customer     string
	Key          string
	Subscription string
}

// EventLane is the lane an event goes to.
func EventLane(ev interface {
	GetDestinationId() string
	GetCustomerId() string
	GetLaneKey() string
	GetSubscriptionId() string
}) ID {
	return ID{Destination: ev.GetDestinationId(), Customer: ev.GetCustomerId(), Key: ev.GetLaneKey(), Subscription: ev.GetSubscriptionId()}
}

func (id ID) token() string {
	t := id.Destination + "." + id.Customer + "." + EscapeKey(id.Key)
	if id.Subscription != "" {
		t += "." + id.Subscription
	}
	return t
}

func (id ID) String() string {
	s := id.Destination + "/" + id.Customer + "/" + id.Key
	if id.Subscription != "" {
		s += " (" + id.Subscription + ")"
	}
	return s
}

// Subject is the lane's subject in partition p's lane store:
// "lane.<p>.<destination>.<customer>.<escaped key>[.<subscription>]".
func (id ID) Subject(p int) string {
	// Built in one allocation: the lane writer makes one per event.
	key := EscapeKey(id.Key)
	var b strings.Builder
	b.Grow(len("lane.") + 20 + len(id.Destination) + len(id.Customer) + len(key) + len(id.Subscription) + 4)
	b.WriteString("lane.")
	b.WriteString(strconv.Itoa(p))
	for _, part := range [...]string{id.Destination, id.Customer, key} {
		b.WriteByte('.')
		b.WriteString(part)
	}
	if id.Subscription != "" {
		b.WriteByte('.')
		b.WriteString(id.Subscription)
	}
	return b.String()
}

// HeadSubject is the ledger subject holding the lane head's attempt state.
func (id ID) HeadSubject(p int) string { return fmt.Sprintf("ledger.%d.head.%s", p, id.token()) }

// DeadSubject is the ledger subject of a dead letter awaiting the archive,
// named by the dead event's lane-store sequence.
func DeadSubject(p int, seq uint64) string { return fmt.Sprintf("ledger.%d.dead.%d", p, seq) }

// DoneSubject is the ledger subject recording which lane-store sequences
// were delivered or dead-lettered, in batches (so that a restart does not
// deliver them again before their space is reclaimed).
func DoneSubject(p int) string { return fmt.Sprintf("ledger.%d.done", p) }

// BudgetSubject is the ledger subject holding destination's budget as a
// restart should find it (its health, cut rate and Retry-After hold); the
// owner purges the older records once it wrote a new one.
func BudgetSubject(p int, destination string) string {
	return fmt.Sprintf("ledger.%d.budget.%s", p, destination)
}

// ParseSubject turns a lane subject back into its partition and ID.
func ParseSubject(subject string) (int, ID, error) {
	rest, ok := strings.CutPrefix(subject, "lane.")
	if !ok {
		return 0, ID{}, fmt.Errorf("lane subject %q: missing \"lane.\" prefix", subject)
	}
	return parsePartitionAndID(subject, rest)
}

// ParseLedgerSubject tells what a ledger subject holds: a lane head (id set)
// or a dead letter (dead true, seq set).
func ParseLedgerSubject(subject string) (p int, id ID, dead bool, seq uint64, err error) {
	rest, ok := strings.CutPrefix(subject, "ledger.")
	if !ok {
		return 0, ID{}, false, 0, fmt.Errorf("ledger subject %q: missing \"ledger.\" prefix", subject)
	}
	pstr, rest, _ := strings.Cut(rest, ".")
	p, err = strconv.Atoi(pstr)
	if err != nil {
		return 0, ID{}, false, 0, fmt.Errorf("ledger subject %q: bad partition", subject)
	}
	switch kind, rest, _ := strings.Cut(rest, "."); kind {
	case "head":
		_, id, err = parsePartitionAndID(subject, pstr+"."+rest)
		return p, id, false, 0, err
	case "dead":
		seq, err = strconv.ParseUint(rest, 10, 64)
		if err != nil {
			return 0, ID{}, false, 0, fmt.Errorf("ledger subject %q: bad sequence", subject)
		}
		return p, ID{}, true, seq, nil
	default:
		return 0, ID{}, false, 0, fmt.Errorf("ledger subject %q: unknown kind %q", subject, kind)
	}
}

func parsePartitionAndID(subject, rest string) (int, ID, error) {
	parts := strings.Split(rest, ".")
	if len(parts) != 4 && len(parts) != 5 {
		return 0, ID{}, fmt.Errorf("subject %q: want <p>.<destination>.<customer>.<key>[.<subscription>]", subject)
	}
	p, err := strconv.Atoi(parts[0])
	if err != nil {
		return 0, ID{}, fmt.Errorf("subject %q: bad partition %q", subject, parts[0])
	}
	key, err := UnescapeKey(parts[3])
	if err != nil {
		return 0, ID{}, fmt.Errorf("subject %q: %w", subject, err)
	}
	id := ID{Destination: parts[1], Customer: parts[2], Key: key}
	if len(parts) == 5 {
		if parts[4] == "" {
			return 0, ID{}, fmt.Errorf("subject %q: empty subscription token", subject)
		}
		id.Subscription = parts[4]
	}
	return p, id, nil
}

// EscapeKey turns an arbitrary lane key into one subject token. Bytes in
// [A-Za-z0-9_-] stay as they are, so typical user ids stay readable; every
// other byte (including '~' itself) becomes "~XX" in upper-case hex. The
// result never contains '.', '*', '>', whitespace or control characters, and
// distinct keys give distinct tokens. The empty key becomes "~".
func EscapeKey(key string) string {
	if key == "" {
		return "~"
	}
	plain := true
	for i := 0; i < len(key); i++ {
		if !plainByte(key[i]) {
			plain = false
			break
		}
	}
	if plain {
		return key
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key) * 2)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if plainByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('~')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xF])
	}
	return b.String()
}

// UnescapeKey reverses EscapeKey.
func UnescapeKey(token string) (string, error) {
	if token == "~" {
		return "", nil
	}
	if !strings.Contains(token, "~") {
		for i := 0; i < len(token); i++ {
			if !plainByte(token[i]) {
				return "", fmt.Errorf("lane token %q: unexpected byte %q", token, token[i])
			}
		}
		return token, nil
	}
	var b strings.Builder
	for i := 0; i < len(token); i++ {
		c := token[i]
		switch {
		case plainByte(c):
			b.WriteByte(c)
		case c == '~' && i+2 < len(token):
			hi, ok1 := unhex(token[i+1])
			lo, ok2 := unhex(token[i+2])
			if !ok1 || !ok2 {
				return "", fmt.Errorf("lane token %q: bad escape at %d", token, i)
			}
			b.WriteByte(hi<<4 | lo)
			i += 2
		default:
			return "", fmt.Errorf("lane token %q: unexpected byte %q at %d", token, c, i)
		}
	}
	return b.String(), nil
}

func plainByte(c byte) bool { return ids.Plain(c) }

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ValidateID checks a destination or customer id: 1–64 bytes of
// [A-Za-z0-9_-]. what names the field in the error.
func ValidateID(what, id string) error { return ids.Validate(what, id) }

// ValidateLaneKey checks a lane key: 1–256 bytes of valid UTF-8.
func ValidateLaneKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("lane_key is empty; set it to the end user's id (events with the same lane key are delivered in order)")
	case len(key) > MaxLaneKeyLen:
		return fmt.Errorf("lane_key is %d bytes; the limit is %d", len(key), MaxLaneKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("lane_key is not valid UTF-8")
	}
	return nil
}

// LowerEventID is id in lower case when id is the text of a UUID with
// upper-case hex digits (ok): Rivora's event ids are UUIDs it generates
// or derives from a key (sdk/eventid), always written in lower case, so
// such an id was typed or copied in another case. Ids are compared
// exactly (an id in another form is stored as it came): a lookup that
// does not find id as typed looks for this one.
func LowerEventID(id string) (lower string, ok bool) {
	if len(id) != 36 {
		return "", false
	}
	upper := false
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return "", false
			}
		case c >= 'A' && c <= 'F':
			upper = true
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		default:
			return "", false
		}
	}
	if !upper {
		return "", false
	}
	return strings.ToLower(id), true
}

// ValidateEventID checks a client-chosen event id (idempotency key): 1–128
// bytes of [A-Za-z0-9_:-].
func ValidateEventID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(id) > MaxEventIDLen {
		return fmt.Errorf("%s is %d bytes; the limit is %d", what, len(id), MaxEventIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !plainByte(c) && c != ':' {
			return fmt.Errorf("%s %q has %s at byte %d; use letters, digits, '_', '-' and ':'", what, id, ids.CharAt(id, i), i)
		}
	}
	return nil
}
