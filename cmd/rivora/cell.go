package main

import (
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/internal/auth"
)

// cellFlags are the flags of the processes of a cell (`rivora
// controlplane`, `rivora agent`): the cell token their internal services
// are opened with.
func cellFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cell-token-file", EnvVars: []string{"RIVORA_CELL_TOKEN_FILE"}, Usage: "`FILE` holding the cell token, the secret shared by the cell's control planes and agents: " +
			"only it opens their internal services (AgentService: Watch and the agents' reports; PartitionService), API tokens are refused there. " +
			"Make one with `openssl rand -hex 32` (at least 32 characters) and give every process of the cell the same; the Nomad jobs template it from the Nomad variable nomad/jobs/rivora-cell (cell_token). " +
			"Required unless --insecure"},
		&cli.BoolFlag{Name: "insecure", EnvVars: []string{"RIVORA_INSECURE"}, Usage: "run without --cell-token-file: the cell's internal services are open to anyone who can reach this process " +
			"(anyone could follow the config with its signing secrets, or dead-letter pending events). Only for a test cell on a private machine"},
	}
}

// edgeCellFlags are cellFlags as an edge uses them: it serves none of
// the cell's internal services, it presents the cell token to the cell.
func edgeCellFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cell-token-file", EnvVars: []string{"RIVORA_CELL_TOKEN_FILE"}, Usage: "`FILE` holding the cell token, the one the cell's control planes and agents have: " +
			"the edge presents it to the control plane (its config stream and its reports) and derives from it its credential on the cell's leaf port (--cell-leaf). " +
			"It opens nothing on the edge: publishers use their API tokens. Required unless --insecure"},
		&cli.BoolFlag{Name: "insecure", EnvVars: []string{"RIVORA_INSECURE"}, Usage: "run without --cell-token-file: the edge presents no credential to the control plane nor to the cell's leaf port, " +
			"so it joins only a cell that runs with --insecure too (whose internal services are open to anyone on the network). Publishers still need their API tokens. Only for a test cell on a private machine"},
	}
}

// insecureWarning is what a process started with --insecure logs.
func insecureWarning(command string) string {
	if command == "edge" {
		return "INSECURE: started with --insecure and no --cell-token-file: this edge presents no credential to the control plane nor to the cell's leaf port, so it joins only a cell that runs with --insecure, whose internal services are open to anyone on the network; give the edge and every process of the cell --cell-token-file"
	}
	return "INSECURE: started with --insecure and no --cell-token-file: this cell's internal services (Watch with every signing secret, the agents' reports, PartitionService) are open to anyone on the network; give every process --cell-token-file"
}

// cellKeys reads the cell token (--cell-token-file), or with --insecure
// none, and returns the keys every call to this process is checked
// against. Without either it refuses to start.
func cellKeys(c *cli.Context, log *slog.Logger) (*auth.Keys, error) {
	path, insecure := c.String("cell-token-file"), c.Bool("insecure")
	switch {
	case path != "" && insecure:
		return nil, cli.Exit("rivora "+c.Command.Name+": --cell-token-file and --insecure contradict each other: give one", 2)
	case path == "" && !insecure && c.Command.Name == "edge":
		return nil, cli.Exit("rivora edge: no cell token: give --cell-token-file FILE (RIVORA_CELL_TOKEN_FILE; the cell's own, that of its control planes and agents), "+
			"or --insecure to join a cell that runs without one", 2)
	case path == "" && !insecure:
		return nil, cli.Exit("rivora "+c.Command.Name+": no cell token: give --cell-token-file FILE (RIVORA_CELL_TOKEN_FILE; the same secret on every control plane and agent of the cell, "+
			"made with `openssl rand -hex 32`), or --insecure to run with the cell's internal services open to anyone on the network", 2)
	case insecure:
		log.Warn(insecureWarning(c.Command.Name))
		return auth.NewKeys(auth.CellToken{}), nil
	}
	cell, err := auth.LoadCellToken(path)
	if err != nil {
		return nil, cli.Exit("--cell-token-file: "+err.Error(), 2)
	}
	return auth.NewKeys(cell), nil
}
