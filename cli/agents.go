package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (e *env) agentsCommand() *ucli.Command {
	return &ucli.Command{
		Name:   "agents",
		Usage:  "see the agents following the control plane",
		Action: parentAction,
		Subcommands: []*ucli.Command{{
			Name:      "list",
			Usage:     "list agents: address, connection, applied config version, owned partitions",
			UsageText: "rivoractl agents list [-o json]",
			Description: `-o json prints a JSON array of objects with name, address, healthy
(connected), appliedVersion, lastSeen and partitions (numbers).`,
			Action: func(c *ucli.Context) error {
				if err := exactArgs(c, 0, "no arguments"); err != nil {
					return err
				}
				ctx, cancel := callContext(c)
				defer cancel()
				resp, err := e.admin().GetConfigStatus(ctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
				if err != nil {
					return callFailed("list agents", err, nil)
				}
				agents := resp.Msg.GetAgents()
				if e.output == "json" {
					type agentJSON struct {
						Name           string   `json:"name"`
						Address        string   `json:"address"`
						Healthy        bool     `json:"healthy"`
						AppliedVersion uint64   `json:"appliedVersion"`
						LastSeen       string   `json:"lastSeen"`
						Partitions     []uint32 `json:"partitions"`
					}
					out := make([]agentJSON, 0, len(agents))
					for _, a := range agents {
						parts := a.GetPartitions()
						if parts == nil {
							parts = []uint32{}
						}
						out = append(out, agentJSON{a.GetName(), a.GetAddress(), a.GetConnected(), a.GetAppliedVersion(), fmtTime(a.GetLastSeen()), parts})
					}
					enc := json.NewEncoder(e.out)
					enc.SetIndent("", "  ")
					return enc.Encode(out)
				}
				tw := newTable(e.out)
				fmt.Fprintf(tw, "NAME\tADDRESS\tHEALTHY\tAPPLIED\tLAST SEEN\tPARTITIONS\n")
				for _, a := range agents {
					parts := make([]string, len(a.GetPartitions()))
					for i, p := range a.GetPartitions() {
						parts[i] = fmt.Sprint(p)
					}
					fmt.Fprintf(tw, "%s\t%s\t%t\t%d/%d\t%s\t%s\n", a.GetName(), a.GetAddress(), a.GetConnected(), a.GetAppliedVersion(), resp.Msg.GetVersion(), fmtTime(a.GetLastSeen()), dash(strings.Join(parts, ",")))
				}
				return tw.Flush()
			},
		}},
	}
}
