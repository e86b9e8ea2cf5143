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
// (a call, a logical operator; a comprehension step stepCost more) plus,
// for an operation whose work grows with its operands (equality, `in`,
// string comparison, concatenation, contains, startsWith, endsWith,
// matches, string/bytes conversion), a unit per element of a list or map
// operand and per ten bytes of a string one, and a unit per ten bytes of
// a string an operation makes. Attribute reads and literals cost nothing of their
// own: each feeds an operation, which is counted.
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
	// reading: operands are being read again for their size; what that
	// runs is not charged (nor does it read its own operands again).
	reading bool
}

func (m *meter) charge(n uint64) {
	m.used += n
	if m.used > m.limit {
		// The interpreter recovers it and returns it from Eval.
		panic(interpreter.EvalCancelledError{Cause: interpreter.CostLimitExceeded, Message: "filter cost limit exceeded"})
	}
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

// metered is an operation that charges its evaluation's meter.
type metered struct {
	interpreter.InterpretableV2
	// sized are the operands whose size the operation's work grows with;
	// list and map ones count only when lists is set (a list
	// concatenation is constant work whatever the lists' sizes).
	sized []interpreter.InterpretableV2
	lists bool
	// step: the operation is a comprehension's step, run once per
	// element, which costs the loop's own work too (stepCost).
	step bool
}

func (e *metered) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	val := e.InterpretableV2.Exec(frame)
	v, ok := frame.ResolveName(meterName)
	m, _ := v.(*meter)
	if !ok || m == nil || m.reading {
		return val
	}
	cost := 1 + textSize(val)
	if e.step {
		cost += stepCost
	}
	m.reading = true
	for _, arg := range e.sized {
		cost += operandSize(frame, arg, e.lists)
	}
	m.reading = false
	m.charge(cost)
	return val
}

func (e *metered) Eval(vars interpreter.Activation) ref.Val {
	return e.Exec(interpreter.AsFrame(vars))
}

// operandSize is what an operand of a sized operation adds to its cost.
// An attribute (data.s) or a literal is read again to learn its size;
// an operation's result was charged when it was made (a string's bytes
// by the operation that made it, a list's elements by the steps of the
// comprehension that built it).
func operandSize(frame *interpreter.ExecutionFrame, arg interpreter.InterpretableV2, lists bool) uint64 {
	switch arg.(type) {
	case interpreter.InterpretableAttribute, interpreter.InterpretableConst:
	default:
		return 0
	}
	v := arg.Exec(frame)
	n := textSize(v)
	if lists {
		n += elements(v)
	}
	return n
}

// textSize is a string's or bytes' cost of a traversal: a unit per ten
// bytes.
func textSize(v ref.Val) uint64 {
	switch x := v.(type) {
	case types.String:
		return uint64(len(x)) / 10
	case types.Bytes:
		return uint64(len(x)) / 10
	}
	return 0
}

// elements is a list's or map's size.
func elements(v ref.Val) uint64 {
	switch v.Type() {
	case types.ListType, types.MapType:
		if s, ok := v.(traits.Sizer); ok {
			if n, ok := s.Size().(types.Int); ok && n > 0 {
				return uint64(n)
			}
		}
	}
	return 0
}

// sizedFunctions are the operations whose work grows with their
// operands; true: with a list or map operand's elements too.
var sizedFunctions = map[string]bool{
	operators.Equals: true, operators.NotEquals: true, operators.In: true,
	operators.Less: false, operators.LessEquals: false, operators.Greater: false, operators.GreaterEquals: false,
	operators.Add: false, overloads.Contains: false, overloads.StartsWith: false, overloads.EndsWith: false,
	overloads.Matches: false, overloads.TypeConvertString: false, overloads.TypeConvertBytes: false,
}

// meterOperations makes every operation of a filter but its
// comprehensions (which CEL must see as they are to interrupt them; the
// operations of each step are counted) charge the evaluation's meter.
func meterOperations(a *cel.Ast) cel.ProgramOption {
	loops, steps := map[int64]bool{}, map[int64]bool{}
	for _, c := range celast.MatchDescendants(celast.NavigateAST(a.NativeRep()), celast.KindMatcher(celast.ComprehensionKind)) {
		loops[c.ID()] = true
		steps[c.AsComprehension().LoopStep().ID()] = true
	}
	return cel.CustomDecoratorV2(func(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
		switch i.(type) {
		case *metered:
			return i, nil
		case interpreter.InterpretableAttribute, interpreter.InterpretableConst, interpreter.InterpretableConstructor:
			// Wrapped, an attribute would no longer take the qualifiers
			// planned after it (data.a.b); a step is no one's operand
			// (filter()'s step is a conditional, an attribute).
			if !steps[i.ID()] {
				return i, nil
			}
		}
		if loops[i.ID()] {
			return i, nil
		}
		m := &metered{InterpretableV2: i, step: steps[i.ID()]}
		if call, ok := i.(interpreter.InterpretableCall); ok {
			if lists, sized := sizedFunctions[call.Function()]; sized {
				m.sized, m.lists = call.Args(), lists
			}
		}
		return m, nil
	})
}
