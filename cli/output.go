package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/durations"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// jsonOptions is the one protojson encoding rivoractl prints: camelCase
// names, unset fields left out.
var jsonOptions = protojson.MarshalOptions{EmitUnpopulated: false}

// writeJSON prints one message as an indented JSON document.
func writeJSON(w io.Writer, m proto.Message) error {
	b, err := jsonOptions.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s as JSON: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	return writeIndented(w, b)
}

// writeJSONWith is writeJSON with the top-level fields of always present
// even when empty (protojson leaves an empty list or a zero out): an empty
// answer keeps its shape, {"events": []} rather than {}.
func writeJSONWith(w io.Writer, m proto.Message, always map[string]any) error {
	b, err := jsonOptions.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s as JSON: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return fmt.Errorf("encode %s as JSON: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	missing := false
	for name, empty := range always {
		if _, ok := fields[name]; !ok {
			raw, err := json.Marshal(empty)
			if err != nil {
				return err
			}
			fields[name], missing = raw, true
		}
	}
	if missing {
		if b, err = json.Marshal(fields); err != nil {
			return err
		}
	}
	return writeIndented(w, b)
}

// writeJSONArray prints messages as one indented JSON array.
func writeJSONArray[M proto.Message](w io.Writer, msgs []M) error {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, m := range msgs {
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := jsonOptions.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode %s as JSON: %w", m.ProtoReflect().Descriptor().Name(), err)
		}
		buf.Write(b)
	}
	buf.WriteByte(']')
	return writeIndented(w, buf.Bytes())
}

// writeIndented re-indents compact JSON; protojson's own spacing is
// deliberately unstable, this makes the output the same on every run.
func writeIndented(w io.Writer, compact []byte) error {
	var out bytes.Buffer
	if err := json.Indent(&out, compact, "", "  "); err != nil {
		return fmt.Errorf("indent JSON: %w", err)
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// Human output shows what the server answered, and much of that anyone
// with a customer token (or a partner) wrote: lane keys, filters, pause
// reasons, descriptions, a partner's error. A terminal obeys what such
// text carries: ESC starts an escape sequence (one retitles the window,
// another clears the screen), CR and LF forge a line or a table row,
// U+202E reverses what follows it. So every value a table cell, a
// "KEY  value" field or a line of text shows goes through visible, here:
// table.row, fields and say escape each argument, and the format around
// them, the code's own, lays out columns and lines. -o json prints the
// answer exactly, for programs.

// visible is s with every character that a terminal would obey rather
// than show written as a Go escape: a control character (\t, \n, \r,
// \x1b, \u0085), a format character (Unicode Cf: \u202e, \u200b), a
// line or paragraph separator (\u2028); a byte of invalid UTF-8 as \xff.
// Nothing else changes (a backslash stays itself), so escaping what is
// escaped already changes nothing.
func visible(s string) string { return escape(s, false) }

// visibleText is visible for text shown as lines of its own (a payload,
// a schema, an error with the line it quotes): its line breaks and tabs
// stay, every other control or format character is escaped.
func visibleText(s string) string { return escape(s, true) }

func escape(s string, keepLines bool) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || hidden(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'), !hidden(r):
			b.WriteString(s[i : i+size])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// hidden reports a character a terminal acts on, or shows as nothing.
func hidden(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// visibleArgs makes args' strings (and errors) visible, in place.
func visibleArgs(args []any) []any {
	for i, a := range args {
		switch v := a.(type) {
		case string:
			args[i] = visible(v)
		case error:
			args[i] = visible(v.Error())
		}
	}
	return args
}

// say prints format, the code's own line (or lines), with each string
// argument made visible: what the server answered shows in it as written,
// escape sequences and line breaks included, and none takes effect.
func say(w io.Writer, format string, args ...any) error {
	_, err := fmt.Fprintf(w, format, visibleArgs(args)...)
	return err
}

// table aligns tab-separated columns; Flush it. It is not an io.Writer:
// every row goes through row, so no value reaches the terminal unescaped.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer) *table {
	return &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
}

// row writes format, whose tabs separate cells and whose newline ends the
// row, with each string argument made visible: a value's tab, line break
// or escape sequence stays in its cell, written out.
func (t *table) row(format string, args ...any) {
	fmt.Fprintf(t.tw, format, visibleArgs(args)...)
}

// Flush writes the aligned rows.
func (t *table) Flush() error { return t.tw.Flush() }

// fields prints aligned "KEY  value" lines.
func fields(w io.Writer, kv ...string) error {
	t := newTable(w)
	for i := 0; i+1 < len(kv); i += 2 {
		t.row("%s\t%s\n", kv[i], kv[i+1])
	}
	return t.Flush()
}

func fmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// fmtDuration prints "72h" rather than "72h0m0s".
func fmtDuration(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return shortDuration(d.AsDuration())
}

func shortDuration(d time.Duration) string { return durations.Short(d) }

// orDefault prints a limit, or "default" when it is zero (the server's
// default applies).
func orDefault[N int32 | int64 | float64](v N) string {
	if v == 0 {
		return "default"
	}
	switch v := any(v).(type) {
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

func durationOrDefault(d *durationpb.Duration) string {
	if d.AsDuration() == 0 {
		return "default"
	}
	return fmtDuration(d)
}

// writeDestination prints one destination as aligned fields; pending is
// printed when known.
func writeDestination(w io.Writer, d *rivorav1.Destination, pending *int64) error {
	l := d.GetLimits()
	kv := []string{
		"ID", d.GetId(),
		"URL", d.GetUrl(),
		"STATE", destinationState(d.GetPaused(), d.GetDisabled(), d.GetPauseReason()),
		"SECRET", destinationSecretText(d),
		"RATE", orDefault(l.GetRatePerSecond()) + perSecond(l.GetRatePerSecond()),
		"BURST", orDefault(l.GetBurst()),
		"MAX ATTEMPTS", orDefault(l.GetMaxAttempts()),
		"WINDOW", durationOrDefault(l.GetWindow()),
		"TIMEOUT", durationOrDefault(l.GetTimeout()),
		"MAX IN FLIGHT", orDefault(l.GetMaxInFlight()),
		"CREATED", fmtTime(d.GetCreatedAt()),
		"UPDATED", fmtTime(d.GetUpdatedAt()),
	}
	// After SECRET (the first four pairs).
	kv = slices.Insert(kv, 8, append(append(rotationAndHeaders(d), endpointAuthFields(d)...), signingRows(d)...)...)
	if o := d.GetOverride(); o != nil {
		// After MAX IN FLIGHT: the values above include it.
		at := slices.Index(kv, "MAX IN FLIGHT") + 2
		kv = slices.Insert(kv, at, "OVERRIDE", overrideText(o, d.GetConfigured(), d.GetId()))
	}
	if d.GetOwnerCustomer() != "" {
		// After URL: whose own endpoint it is.
		kv = slices.Insert(kv, 4, "OWNER", "customer "+d.GetOwnerCustomer())
	}
	if pending != nil {
		kv = append(kv, "PENDING", strconv.FormatInt(*pending, 10))
	}
	return fields(w, kv...)
}

// overrideText says which limits a runtime override sets (the values
// printed above include them), who set it and until when, and what the
// destination's own values are, which it returns to.
func overrideText(o *rivorav1.LimitsOverride, configured *rivorav1.Limits, id string) string {
	var set, own, why []string
	for _, f := range limitFieldNames {
		if limitText(o.GetLimits(), f) == limitText(&rivorav1.Limits{}, f) {
			continue // not overridden
		}
		name := strings.ReplaceAll(f, "_", " ")
		set = append(set, name+" "+limitText(o.GetLimits(), f))
		ownValue := "default"
		if limitText(configured, f) != limitText(&rivorav1.Limits{}, f) {
			ownValue = limitText(configured, f)
		}
		own = append(own, name+" "+ownValue)
		author, reason := o.GetAuthor(), o.GetReason()
		if of, ok := o.GetFields()[f]; ok {
			author, reason = of.GetAuthor(), of.GetReason()
		}
		why = append(why, byWhom(author, reason))
	}
	// One author and reason for every field, or each field's own (a rate
	// cut and a later window change are two reasons).
	var text string
	if len(slices.Compact(slices.Clone(why))) <= 1 {
		text = strings.Join(set, ", ") + byWhom(o.GetAuthor(), o.GetReason())
		if len(why) > 0 {
			text = strings.Join(set, ", ") + why[0]
		}
	} else {
		for i := range set {
			set[i] += why[i]
		}
		text = strings.Join(set, "; ")
	}
	if o.GetExpiresAt() != nil {
		text += " until " + fmtTime(o.GetExpiresAt())
	}
	return text + "; the destination's own: " + strings.Join(own, ", ") + " (rivoractl limits clear " + id + " ends the override)"
}

// byWhom is " by AUTHOR (REASON)" for an override's field.
func byWhom(author, reason string) string {
	if reason == "" {
		return " by " + author
	}
	return " by " + author + " (" + reason + ")"
}

// secretText is the signing secret where the server sends it (the answer
// to create), and its fingerprint everywhere else: enough to tell whether
// the receiver holds the same one, never enough to sign.
func secretText(secret, fp string) string {
	if secret != "" {
		return secret
	}
	if fp == "" {
		fp = "-"
	}
	return fp + " (fingerprint; the secret is shown only when created or rotated)"
}

func perSecond(rate float64) string {
	if rate == 0 {
		return ""
	}
	return "/s"
}

// writeDestinations prints destinations as a table, one per row. Secrets
// are left out: `destinations get ID` shows one.
func writeDestinations(w io.Writer, ds []*rivorav1.Destination) error {
	t := newTable(w)
	t.row("ID\tURL\tOWNER\tRATE\tBURST\tMAX ATTEMPTS\tWINDOW\tTIMEOUT\tMAX IN FLIGHT\tCREATED\tSTATE\n")
	for _, d := range ds {
		l := d.GetLimits()
		t.row("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			d.GetId(), d.GetUrl(), dash(d.GetOwnerCustomer()),
			orDefault(l.GetRatePerSecond())+perSecond(l.GetRatePerSecond()),
			orDefault(l.GetBurst()), orDefault(l.GetMaxAttempts()),
			durationOrDefault(l.GetWindow()), durationOrDefault(l.GetTimeout()),
			orDefault(l.GetMaxInFlight()), fmtTime(d.GetCreatedAt()),
			destinationState(d.GetPaused(), d.GetDisabled(), d.GetPauseReason()))
	}
	return t.Flush()
}

// destinationState says whether a destination is sending: "active",
// "paused" or "paused: REASON" (an operator's pause), or "disabled:
// REASON" (Rivora paused it: the partner answered 410 Gone).
func destinationState(paused, disabled bool, reason string) string {
	state := "active"
	switch {
	case disabled:
		state = "disabled"
	case paused:
		state = "paused"
	}
	if reason != "" && (paused || disabled) {
		state += ": " + reason
	}
	return state
}
