package main

import (
	"flag"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/urfave/cli/v2"
	"github.com/zclconf/go-cty/cty"
)

// The Nomad jobs in deploy/nomad run this binary. TestNomadJobsMatchFlags
// parses every job and checks each task that runs rivora against the
// command tree main runs, so that a renamed or removed flag fails here and
// not on a cluster.

// interpolated stands for a ${…} interpolation in a job: a value only
// Nomad knows. "0" parses as every flag value type rivora has (string,
// int, float, duration).
const interpolated = "0"

// rivoraTask is one task of a job that runs rivora.
type rivoraTask struct {
	where string   // file:task, for messages
	args  []string // config.args, interpolations replaced
	// jobType is the job's type ("service", "system", …).
	jobType string
	// env names the variables a template with env = true sets.
	env []string
	// writesCellToken: a template (not env) writes a file from a Nomad
	// variable's cell_token.
	writesCellToken bool
}

func TestNomadJobsMatchFlags(t *testing.T) {
	files, err := filepath.Glob("../../deploy/nomad/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Nomad jobs found in deploy/nomad (err %v)", err)
	}
	app := newApp()
	checked := 0
	for _, file := range files {
		for _, task := range rivoraTasks(t, file) {
			checkTask(t, app, task)
			checkTaskRequired(t, app, task)
			checkTaskArchive(t, task)
			checkTaskCellToken(t, task)
			checkTaskEdge(t, task)
			checked++
		}
	}
	if checked < len(files) {
		t.Fatalf("found %d tasks running rivora in %d job files: the parser misses some", checked, len(files))
	}
}

// checkTask parses a task's arguments with the flags of the subcommand it
// names, as the binary would.
func checkTask(t *testing.T, app *cli.App, task rivoraTask) {
	t.Helper()
	if len(task.args) == 0 {
		t.Errorf("%s: no args: which rivora subcommand does it run?", task.where)
		return
	}
	cmd := app.Command(task.args[0])
	if cmd == nil {
		t.Errorf("%s: rivora has no subcommand %q", task.where, task.args[0])
		return
	}
	fs := flag.NewFlagSet(cmd.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	envs := map[string]bool{}
	for _, f := range cmd.Flags {
		if err := f.Apply(fs); err != nil {
			t.Fatalf("%s: flag %v: %v", task.where, f.Names(), err)
		}
		if ev, ok := f.(interface{ GetEnvVars() []string }); ok {
			for _, name := range ev.GetEnvVars() {
				envs[name] = true
			}
		}
	}
	if err := fs.Parse(task.args[1:]); err != nil {
		t.Errorf("%s: rivora %s: %v", task.where, cmd.Name, err)
	} else if fs.NArg() > 0 {
		t.Errorf("%s: rivora %s takes no arguments, the job passes %q", task.where, cmd.Name, fs.Args())
	}
	for _, name := range task.env {
		if strings.HasPrefix(name, "RIVORA_") && !envs[name] {
			t.Errorf("%s: the template sets %s, which no flag of rivora %s reads", task.where, name, cmd.Name)
		}
	}
}

// checkTaskRequired: every flag the subcommand requires is given, in the
// args or by a template's variable (a flag parse alone does not check it).
func checkTaskRequired(t *testing.T, app *cli.App, task rivoraTask) {
	t.Helper()
	if len(task.args) == 0 || app.Command(task.args[0]) == nil {
		return
	}
	for _, f := range app.Command(task.args[0]).Flags {
		r, ok := f.(cli.RequiredFlag)
		if !ok || !r.IsRequired() {
			continue
		}
		given := false
		for _, name := range f.Names() {
			given = given || slices.Contains(task.args, "--"+name)
		}
		if ev, ok := f.(interface{ GetEnvVars() []string }); ok {
			for _, name := range ev.GetEnvVars() {
				given = given || slices.Contains(task.env, name)
			}
		}
		if !given {
			t.Errorf("%s: rivora %s requires --%s, which neither the args nor a template's variables give", task.where, task.args[0], f.Names()[0])
		}
	}
}

// checkTaskEdge: an edge task runs in a system job (one edge on every
// client node, beside the apps that publish), with its data on a volume.
func checkTaskEdge(t *testing.T, task rivoraTask) {
	t.Helper()
	if len(task.args) == 0 || task.args[0] != "edge" {
		return
	}
	if task.jobType != "system" {
		t.Errorf("%s: rivora edge runs in a %q job, want a system job (one edge per client node)", task.where, task.jobType)
	}
	if !slices.Contains(task.args, "--data-dir") {
		t.Errorf("%s: rivora edge without --data-dir keeps its buffer in the task's own directory, lost with the allocation", task.where)
	}
}

// checkTaskArchive: an agent task has the cell's archive (--s3-endpoint, or
// RIVORA_S3_ENDPOINT from a template) or says a local one is meant
// (--allow-local-archive); otherwise the agent refuses to start, which
// parsing its flags alone would not show.
func checkTaskArchive(t *testing.T, task rivoraTask) {
	t.Helper()
	if len(task.args) == 0 || task.args[0] != "agent" {
		return
	}
	if slices.Contains(task.args, "--s3-endpoint") || slices.Contains(task.args, "--allow-local-archive") || slices.Contains(task.env, "RIVORA_S3_ENDPOINT") {
		return
	}
	t.Errorf("%s: rivora agent without --s3-endpoint (or --allow-local-archive) refuses to start", task.where)
}

// checkTaskCellToken: a control plane, agent or edge task has the cell token
// (--cell-token-file, or RIVORA_CELL_TOKEN_FILE from a template), which
// a template must write (a file under secrets/ or local/); otherwise it
// refuses to start.
func checkTaskCellToken(t *testing.T, task rivoraTask) {
	t.Helper()
	if len(task.args) == 0 || !slices.Contains([]string{"agent", "controlplane", "edge"}, task.args[0]) {
		return
	}
	if !slices.Contains(task.args, "--cell-token-file") && !slices.Contains(task.env, "RIVORA_CELL_TOKEN_FILE") {
		t.Errorf("%s: rivora %s without --cell-token-file refuses to start", task.where, task.args[0])
		return
	}
	if !task.writesCellToken {
		t.Errorf("%s: no template writes the cell token file (from the Nomad variable's cell_token)", task.where)
	}
}

// rivoraTasks returns the tasks of one job file whose config.command is
// the rivora binary.
func rivoraTasks(t *testing.T, file string) []rivoraTask {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCLFile(file)
	if diags.HasErrors() {
		t.Fatalf("%s: %v", file, diags)
	}
	var tasks []rivoraTask
	for _, job := range blocks(f.Body.(*hclsyntax.Body), "job") {
		jobType := "service" // Nomad's default
		if typ, ok := job.Body.Attributes["type"]; ok {
			jobType = stringValue(t, filepath.Base(file), typ.Expr)
		}
		for _, group := range blocks(job.Body, "group") {
			for _, task := range blocks(group.Body, "task") {
				where := filepath.Base(file) + ":" + strings.Join(task.Labels, "")
				for _, config := range blocks(task.Body, "config") {
					command, ok := config.Body.Attributes["command"]
					if !ok || filepath.Base(stringValue(t, where, command.Expr)) != "rivora" {
						continue
					}
					rt := rivoraTask{where: where, jobType: jobType, env: templateEnv(t, where, task.Body), writesCellToken: writesCellToken(t, where, task.Body)}
					if args, ok := config.Body.Attributes["args"]; ok {
						rt.args = listValue(t, where, args.Expr)
					}
					tasks = append(tasks, rt)
				}
			}
		}
	}
	return tasks
}

func blocks(body *hclsyntax.Body, typ string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, b := range body.Blocks {
		if b.Type == typ {
			out = append(out, b)
		}
	}
	return out
}

func listValue(t *testing.T, where string, expr hclsyntax.Expression) []string {
	t.Helper()
	tuple, ok := expr.(*hclsyntax.TupleConsExpr)
	if !ok {
		t.Fatalf("%s: args is not a list", where)
	}
	out := make([]string, 0, len(tuple.Exprs))
	for _, e := range tuple.Exprs {
		out = append(out, stringValue(t, where, e))
	}
	return out
}

// stringValue evaluates a string expression with every interpolation
// replaced by the interpolated placeholder.
func stringValue(t *testing.T, where string, expr hclsyntax.Expression) string {
	t.Helper()
	var parts []hclsyntax.Expression
	switch e := expr.(type) {
	case *hclsyntax.TemplateExpr:
		parts = e.Parts
	case *hclsyntax.TemplateWrapExpr:
		return interpolated
	default:
		parts = []hclsyntax.Expression{expr}
	}
	var b strings.Builder
	for _, p := range parts {
		lit, ok := p.(*hclsyntax.LiteralValueExpr)
		if !ok {
			b.WriteString(interpolated)
			continue
		}
		v, diags := lit.Value(&hcl.EvalContext{})
		if diags.HasErrors() || v.Type() != cty.String {
			t.Fatalf("%s: %s is not a string", where, expr.Range())
		}
		b.WriteString(v.AsString())
	}
	return b.String()
}

// writesCellToken reports whether a file template of the task renders a
// Nomad variable's cell_token.
func writesCellToken(t *testing.T, where string, task *hclsyntax.Body) bool {
	t.Helper()
	for _, tmpl := range blocks(task, "template") {
		data, ok := tmpl.Body.Attributes["data"]
		if !ok {
			continue
		}
		if _, isEnv := tmpl.Body.Attributes["env"]; isEnv {
			continue
		}
		if tv, ok := data.Expr.(*hclsyntax.TemplateExpr); ok {
			for _, p := range tv.Parts {
				if lit, ok := p.(*hclsyntax.LiteralValueExpr); ok {
					if v, diags := lit.Value(&hcl.EvalContext{}); !diags.HasErrors() && v.Type() == cty.String && strings.Contains(v.AsString(), ".cell_token") && strings.Contains(v.AsString(), "nomadVar") {
						return true
					}
				}
			}
		}
	}
	return false
}

// templateEnv returns the variables set by the task's templates that
// Nomad loads as its environment (env = true): one NAME=value per line.
func templateEnv(t *testing.T, where string, task *hclsyntax.Body) []string {
	t.Helper()
	var names []string
	for _, tmpl := range blocks(task, "template") {
		env, ok := tmpl.Body.Attributes["env"]
		if !ok {
			continue
		}
		if v, diags := env.Expr.Value(nil); diags.HasErrors() || v.Type() != cty.Bool || v.False() {
			continue
		}
		data, ok := tmpl.Body.Attributes["data"]
		if !ok {
			continue
		}
		for _, line := range strings.Split(stringValue(t, where, data.Expr), "\n") {
			if name, _, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}

// TestNomadAgentRollOutlastsTheRejoinDelay: a deploy of a job's agents
// moves to the next one min_healthy_time after the last one's checks
// pass, which they do within seconds of its start; the control plane
// gives a restarted agent partitions only --rejoin-delay after it came
// back. A shorter min_healthy_time stops the next agent while the last
// one still waits, and the third while the first two do: every
// partition without an owner (docs/operations.md: Upgrading a cell).
func TestNomadAgentRollOutlastsTheRejoinDelay(t *testing.T) {
	var rejoin time.Duration
	for _, f := range newApp().Command("controlplane").Flags {
		if d, ok := f.(*cli.DurationFlag); ok && d.Name == "rejoin-delay" {
			rejoin = d.Value
		}
	}
	if rejoin == 0 {
		t.Fatal("rivora controlplane has no --rejoin-delay default")
	}
	files, err := filepath.Glob("../../deploy/nomad/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Nomad jobs found in deploy/nomad (err %v)", err)
	}
	checked := 0
	for _, file := range files {
		f, diags := hclparse.NewParser().ParseHCLFile(file)
		if diags.HasErrors() {
			t.Fatalf("%s: %v", file, diags)
		}
		for _, job := range blocks(f.Body.(*hclsyntax.Body), "job") {
			for _, group := range blocks(job.Body, "group") {
				if !runsRivora(t, file, group.Body, "agent") {
					continue
				}
				where := filepath.Base(file) + ":" + strings.Join(group.Labels, "")
				checked++
				healthy := time.Duration(0)
				for _, update := range append(blocks(job.Body, "update"), blocks(group.Body, "update")...) {
					if a, ok := update.Body.Attributes["min_healthy_time"]; ok {
						if healthy, err = time.ParseDuration(stringValue(t, where, a.Expr)); err != nil {
							t.Fatalf("%s: min_healthy_time: %v", where, err)
						}
					}
				}
				if healthy <= rejoin {
					t.Errorf("%s: update.min_healthy_time %s (Nomad's default: 10s) does not outlast the control plane's --rejoin-delay %s: a deploy stops the next agent before the last one owns partitions again", where, healthy, rejoin)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no group of deploy/nomad runs rivora agent: the parser misses it")
	}
}

// runsRivora reports whether a task of the group runs rivora's sub
// subcommand.
func runsRivora(t *testing.T, file string, group *hclsyntax.Body, sub string) bool {
	t.Helper()
	for _, task := range blocks(group, "task") {
		for _, config := range blocks(task.Body, "config") {
			command, ok := config.Body.Attributes["command"]
			args, hasArgs := config.Body.Attributes["args"]
			if ok && hasArgs && filepath.Base(stringValue(t, file, command.Expr)) == "rivora" {
				if a := listValue(t, file, args.Expr); len(a) > 0 && a[0] == sub {
					return true
				}
			}
		}
	}
	return false
}
