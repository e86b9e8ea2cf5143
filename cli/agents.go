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
			Usage:     "list agents: address, health, Consul session, applied config version, owned and assigned partitions",
			UsageText: "rivoractl agents list [-o json]",
			Description: `-o json prints a JSON array of objects with name, address, healthy,
healthReason, connected, session, appliedVersion, lastSeen, partitions and
assignedPartitions (numbers).

A customer's token sees only whether each agent is connected and which of
the token's own changes it applied (for --wait): appliedVersion is the
newest version the token's own changes produced that the agent applied (0:
none). The agents' names, addresses, health and partitions, and the cell's
config version, which every customer's changes move, are the operator's.
It is told so, with how many agents applied its latest change (-o json:
objects with connected and appliedVersion only).`,
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
				if appliedOnly(agents) {
					return printAppliedOnly(e, resp.Msg)
				}
				if len(agents) == 0 && e.output != "json" {
					// An empty table would not say whether no agent ever
					// joined or this token may not see them.
					_, err := fmt.Fprintf(e.out, "No agent follows the control plane yet (config version %d): start one with `rivora agent --controlplane URL`.\n", resp.Msg.GetVersion())
					return err
				}
				if e.output == "json" {
					type agentJSON struct {
						Name               string   `json:"name"`
						Address            string   `json:"address"`
						Healthy            bool     `json:"healthy"`
						HealthReason       string   `json:"healthReason,omitempty"`
						Connected          bool     `json:"connected"`
						Session            string   `json:"session,omitempty"`
						AppliedVersion     uint64   `json:"appliedVersion"`
						LastSeen           string   `json:"lastSeen"`
						Partitions         []uint32 `json:"partitions"`
						AssignedPartitions []uint32 `json:"assignedPartitions"`
					}
					out := make([]agentJSON, 0, len(agents))
					for _, a := range agents {
						out = append(out, agentJSON{
							Name: a.GetName(), Address: a.GetAddress(), Healthy: a.GetHealthy(), HealthReason: a.GetHealthReason(),
							Connected: a.GetConnected(), Session: a.GetSession(), AppliedVersion: a.GetAppliedVersion(),
							LastSeen: fmtTime(a.GetLastSeen()), Partitions: nonNil(a.GetPartitions()), AssignedPartitions: nonNil(a.GetAssignedPartitions()),
						})
					}
					enc := json.NewEncoder(e.out)
					enc.SetIndent("", "  ")
					return enc.Encode(out)
				}
				tw := newTable(e.out)
				tw.row("NAME\tADDRESS\tHEALTHY\tSESSION\tAPPLIED\tLAST SEEN\tOWNED\tASSIGNED\n")
				for _, a := range agents {
					healthy := fmt.Sprint(a.GetHealthy())
					if !a.GetHealthy() && a.GetHealthReason() != "" {
						healthy += " (" + a.GetHealthReason() + ")"
					}
					tw.row("%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", a.GetName(), a.GetAddress(), healthy, dash(shortSession(a.GetSession())),
						a.GetAppliedVersion(), resp.Msg.GetVersion(), fmtTime(a.GetLastSeen()), dash(joinPartitions(a.GetPartitions())), dash(joinPartitions(a.GetAssignedPartitions())))
				}
				return tw.Flush()
			},
		}},
	}
}

// appliedOnly reports whether the control plane answered a token limited
// to customers: every agent has a name, but that answer names none.
func appliedOnly(agents []*rivorav1.AgentStatus) bool {
	for _, a := range agents {
		if a.GetName() != "" {
			return false
		}
	}
	return len(agents) > 0
}

// printAppliedOnly says what a customer's token may know of the agents
// (-o json: an array of objects with connected and appliedVersion only).
func printAppliedOnly(e *env, st *rivorav1.GetConfigStatusResponse) error {
	if e.output == "json" {
		type appliedJSON struct {
			Connected      bool   `json:"connected"`
			AppliedVersion uint64 `json:"appliedVersion"`
		}
		out := make([]appliedJSON, 0, len(st.GetAgents()))
		for _, a := range st.GetAgents() {
			out = append(out, appliedJSON{Connected: a.GetConnected(), AppliedVersion: a.GetAppliedVersion()})
		}
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	connected, applied := 0, 0
	for _, a := range st.GetAgents() {
		if a.GetConnected() {
			connected++
			if a.GetAppliedVersion() >= st.GetVersion() {
				applied++
			}
		}
	}
	if st.GetVersion() == 0 {
		fmt.Fprintf(e.out, "Agents connected: %d of %d (this token made no config change here for them to apply).\n", connected, len(st.GetAgents()))
	} else {
		fmt.Fprintf(e.out, "Agents connected: %d of %d; applied this token's latest change (config version %d): %d.\n",
			connected, len(st.GetAgents()), st.GetVersion(), applied)
	}
	_, err := fmt.Fprintln(e.out, "This token sees only that: the agents' names, addresses, health and partitions, and the cell's config version, are shown to operators.")
	return err
}

func nonNil(ps []uint32) []uint32 {
	if ps == nil {
		return []uint32{}
	}
	return ps
}

func joinPartitions(ps []uint32) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprint(p)
	}
	return strings.Join(parts, ",")
}

// shortSession keeps a session id's first block (enough to tell them apart).
func shortSession(id string) string {
	if i := strings.IndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}
