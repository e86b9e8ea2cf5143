package routing

import (
	"errors"
	"fmt"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// Runtime cost: what one evaluation of a filter did, counted on the
// event's data, so that whether a filter is too costly for an event is
// the same answer whatever the machine's load. A unit is one operation
// (a call, a logical operator; a comprehension step stepCost more), a
// unit per ten bytes of every string or bytes operand of an operation
// (conversions and a map literal's keys, which it hashes, included;
// matches() its pattern's program size times that), and for equality
// and `in`, whose work grows with all of their operands, a unit per
// element or entry at every depth of a list or map operand. Operands are charged once evaluated, before the operation
// runs: one too costly is refused without running it (a single
// comparison of huge lists is not interruptible). A unit per ten bytes
// of a string an operation makes is charged when it is made. Attribute
// reads and literals cost nothing of their own: each feeds an
// operation, which is counted.
//
// CEL's own runtime cost tracking (cel.CostLimit) cannot be used: in
// cel-go v0.31 its tracking keeps a stack that grows with every
// comprehension step and is searched on every operation, so a
// comprehension over a large list costs quadratic time (6 s of CPU for
// data.items.map(i, data.s) over 120k items, 68 ms without it).
const (
	// MaxFilterRunCost bounds one filter's cost on one event. A filter
	// past it refuses the event (FilterCostError). A filter within
	// MaxFilterCost (estimated on lists of assumedListSize) may cost a
	// hundred times that on lists a hundred times longer: the limit is
	// what bounds it. data.items.map(i, data.s) costs 9 units per item
	// (reaches it at 111k items), data.items.exists(i, i.id == 0) 12; a
	// million units took 60-270 ms of one core of a loaded 2-core
	// machine (load 7), by the shape of the filter.
	MaxFilterRunCost = 1_000_000
	// MaxEventFilterCost bounds the cost of one event's filters together
	// (FilterContext): a customer's many subscriptions, each within
	// MaxFilterRunCost, do not add up to seconds of CPU per event: at
	// 60-270 ns a unit, they stay within EventFilterBudget.
	MaxEventFilterCost = 2 * MaxFilterRunCost
	// meterName is the hidden variable through which a metered operation
	// finds its evaluation's meter (not a CEL identifier: no filter can
	// name it).
	meterName = "@rivora.meter"
	// stepCost is a comprehension step's own work, beyond its
	// operations: a map() step that adds one element to its result costs
	// about as much time as eight comparisons.
	stepCost = 8
)

// FilterCostError is a filter's evaluation stopped for going past its
// cost limit on the event's data: deterministic, the event's data and
// the filter decide it, not the machine's load.
type FilterCostError struct {
	// Limit is the limit reached: MaxFilterRunCost, or what was left of
	// MaxEventFilterCost for this filter (Event).
	Limit uint64
	// Event says the limit reached was the event's (what its earlier
	// filters left of MaxEventFilterCost), not the filter's own.
	Event bool
}

func (e *FilterCostError) Error() string {
	if e.Event {
		return fmt.Sprintf("this event's filters together went past their cost limit of %d units while this one ran (it had %d left)", MaxEventFilterCost, e.Limit)
	}
	return fmt.Sprintf("the filter went past its cost limit of %d units on this event's data", e.Limit)
}

// OverCost reports whether a filter's evaluation error (Match) is its cost
// limit (FilterCostError).
func OverCost(err error) bool {
	var ce *FilterCostError
	return errors.As(err, &ce)
}

// meter counts one evaluation's cost against its limit.
type meter struct {
	used, limit uint64
}

func (m *meter) charge(n uint64) {
	m.used += n
	if m.used > m.limit {
		// The interpreter recovers it and returns it from Eval.
		panic(interpreter.EvalCancelledError{Cause: interpreter.CostLimitExceeded, Message: "filter cost limit exceeded"})
	}
}

// left is what the meter has left before its limit.
func (m *meter) left() uint64 {
	return m.limit - min(m.used, m.limit)
}

// eventMeter is what one event's filters have used of MaxEventFilterCost.
type eventMeter struct {
	used uint64
}

// filterVars are a filter's variables, from its Input, and its
// evaluation's meter, as a hidden variable.
type filterVars struct {
	in *Input
	m  meter
}

func (a *filterVars) ResolveName(name string) (any, bool) {
	switch name {
	case "data":
		return a.in.Data, true
	case "type":
		return a.in.Type, true
	case "customer":
		return a.in.Customer, true
	case "lane":
		return a.in.Lane, true
	case meterName:
		return &a.m, true
	}
	return nil, false
}

func (a *filterVars) Parent() interpreter.Activation { return nil }

// metered is an operation that charges its evaluation's meter for
// itself once it has run: a unit, stepCost more for a comprehension
// step, and the bytes of a string it made. What its operands make it do
// is charged before it runs (operand, deepCall).
type metered struct {
	interpreter.InterpretableV2
	// step: the operation is a comprehension's step, run once per
	// element, which costs the loop's own work too (stepCost).
	step bool
}

func (e *metered) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	val := e.InterpretableV2.Exec(frame)
	m := meterOf(frame)
	if m == nil {
		return val
	}
	cost := 1 + textSize(val, plainText)
	if e.step {
		cost += stepCost
	}
	m.charge(cost)
	return val
}

func (e *metered) Eval(vars interpreter.Activation) ref.Val {
	return e.Exec(interpreter.AsFrame(vars))
}

// meterOf is the evaluation's meter (filterVars).
func meterOf(frame *interpreter.ExecutionFrame) *meter {
	v, _ := frame.ResolveName(meterName)
	m, _ := v.(*meter)
	return m
}

// textWeight is what a string or bytes operand of an operation costs:
// per units for every div bytes.
type textWeight struct {
	per, div uint64
	// readsUpTo is the most bytes the operation reads (0: all): a
	// longer operand is charged as plain text (matches() refuses one
	// past MaxRegexInput without reading it).
	readsUpTo int
}

var (
	// plainText is a traversal of the string: a unit per ten bytes.
	plainText = textWeight{per: 1, div: 10}
	// regexText is for matches(): a regex reads its input once per
	// instruction of its program at worst, so a byte costs the
	// program's instructions / regexInstPerUnit: a 4 KB string under a
	// 402-instruction program (a{200}b{200}) costs 80k units, and took
	// 8 ms (about 5 ns a byte and instruction, 100 ns a unit).
	regexInstPerUnit = uint64(20)
)

// textSize is what a string's or bytes' traversal costs (w).
func textSize(v ref.Val, w textWeight) uint64 {
	n := 0
	switch x := v.(type) {
	case types.String:
		n = len(x)
	case types.Bytes:
		n = len(x)
	default:
		return 0
	}
	if w.readsUpTo > 0 && n > w.readsUpTo {
		w = plainText
	}
	return uint64(n) * w.per / w.div
}

// operand is an operand of an operation: once evaluated, before the
// operation runs, its string or bytes are charged (w), so an operation
// on a huge string is refused without being run. Each operand is
// evaluated once: the operation takes the value this returns.
type operand struct {
	interpreter.InterpretableV2
	w textWeight
}

func (o *operand) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	return chargeText(frame, o.InterpretableV2.Exec(frame), o.w)
}

func (o *operand) Eval(vars interpreter.Activation) ref.Val {
	return o.Exec(interpreter.AsFrame(vars))
}

// attrOperand is an operand that is an attribute (data.s): it stays
// one, so that qualifiers planned after it (data.a[data.k]) still reach
// it.
type attrOperand struct {
	interpreter.InterpretableAttribute
	w textWeight
}

func (o *attrOperand) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	return chargeText(frame, o.InterpretableAttribute.Exec(frame), o.w)
}

func (o *attrOperand) Eval(vars interpreter.Activation) ref.Val {
	return o.Exec(interpreter.AsFrame(vars))
}

func chargeText(frame *interpreter.ExecutionFrame, v ref.Val, w textWeight) ref.Val {
	if n := textSize(v, w); n > 0 {
		if m := meterOf(frame); m != nil {
			m.charge(n)
		}
	}
	return v
}

// binaryCall is a call of two operands that evaluates them itself
// before it runs (deepCall, runtimePattern), where CEL would have.
type binaryCall struct {
	interpreter.InterpretableCall
	lhs, rhs interpreter.InterpretableV2
}

// newBinaryCall is call as a binaryCall; ok is false if call has not
// two operands.
func newBinaryCall(call interpreter.InterpretableCall) (c binaryCall, ok bool) {
	args := call.Args()
	if len(args) != 2 {
		return binaryCall{}, false
	}
	return binaryCall{InterpretableCall: call, lhs: args[0], rhs: args[1]}, true
}

// operands evaluates the call's operands, left first. failed is the
// first of them that is an error: the call's value, as CEL's own calls
// return it, without the right one evaluated if it is the left.
func (c *binaryCall) operands(frame *interpreter.ExecutionFrame) (l, r, failed ref.Val) {
	if l = c.lhs.Exec(frame); types.IsError(l) {
		return nil, nil, l
	}
	if r = c.rhs.Exec(frame); types.IsError(r) {
		return nil, nil, r
	}
	return l, r, nil
}

// deepCall is an equality (==, !=) or `in`, whose work grows with all
// of its operands' contents: their elements, entries and bytes at every
// depth, whatever made them (an attribute, a literal, a comprehension).
// It evaluates its operands, charges their deep size (deepSize, which
// stops counting once the meter's limit is reached, so counting is
// bounded too), and only then compares them: a comparison past the limit
// is refused without being run.
type deepCall struct {
	binaryCall
}

func (c *deepCall) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	l, r, failed := c.operands(frame)
	if failed != nil {
		return failed
	}
	if m := meterOf(frame); m != nil {
		left := m.left()
		cost := 1 + deepSize(l, left)
		if c.Function() == operators.In && r.Type() == types.MapType {
			cost++ // a key's lookup
		} else if cost <= left {
			cost += deepSize(r, left-cost)
		}
		m.charge(cost)
	}
	switch c.Function() {
	case operators.Equals:
		return types.Equal(l, r)
	case operators.NotEquals:
		return types.Bool(types.Equal(l, r) != types.True)
	}
	if r.Type().HasTrait(traits.ContainerType) {
		return types.LabelErrNode(c.ID(), r.(traits.Container).Contains(l))
	}
	return types.LabelErrNode(c.ID(), types.ValOrErr(r, "no such overload"))
}

func (c *deepCall) Eval(vars interpreter.Activation) ref.Val {
	return c.Exec(interpreter.AsFrame(vars))
}

// deepSize is v's size for an operation that reads all of it: a unit
// per element of a list, per entry of a map, at every depth, plus its
// strings' (textSize). It stops counting once past max.
func deepSize(v ref.Val, max uint64) uint64 {
	switch x := v.(type) {
	case types.String, types.Bytes:
		return textSize(x, plainText)
	case traits.Lister:
		n := elements(v)
		for it := x.Iterator(); n <= max && it.HasNext() == types.True; {
			n += deepSize(it.Next(), max-n)
		}
		return n
	case traits.Mapper:
		n := elements(v)
		for it := x.Iterator(); n <= max && it.HasNext() == types.True; {
			k := it.Next()
			n += deepSize(k, max-n)
			if e, found := x.Find(k); found && n <= max {
				n += deepSize(e, max-n)
			}
		}
		return n
	}
	return 0
}

// elements is a list's or map's size.
func elements(v ref.Val) uint64 {
	if s, ok := v.(traits.Sizer); ok {
		if n, ok := s.Size().(types.Int); ok && n > 0 {
			return uint64(n)
		}
	}
	return 0
}

// unchargedOperands are the operations whose operands are not charged:
// the logical ones (their operands are booleans, and a conditional
// evaluates one branch of two), and indexing, whose operand is planned
// as an attribute its index qualifies.
var unchargedOperands = map[string]bool{
	operators.LogicalAnd: true, operators.LogicalOr: true, operators.LogicalNot: true,
	operators.Conditional: true, operators.NotStrictlyFalse: true,
	operators.Index: true, operators.OptIndex: true, operators.OptSelect: true,
	// deepCall charges these.
	operators.Equals: true, operators.NotEquals: true, operators.In: true,
}

// operandWeights is what each operand of an operation costs per byte of
// a string or bytes it is (by the operand's expression id): every
// operation's operands a unit per ten bytes (a conversion, a
// comparison, contains() read their strings), but the input of
// matches(), which costs its program's size per byte too.
func operandWeights(a *celast.AST) map[int64]textWeight {
	weights := map[int64]textWeight{}
	nav := celast.NavigateAST(a)
	for _, e := range celast.MatchDescendants(nav, celast.KindMatcher(celast.MapKind)) {
		for _, entry := range e.AsMap().Entries() {
			// A map literal hashes each key it is made with.
			weights[entry.AsMapEntry().Key().ID()] = plainText
		}
	}
	for _, e := range celast.MatchDescendants(nav, celast.KindMatcher(celast.CallKind)) {
		call := e.AsCall()
		if unchargedOperands[call.FunctionName()] {
			continue
		}
		args := call.Args()
		if call.IsMemberFunction() {
			args = append([]celast.Expr{call.Target()}, args...)
		}
		for _, arg := range args {
			weights[arg.ID()] = plainText
		}
		if call.FunctionName() == overloads.Matches && len(args) == 2 {
			weights[args[0].ID()] = textWeight{per: regexInstructions(args[1]), div: regexInstPerUnit, readsUpTo: MaxRegexInput}
		}
	}
	return weights
}

// regexInstructions is the size of a literal pattern's compiled program;
// a pattern that is not a literal (a stored filter's, from before
// patterns had to be) is as large as CompileFilter allows at most
// (runtimePattern refuses a larger one).
func regexInstructions(pattern celast.Expr) uint64 {
	if pattern.Kind() != celast.LiteralKind {
		return MaxRegexInstructions
	}
	re, ok := pattern.AsLiteral().Value().(string)
	if !ok {
		return MaxRegexInstructions
	}
	n, err := regexProgramSize(re)
	if err != nil {
		return MaxRegexInstructions
	}
	return uint64(n)
}

// meterOperations makes every operation of a filter but its
// comprehensions (which CEL must see as they are to interrupt them; the
// operations of each step are counted) charge the evaluation's meter,
// and every operand of an operation charge what it makes the operation
// do before the operation runs (operand, deepCall).
func meterOperations(a *cel.Ast) cel.ProgramOption {
	loops, steps := map[int64]bool{}, map[int64]bool{}
	for _, c := range celast.MatchDescendants(celast.NavigateAST(a.NativeRep()), celast.KindMatcher(celast.ComprehensionKind)) {
		loops[c.ID()] = true
		steps[c.AsComprehension().LoopStep().ID()] = true
	}
	weights := operandWeights(a.NativeRep())
	fromEvent := runtimePatternCalls(a.NativeRep())
	return cel.CustomDecoratorV2(func(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
		switch i.(type) {
		case *metered, *operand, *attrOperand, *deepCall, *runtimePattern:
			return i, nil
		}
		if loops[i.ID()] {
			// A comprehension makes a list or a boolean, never a string:
			// as an operand it costs nothing of its own.
			return i, nil
		}
		w, isOperand := weights[i.ID()]
		if attr, ok := i.(interpreter.InterpretableAttribute); ok && !steps[i.ID()] {
			// Wrapped, an attribute would no longer take the qualifiers
			// planned after it (data.a.b); a step is no one's operand
			// (filter()'s step is a conditional, an attribute).
			if isOperand {
				return &attrOperand{InterpretableAttribute: attr, w: w}, nil
			}
			return i, nil
		}
		switch i.(type) {
		case interpreter.InterpretableConst, interpreter.InterpretableConstructor:
			if !steps[i.ID()] {
				if isOperand {
					return &operand{InterpretableV2: i, w: w}, nil
				}
				return i, nil
			}
		}
		inner := i
		if call, ok := i.(interpreter.InterpretableCall); ok && fromEvent[i.ID()] {
			if bc, ok := newBinaryCall(call); ok {
				inner = &runtimePattern{binaryCall: bc}
			}
		}
		var op interpreter.InterpretableV2 = &metered{InterpretableV2: inner, step: steps[i.ID()]}
		if call, ok := i.(interpreter.InterpretableCall); ok && !steps[i.ID()] {
			switch call.Function() {
			case operators.Equals, operators.NotEquals, operators.In:
				if bc, ok := newBinaryCall(call); ok {
					op = &deepCall{binaryCall: bc}
				}
			}
		}
		if isOperand {
			op = &operand{InterpretableV2: op, w: w}
		}
		return op, nil
	})
}
