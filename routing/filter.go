package routing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
// (checkRegexes), compiled once each; a stored filter's pattern taken
// from the event goes through runtimePattern instead (meterOperations).
func boundedMatches() cel.EnvOption {
	match := func(s, pattern ref.Val) ref.Val { return boundedMatch(s, pattern, false) }
	return cel.Function(overloads.Matches,
		cel.MemberOverload("rivora_string_matches_bounded", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType, cel.BinaryBinding(match)),
		cel.Overload("rivora_matches_bounded", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType, cel.BinaryBinding(match)),
	)
}

// boundedMatch is s.matches(pattern) for a string of at most
// MaxRegexInput bytes. A pattern taken from the event (fromEvent: a
// stored filter's, from before patterns had to be literals) must also be
// within MaxFilterLen bytes and MaxRegexInstructions: a running regex
// cannot be interrupted, and the meter can only take a pattern it cannot
// see to be within that bound. A stored filter's own literal past it
// (made before the bound) runs, charged by its size.
func boundedMatch(s, pattern ref.Val, fromEvent bool) ref.Val {
	str, ok := s.(types.String)
	pat, ok2 := pattern.(types.String)
	if !ok || !ok2 {
		return types.MaybeNoSuchOverloadErr(s)
	}
	if len(str) > MaxRegexInput {
		return types.NewErr("matches: the string is %d bytes; a filter's regex reads at most %d", len(str), MaxRegexInput)
	}
	if fromEvent && len(pat) > MaxFilterLen {
		return types.NewErr("matches: the pattern, from the event, is %d bytes; a filter's regex may be at most %d", len(pat), MaxFilterLen)
	}
	limit := 0
	if fromEvent {
		limit = MaxRegexInstructions
	}
	c, err := patterns.get(string(pat), limit)
	if err != nil {
		return types.NewErr("matches: %v", err)
	}
	if c.re == nil {
		return types.NewErr("matches: the pattern, from the event, compiles to at least %d instructions; a filter's regex may have at most %d", c.size, MaxRegexInstructions)
	}
	return types.Bool(c.re.MatchString(string(str)))
}

// compiledPattern is a pattern compiled, with its program's size (re
// nil: past the limit it was asked within, not compiled).
type compiledPattern struct {
	re   *regexp.Regexp
	size int
}

// patternCache keeps compiled patterns: the literals of filters and the
// patterns stored filters take from events, up to maxCachedPatterns of
// each (so that events cannot fill it for the literals).
type patternCache struct {
	m                    sync.Map // pattern → compiledPattern
	literals, fromEvents atomic.Int64
}

var patterns patternCache

// get is pattern compiled, with its program's size. Past limit (0:
// none, a literal's) a pattern is only sized, from its parse when that
// shows it past the limit already (a refused pattern costs no program),
// and not compiled (re nil). Patterns are kept, sized or compiled, up to
// maxCachedPatterns literals and as many from events (limit > 0), so that
// the same one in event after event costs one check.
func (c *patternCache) get(pattern string, limit int) (compiledPattern, error) {
	if v, ok := c.m.Load(pattern); ok {
		kept := v.(compiledPattern)
		switch {
		case limit > 0 && kept.size > limit:
			return compiledPattern{size: kept.size}, nil
		case kept.re != nil:
			return kept, nil
		}
		// Refused as an event's before, and now a literal's: compiled below.
	}
	parsed, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return compiledPattern{}, err
	}
	compiled := compiledPattern{}
	if least := leastInstructions(parsed, limit); limit > 0 && least > limit {
		compiled.size = least
	} else {
		prog, err := syntax.Compile(parsed.Simplify())
		if err != nil {
			return compiledPattern{}, err
		}
		compiled.size = len(prog.Inst)
		if limit == 0 || compiled.size <= limit {
			if compiled.re, err = regexp.Compile(pattern); err != nil {
				return compiledPattern{}, err
			}
		}
	}
	kept := &c.literals
	if limit > 0 {
		kept = &c.fromEvents
	}
	if kept.Add(1) <= maxCachedPatterns {
		c.m.Store(pattern, compiled)
	}
	return compiled, nil
}

// leastInstructions is a lower bound of the instructions re compiles to,
// counted without compiling it (a repeat multiplies its operand), and
// no more than a little past limit (0: counted whole): enough to refuse a
// pattern whose program would take seconds and hundreds of MiB to build.
func leastInstructions(re *syntax.Regexp, limit int) int {
	most := math.MaxInt / 2
	if limit > 0 {
		most = limit + 1
	}
	var count func(re *syntax.Regexp) int
	count = func(re *syntax.Regexp) int {
		n := 0
		switch re.Op {
		case syntax.OpLiteral:
			n = len(re.Rune)
		case syntax.OpConcat, syntax.OpAlternate:
			for _, sub := range re.Sub {
				n += count(sub)
				if n >= most {
					return most
				}
			}
		case syntax.OpCapture:
			n = count(re.Sub[0]) + 1
		case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
			// Simplify drops one of an empty match: its split not counted.
			n = count(re.Sub[0])
		case syntax.OpRepeat:
			times := re.Max // x{0} is an empty match
			if times < 0 {
				times = max(re.Min, 1)
			}
			n = count(re.Sub[0]) * times
		default:
			n = 1
		}
		return min(n, most)
	}
	return count(re)
}

// regexProgramSize is the size of re's compiled program, as regexp
// compiles it.
func regexProgramSize(re string) (int, error) {
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return 0, err
	}
	return len(prog.Inst), nil
}

// runtimePattern is a matches() call whose pattern is not a literal (a
// stored filter's, from before patterns had to be): it evaluates its
// operands (the input, then the pattern) and matches them as one from
// the event (boundedMatch).
type runtimePattern struct {
	binaryCall
}

func (c *runtimePattern) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	s, p, failed := c.operands(frame)
	if failed != nil {
		return failed
	}
	return types.LabelErrNode(c.ID(), boundedMatch(s, p, true))
}

func (c *runtimePattern) Eval(vars interpreter.Activation) ref.Val {
	return c.Exec(interpreter.AsFrame(vars))
}

// runtimePatternCalls are the ids of a filter's matches() calls whose
// pattern is not a literal.
func runtimePatternCalls(a *celast.AST) map[int64]bool {
	ids := map[int64]bool{}
	for _, call := range celast.MatchDescendants(celast.NavigateAST(a), celast.FunctionMatcher(overloads.Matches)) {
		args := call.AsCall().Args()
		if call.AsCall().IsMemberFunction() {
			args = append([]celast.Expr{call.AsCall().Target()}, args...)
		}
		if len(args) == 2 && args[1].Kind() != celast.LiteralKind {
			ids[call.ID()] = true
		}
	}
	return ids
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
		n, err := regexProgramSize(re)
		if err != nil {
			continue // regexLiterals refuses it
		}
		if n > MaxRegexInstructions {
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
