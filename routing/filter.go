package routing

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
)

// Filter bounds.
const (
	// MaxFilterLen bounds a filter's source text.
	MaxFilterLen = 4096
	// MaxFilterCost bounds a filter's estimated worst-case cost (CEL cost
	// units, about one per operation), assuming data holds at most
	// assumedListSize elements per list or map and strings of at most
	// assumedStringSize bytes; a filter estimated above it is refused.
	MaxFilterCost = 100_000
	// RuntimeCostLimit stops one evaluation: an event whose evaluation
	// would cost more does not match.
	RuntimeCostLimit = 1_000_000

	assumedListSize   = 1_000
	assumedStringSize = 64 << 10
)

// Input is what a filter sees of an event.
type Input struct {
	// Data is the event's JSON data, decoded (map[string]any, []any,
	// string, float64, bool, nil); nil when the payload is not JSON.
	Data     any
	Type     string
	Customer string
	Lane     string
}

// Filter is a compiled subscription filter.
type Filter struct {
	source  string
	program cel.Program
}

var filterEnv = mustEnv()

func mustEnv() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("data", cel.DynType),
		cel.Variable("type", cel.StringType),
		cel.Variable("customer", cel.StringType),
		cel.Variable("lane", cel.StringType),
		// A literal that can never work (a regex that does not compile,
		// a bad duration or timestamp) is refused when the filter is
		// made, not found out on every event.
		cel.ASTValidators(cel.ValidateRegexLiterals(), cel.ValidateDurationLiterals(), cel.ValidateTimestampLiterals()),
	)
	if err != nil {
		panic(fmt.Sprintf("routing: CEL environment: %v", err))
	}
	return env
}

// CompileFilter compiles a filter: a CEL expression over data, type,
// customer and lane that must be boolean and must not be estimated to cost
// more than MaxFilterCost.
func CompileFilter(source string) (*Filter, error) {
	if len(source) > MaxFilterLen {
		return nil, fmt.Errorf("filter is %d bytes; the limit is %d", len(source), MaxFilterLen)
	}
	ast, iss := filterEnv.Compile(source)
	if iss.Err() != nil {
		return nil, fmt.Errorf("filter does not compile: %w", iss.Err())
	}
	if !ast.OutputType().IsExactType(types.BoolType) && !ast.OutputType().IsExactType(types.DynType) {
		return nil, fmt.Errorf("filter must be a boolean expression (e.g. data.amount > 100), but %q is of type %s", source, ast.OutputType())
	}
	est, err := filterEnv.EstimateCost(ast, sizeEstimator{})
	if err != nil {
		return nil, fmt.Errorf("filter cost: %w", err)
	}
	if est.Max > MaxFilterCost {
		return nil, fmt.Errorf("filter may cost up to %d units per event; the limit is %d (iterate less, e.g. avoid nested comprehensions over data)", est.Max, MaxFilterCost)
	}
	prg, err := filterEnv.Program(ast, cel.CostLimit(RuntimeCostLimit))
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	return &Filter{source: source, program: prg}, nil
}

// Source is the filter's text.
func (f *Filter) Source() string { return f.source }

// Match evaluates the filter. Anything but true is no match: a field the
// data lacks, a type mismatch, a cost over the runtime limit. err tells
// why it did not match when evaluation failed (for counting, not for the
// publisher: a failed filter is not the publisher's error).
func (f *Filter) Match(in Input) (bool, error) {
	out, _, err := f.program.Eval(map[string]any{
		"data":     in.Data,
		"type":     in.Type,
		"customer": in.Customer,
		"lane":     in.Lane,
	})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, errors.New("filter did not give a boolean")
	}
	return b, nil
}

// sizeEstimator bounds the sizes the cost estimate assumes for data.
type sizeEstimator struct{}

func (sizeEstimator) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: assumedListSize}
}

func (sizeEstimator) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	return nil
}

// MissingField reports whether a filter's evaluation error (Match) is a
// field the event's data lacks: the ordinary way a filter says no, as
// opposed to a filter that fails whatever the event (an operation its
// types do not allow, an answer that is not a boolean).
func MissingField(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "no such key") || strings.HasPrefix(msg, "no such attribute")
}
