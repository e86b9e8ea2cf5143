package cli

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (e *env) priorityCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "priority",
		Usage: "change a destination's priority class or a customer's share, live",
		Description: `Priorities apply in place in every agent's scheduler: nothing pending is
moved or copied.

   rivoractl priority set orders --customer gold --weight 5
   rivoractl priority set orders --class high`,
		Action: parentAction,
		Subcommands: []*ucli.Command{{
			Name:      "set",
			Usage:     "set a destination's class (high|normal|low) and/or a customer's weight",
			ArgsUsage: "DESTINATION",
			UsageText: "rivoractl priority set DESTINATION [--class high|normal|low] [--customer C --weight W] [--reason TEXT]",
			Description: `--class orders destinations for the delivery workers: due attempts of a
higher class go first; each destination's budget still bounds it.
--customer/--weight share one destination's budget among the customers
with due events by weight (default 1), not by volume: a customer with
weight 5 gets five attempts for every one of a customer with weight 1.

Examples:
   rivoractl priority set orders --customer gold --weight 5 --reason "gold plan"
   rivoractl priority set orders --customer bronze --weight 1
   rivoractl priority set billing --class high`,
			Flags: []ucli.Flag{
				&ucli.StringFlag{Name: "class", Usage: "priority `CLASS`: high, normal or low"},
				&ucli.StringFlag{Name: "customer", Usage: "the customer `ID` whose weight to set"},
				&ucli.Float64Flag{Name: "weight", Usage: "the customer's `WEIGHT` (0.01–10000; default for everyone is 1)"},
				&ucli.StringFlag{Name: "reason", Usage: "why, for the audit log (`TEXT`)"},
				waitFlag(),
			},
			Action: e.setPriority,
		}},
	}
}

func (e *env) setPriority(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one destination ID"); err != nil {
		return err
	}
	req := &rivorav1.SetPriorityRequest{DestinationId: c.Args().First(), Reason: c.String("reason")}
	if c.IsSet("class") {
		switch strings.ToLower(c.String("class")) {
		case "high":
			req.Class = rivorav1.PriorityClass_PRIORITY_CLASS_HIGH
		case "normal":
			req.Class = rivorav1.PriorityClass_PRIORITY_CLASS_NORMAL
		case "low":
			req.Class = rivorav1.PriorityClass_PRIORITY_CLASS_LOW
		default:
			return usagef("--class %q: use high, normal or low", c.String("class"))
		}
	}
	if c.IsSet("customer") != c.IsSet("weight") {
		return usagef("--customer and --weight go together")
	}
	if c.IsSet("weight") {
		req.CustomerId = c.String("customer")
		req.Weight = ptr(c.Float64("weight"))
	}
	if !c.IsSet("class") && !c.IsSet("weight") {
		return usagef("nothing to set: give --class, or --customer with --weight")
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().SetPriority(ctx, connect.NewRequest(req))
	if err != nil {
		return callFailed(fmt.Sprintf("set priority of %q", req.DestinationId), err, notFoundHint)
	}
	if e.output == "json" {
		if err := writeJSON(e.out, resp.Msg.GetDestination()); err != nil {
			return err
		}
		return e.afterChange(c, resp.Msg.GetVersion())
	}
	d := resp.Msg.GetDestination()
	say(e.out, "%s: class %s", d.GetId(), className(d.GetPriorityClass()))
	if req.Weight != nil {
		fmt.Fprintf(e.out, ", customer %s weight %g", req.CustomerId, req.GetWeight())
	}
	fmt.Fprintln(e.out)
	return e.afterChange(c, resp.Msg.GetVersion())
}

func className(c rivorav1.PriorityClass) string {
	switch c {
	case rivorav1.PriorityClass_PRIORITY_CLASS_HIGH:
		return "high"
	case rivorav1.PriorityClass_PRIORITY_CLASS_LOW:
		return "low"
	default:
		return "normal"
	}
}
