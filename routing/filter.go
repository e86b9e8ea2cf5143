package routing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	celast "github.com/google/cel-go/common/ast"
	celenv "github.com/google/cel-go/common/env"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// Filter bounds.
const (
	// MaxFilterLen bounds a filter's source text.
	MaxFilterLen = 4096
	// MaxFilterCost bounds a filter's estimated worst-case cost (CEL cost
	// units, about one per operation), assuming data holds at most
	// assumedListSize elements per list or map; a filter estimated above
	// it is refused.
	MaxFilterCost = 100_000
	// interruptEvery is how many comprehension iterations run between
	// checks of the budget.
	interruptEvery = 64
	// MaxRegexInstructions bounds a literal regex's compiled program, and
	// MaxRegexInput the string a filter's matches() reads (longer: an
	// error, counted, and no match): RE2 matches in time linear in the
	// input but proportional to the program too ("a{999}a{990}b" over
	// 250 KB took 2.8 s), and no interrupt reaches a match under way.
	// Together they bound one call to a few milliseconds; MaxRegexCalls
	// bounds the calls of one filter.
	MaxRegexInstructions = 500
	MaxRegexInput        = 4 << 10
	MaxRegexCalls        = 4

	assumedListSize = 1_000
	// maxCachedPatterns bounds the regexes matches() keeps compiled.
	maxCachedPatterns = 10_000
)

// EventFilterBudget bounds the time one event's filters may take together
// once its data is decoded (FilterContext). It is a safety net for an
// overloaded agent, not the filters' limit: their cost limits
// (MaxFilterRunCost, MaxEventFilterCost) bound what an event's data makes
// them do, the same whatever the load, and keep an event's filters well
// within it. Past it, the publish is refused as retryable (the agent is
// busy), rather than stored without the deliveries of the filters not
// run. A variable only so that tests can shorten it.
var EventFilterBudget = time.Second

// Input is what a filter sees of an event.
type Input struct {
	// Data is the event's JSON data, decoded (map[string]any, []any,
	// string, float64, bool, nil); nil when the payload is not JSON.
	Data any
	// NotJSON says the payload's content type is not JSON, so Data is
	// nil: a filter that reads a field of it then fails for want of
	// data, not for a field the event lacks (FilterFailed).
	NotJSON  bool
	Type     string
	Customer string
	Lane     string
}

// DecodeData decodes an event's JSON payload for its filters (Input.Data).
// A number past a double's range (1e400) is ±infinity, the double
// nearest it, so a filter orders it as the event type's JSON Schema
// does: above (below) every other number. encoding/json fails the whole
// payload on such a number, and an event whose data read as null to
// every filter lost the deliveries its filters said yes to, without a
// word. It fails only on a payload that is not JSON.
func DecodeData(payload []byte) (any, error) {
	var v any
	err := json.Unmarshal(payload, &v)
	var outOfRange *json.UnmarshalTypeError
	if err == nil {
		return v, nil
	}
	if !errors.As(err, &outOfRange) {
		return nil, err
	}
	// Unmarshal checked the syntax of the whole payload first: only a
	// number's range can fail here.
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return doubles(v), nil
}

// doubles is v with its json.Numbers as float64, ±Inf past the range.
func doubles(v any) any {
	switch x := v.(type) {
	case json.Number:
		f, _ := strconv.ParseFloat(string(x), 64) // ±Inf with ErrRange past the range
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = doubles(e)
		}
	case []any:
		for i, e := range x {
			x[i] = doubles(e)
		}
	}
	return v
}

// Filter is a compiled subscription filter.
type Filter struct {
	source  string
	program cel.Program
	// readsData: the expression refers to data (the event's JSON); a
	// filter over type, customer and lane alone needs no decode.
	readsData bool
}

// ReadsData reports whether the filter refers to data, the event's JSON.
func (f *Filter) ReadsData() bool { return f.readsData }

// filterEnv compiles new filters (CompileFilter); loadEnv stored ones
// (LoadFilter). They differ in one check: a regex literal that does not
// parse is refused by filterEnv in either form of matches(), while
// loadEnv refuses it in the method form only, as filters were checked
// when the function form's was let through — a stored filter that loaded
// then still loads (one that failed would stop the agent applying every
// subscription); it fails at run time, counted.
var (
	filterEnv = mustEnv(regexLiterals{})
	loadEnv   = mustEnv(cel.ValidateRegexLiterals())
)

func mustEnv(regexValidator cel.ASTValidator) *cel.Env {
	env, err := cel.NewCustomEnv(
		// The standard library but its matches(), replaced by
		// boundedMatches (same signatures, same name): no string past
		// MaxRegexInput reaches a regex.
		cel.StdLib(cel.StdLibSubset(&celenv.LibrarySubset{ExcludeFunctions: []*celenv.Function{{Name: overloads.Matches}}})),
		boundedMatches(),
		cel.Variable("data", cel.DynType),
		cel.Variable("type", cel.StringType),
		cel.Variable("customer", cel.StringType),
		cel.Variable("lane", cel.StringType),
		// A literal that can never work (a regex that does not compile,
		// a bad duration or timestamp) is refused when the filter is
		// made, not found out on every event.
		cel.ASTValidators(regexValidator, cel.ValidateDurationLiterals(), cel.ValidateTimestampLiterals()),
	)
	if err != nil {
		panic(fmt.Sprintf("routing: CEL environment: %v", err))
	}
	return env
}

// regexLiterals refuses a literal pattern of matches() that is not a
// regular expression, in both forms: s.matches(p) and matches(s, p).
// CEL's own validator (cel.ValidateRegexLiterals) checks the call's first
// argument, which is the pattern in the method form only: in the
// function form it let a bad pattern through, and the filter never
// matched.
type regexLiterals struct{}

func (regexLiterals) Name() string { return "rivora.validator.matches" }

func (regexLiterals) Validate(_ *cel.Env, _ cel.ValidatorConfig, a *celast.AST, iss *cel.Issues) {
	for _, call := range celast.MatchDescendants(celast.NavigateAST(a), celast.FunctionMatcher(overloads.Matches)) {
		args := call.AsCall().Args()
		if len(args) == 0 {
			continue
		}
		pattern := args[len(args)-1]
		if pattern.Kind() != celast.LiteralKind {
			continue // checkRegexes refuses it
		}
		re, ok := pattern.AsLiteral().Value().(string)
		if !ok {
			continue // the checker refuses it
		}
		if _, err := regexp.Compile(re); err != nil {
			iss.ReportErrorAtID(pattern.ID(), "invalid matches argument: %q is not a regular expression (%s)", re, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
	}
}

// CompileFilter compiles a new filter: a CEL expression over data, type,
// customer and lane that must be boolean, must not be estimated to cost
// more than MaxFilterCost, and whose regexes are literals within
// MaxRegexInstructions and MaxRegexCalls. The control plane checks a
// filter with it when a subscription is made or changed.
func CompileFilter(source string) (*Filter, error) {
	return compileFilter(source, true)
}

// LoadFilter compiles a stored filter, as the agents do: what
// CompileFilter checks but the shape of its regexes, so that a filter
// stored before those checks existed still loads (one that failed would
// stop the agent applying every subscription). matches() reads at most
// MaxRegexInput bytes whatever the filter.
func LoadFilter(source string) (*Filter, error) {
	return compileFilter(source, false)
}

func compileFilter(source string, checkRegex bool) (*Filter, error) {
	if len(source) > MaxFilterLen {
		return nil, fmt.Errorf("filter is %d bytes; the limit is %d", len(source), MaxFilterLen)
	}
	env := loadEnv
	if checkRegex {
		env = filterEnv
	}
	ast, iss := env.Compile(source)
	if iss.Err() != nil {
		return nil, filterCompileError(source, iss)
	}
	if !ast.OutputType().IsExactType(types.BoolType) && !ast.OutputType().IsExactType(types.DynType) {
		return nil, fmt.Errorf("filter must be a boolean expression (e.g. data.amount > 100), but %q is of type %s", source, ast.OutputType())
	}
	est, err := env.EstimateCost(ast, sizeEstimator{})
	if err != nil {
		return nil, fmt.Errorf("filter cost: %w", err)
	}
	if est.Max > MaxFilterCost {
		return nil, fmt.Errorf("filter may cost up to %d units per event; the limit is %d (iterate less, e.g. avoid nested comprehensions over data)", est.Max, MaxFilterCost)
	}
	if checkRegex {
		if err := checkRegexes(ast); err != nil {
			return nil, err
		}
	}
	prg, err := env.Program(ast, cel.InterruptCheckFrequency(interruptEvery), meterOperations(ast))
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	readsData := false
	for _, ref := range ast.NativeRep().ReferenceMap() {
		readsData = readsData || ref.Name == "data"
	}
	return &Filter{source: source, program: prg, readsData: readsData}, nil
}

// Source is the filter's text.
func (f *Filter) Source() string { return f.source }

// FilterContext is the context one event's filters run in, one after
// the other: ctx (the publish's: a caller that gives up stops them)
// ending after EventFilterBudget, and carrying what the event's filters
// have used of MaxEventFilterCost.
func FilterContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithValue(ctx, eventMeterKey{}, &eventMeter{}), EventFilterBudget)
}

type eventMeterKey struct{}

// Match evaluates the filter within ctx (FilterContext). Anything but
// true is no match: a field the data lacks, a type mismatch, ctx ending
// first, its cost past MaxFilterRunCost or what the event's earlier
// filters left of MaxEventFilterCost (a *FilterCostError: OverCost).
// err tells why it did not match when evaluation failed (for counting,
// not for the publisher: a failed filter is not the publisher's error —
// but one over its cost is the event's data, and one that ctx stopped
// said nothing).
func (f *Filter) Match(ctx context.Context, in Input) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("filter not run: %w", err)
	}
	vars := &filterVars{in: &in, m: meter{limit: MaxFilterRunCost}}
	m := &vars.m
	eventLimited := false
	if ev, ok := ctx.Value(eventMeterKey{}).(*eventMeter); ok {
		if left := MaxEventFilterCost - min(ev.used, MaxEventFilterCost); left < m.limit {
			m.limit, eventLimited = left, true
		}
		defer func() { ev.used += m.used }()
	}
	out, _, err := f.program.ContextEval(ctx, vars)
	var cancelled interpreter.EvalCancelledError
	if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
		return false, &FilterCostError{Limit: m.limit, Event: eventLimited}
	}
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, errors.New("filter did not give a boolean")
	}
	return b, nil
}

// boundedMatches is matches(), as a member and a global function, over
// strings of at most MaxRegexInput bytes. Patterns are literals
// (checkRegexes), compiled once each.
func boundedMatches() cel.EnvOption {
	// compiled caches patterns, literals in filters CompileFilter made;
	// a stored filter's pattern from the event's data is not cached past
	// maxCachedPatterns.
	var compiled sync.Map // pattern → *regexp.Regexp
	var cached atomic.Int64
	match := func(s, pattern ref.Val) ref.Val {
		str, ok := s.(types.String)
		pat, ok2 := pattern.(types.String)
		if !ok || !ok2 {
			return types.MaybeNoSuchOverloadErr(s)
		}
		if len(str) > MaxRegexInput {
			return types.NewErr("matches: the string is %d bytes; a filter's regex reads at most %d", len(str), MaxRegexInput)
		}
		re, found := compiled.Load(string(pat))
		if !found {
			r, err := regexp.Compile(string(pat))
			if err != nil {
				return types.NewErr("matches: %v", err)
			}
			re = r
			if cached.Add(1) <= maxCachedPatterns {
				re, _ = compiled.LoadOrStore(string(pat), r)
			}
		}
		return types.Bool(re.(*regexp.Regexp).MatchString(string(str)))
	}
	return cel.Function(overloads.Matches,
		cel.MemberOverload("rivora_string_matches_bounded", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType, cel.BinaryBinding(match)),
		cel.Overload("rivora_matches_bounded", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType, cel.BinaryBinding(match)),
	)
}

// checkRegexes refuses a regex that is not a literal (a pattern from the
// event's data is compiled for every event, and may be one that takes
// seconds), a literal one whose program is past MaxRegexInstructions,
// and more than MaxRegexCalls of them.
func checkRegexes(ast *cel.Ast) error {
	nav := celast.NavigateAST(ast.NativeRep())
	calls := celast.MatchDescendants(nav, celast.FunctionMatcher(overloads.Matches))
	if len(calls) > MaxRegexCalls {
		return fmt.Errorf("filter: %d matches() calls; the limit is %d (join the patterns into one, a|b)", len(calls), MaxRegexCalls)
	}
	for _, call := range calls {
		args := call.AsCall().Args()
		pattern := args[len(args)-1]
		if pattern.Kind() != celast.LiteralKind {
			return errors.New("filter: matches() needs a literal pattern, such as s.matches('^ord_[0-9]+$'); a pattern taken from the event is not allowed (it is compiled per event and may take seconds)")
		}
		re, ok := pattern.AsLiteral().Value().(string)
		if !ok {
			continue // the checker refuses it
		}
		parsed, err := syntax.Parse(re, syntax.Perl)
		if err != nil {
			continue // regexLiterals refuses it
		}
		prog, err := syntax.Compile(parsed.Simplify())
		if err != nil {
			continue
		}
		if n := len(prog.Inst); n > MaxRegexInstructions {
			return fmt.Errorf("filter: the regex %q compiles to %d instructions; the limit is %d (large repeat counts such as a{1000} multiply it)", re, n, MaxRegexInstructions)
		}
	}
	return nil
}

// sizeEstimator bounds the sizes the cost estimate assumes for data.
type sizeEstimator struct{}

func (sizeEstimator) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: assumedListSize}
}

func (sizeEstimator) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	return nil
}

// FilterFailed reports whether a filter's evaluation error (Match) on in
// is the filter failing, to be counted, rather than the ordinary way a
// filter says no: a field the event's data lacks (MissingField) — but
// not on a payload that is not JSON (in.NotJSON), which has no field at
// all: a filter reading data never matches such an event.
func FilterFailed(in Input, err error) bool {
	return err != nil && (in.NotJSON || !MissingField(err))
}

// MissingField reports whether a filter's evaluation error (Match) is a
// field the event's data lacks: the ordinary way a filter says no, as
// opposed to a filter that fails whatever the event (an operation its
// types do not allow, an answer that is not a boolean).
func MissingField(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "no such key") || strings.HasPrefix(msg, "no such attribute")
}
