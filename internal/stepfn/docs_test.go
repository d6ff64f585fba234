package stepfn_test

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
)

// taskDecisions names, for each task function, the Go that decides what it
// does: the state machine only sequences.
var taskDecisions = map[string]string{
	deploy.FnRun: "`lifecycle.(*Tasks).Run` → `job.Next`, `job.DecideLaunch`, the provider call, `job.DecideComplete` or " +
		"`job.DecideAttemptFailed`, `job.NextHedge` and `job.DecideLaunchHedge`, `job.DecideFail`; `job.Plan.Signal` names what comes next",
	deploy.FnHold: "`lifecycle.(*Tasks).Hold` → `job.DecideUnknown` for the run's attempts, `job.Next` for the wait",
}

// TestDiagramsAreCurrent keeps docs/state-machines.md drawn from the code:
// the attempt states from job.AttemptEdges, the job statuses from
// job.StatusEdges, the execution from statemachine/onejob.asl.json.
// ONEJOB_UPDATE_DOCS=1 rewrites the file.
func TestDiagramsAreCurrent(t *testing.T) {
	t.Parallel()
	_, def := loadASL(t)
	got := renderStateMachines(t, def)
	path := testenv.Path(t, "docs", "state-machines.md")
	if os.Getenv("ONEJOB_UPDATE_DOCS") != "" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (ONEJOB_UPDATE_DOCS=1 go test -run TestDiagramsAreCurrent ./internal/stepfn writes it)", err)
	}
	if string(want) != got {
		t.Fatal("docs/state-machines.md is out of date: ONEJOB_UPDATE_DOCS=1 go test -run TestDiagramsAreCurrent ./internal/stepfn")
	}
}

func renderStateMachines(t *testing.T, def map[string]any) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(`# State machines

Generated from the code by ` + "`ONEJOB_UPDATE_DOCS=1 go test -run TestDiagramsAreCurrent ./internal/stepfn`" + `;
a test fails when this file and the code disagree.

## Attempt states

Every decision in ` + "`internal/job`" + ` moves an attempt along one of these edges
(` + "`job.AttemptEdges`" + `); no other change of an attempt's state exists.
A ` + "`starting`" + ` or ` + "`unknown`" + ` attempt blocks new attempts. A run starts and claims its attempt in one write (` + "`job.DecideLaunch`" + `).

` + "```mermaid\nstateDiagram-v2\n")
	fmt.Fprintf(&b, "    [*] --> %s: DecideStart / DecideHedge\n", job.AttemptStarting)
	for _, e := range job.AttemptEdges() {
		fmt.Fprintf(&b, "    %s --> %s: %s\n", e.From, e.To, mermaidLabel(strings.Join(e.By, "; ")))
	}
	for _, s := range job.AttemptStates() {
		if s.Terminal() {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	b.WriteString("```\n\n## Job statuses\n\n")
	b.WriteString("While no outcome is written a job's status is derived from its attempts (any unknown ⇒ `unknown`;\n" +
		"some attempt ⇒ `running`; else `pending`). An outcome — `succeeded`, `failed`, `cancelled` — is written only\n" +
		"by compare-and-swap on the job's `version` (`job.StatusEdges`).\n\n```mermaid\nstateDiagram-v2\n")
	fmt.Fprintf(&b, "    [*] --> %s: job.New (one conditional create per owner and key)\n", job.StatusPending)
	for _, e := range job.StatusEdges() {
		fmt.Fprintf(&b, "    %s --> %s: %s\n", e.From, e.To, mermaidLabel(e.By))
	}
	for _, s := range job.Statuses() {
		if s.Terminal() {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	b.WriteString("```\n\n## The execution (statemachine/onejob.asl.json)\n\n")
	b.WriteString("One execution per job, named by the job ID. A happy job is one state: Run decides, starts and claims\n" +
		"its attempt, calls the provider (hedging in Go) and completes the job. Edges carry the error names a Catch\n" +
		"matches (declared in Go: `job.Signals`, `lifecycle.ErrorNames`); the run's timeout is the execution's\n" +
		"`timeout_seconds`, the job type's timeout plus its hedge delay.\n\n```mermaid\nflowchart TD\n")
	states := def["States"].(map[string]any)
	fmt.Fprintf(&b, "    start((start)) --> %s\n", def["StartAt"])
	drawStates(&b, states, "    ")
	b.WriteString("```\n\n### Which Go decides each task state\n\n| state | function | decided by |\n|---|---|---|\n")
	tasks := deploy.Tasks()
	var rows []string
	walkStates(states, func(name string, st map[string]any) {
		if st["Type"] != "Task" {
			return
		}
		res := strings.TrimSuffix(strings.TrimPrefix(st["Resource"].(string), "${"), "}")
		fn := tasks[res]
		decided, ok := taskDecisions[fn]
		if !ok {
			t.Errorf("task state %s runs %q, which taskDecisions does not describe", name, fn)
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s |\n", name, fn, decided))
	})
	sort.Strings(rows)
	for _, r := range rows {
		b.WriteString(r)
	}
	return b.String()
}

// drawStates writes one flowchart node and its edges per state, with a
// subgraph per Parallel branch.
func drawStates(b *strings.Builder, states map[string]any, indent string) {
	names := make([]string, 0, len(states))
	for n := range states {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		st := states[name].(map[string]any)
		switch st["Type"] {
		case "Choice":
			fmt.Fprintf(b, "%s%s{%s}\n", indent, name, name)
		case "Succeed", "Fail":
			fmt.Fprintf(b, "%s%s([%s: %s])\n", indent, name, name, st["Type"])
		case "Task":
			fmt.Fprintf(b, "%s%s[%s]\n", indent, name, name)
		default:
			fmt.Fprintf(b, "%s%s[/%s: %s/]\n", indent, name, name, st["Type"])
		}
		if next, ok := st["Next"].(string); ok {
			fmt.Fprintf(b, "%s%s --> %s\n", indent, name, next)
		}
		if st["End"] == true {
			fmt.Fprintf(b, "%s%s --> %s_end((end))\n", indent, name, name)
		}
		for _, c := range anyList(st["Choices"]) {
			rule := c.(map[string]any)
			fmt.Fprintf(b, "%s%s -->|%s| %s\n", indent, name, mermaidLabel(choiceLabel(rule)), rule["Next"])
		}
		if d, ok := st["Default"].(string); ok {
			fmt.Fprintf(b, "%s%s -->|otherwise| %s\n", indent, name, d)
		}
		for _, c := range anyList(st["Catch"]) {
			rule := c.(map[string]any)
			var errs []string
			for _, e := range anyList(rule["ErrorEquals"]) {
				errs = append(errs, e.(string))
			}
			fmt.Fprintf(b, "%s%s -.->|%s| %s\n", indent, name, mermaidLabel(strings.Join(errs, ", ")), rule["Next"])
		}
		for i, br := range anyList(st["Branches"]) {
			branch := br.(map[string]any)
			fmt.Fprintf(b, "%ssubgraph %s_branch%d [%s branch %d]\n", indent, name, i+1, name, i+1)
			fmt.Fprintf(b, "%s    %s_b%d((branch)) --> %s\n", indent, name, i+1, branch["StartAt"])
			drawStates(b, branch["States"].(map[string]any), indent+"    ")
			fmt.Fprintf(b, "%send\n", indent)
			fmt.Fprintf(b, "%s%s --> %s_b%d\n", indent, name, name, i+1)
		}
	}
}

func choiceLabel(rule map[string]any) string {
	if and, ok := rule["And"].([]any); ok {
		var parts []string
		for _, r := range and {
			parts = append(parts, choiceLabel(r.(map[string]any)))
		}
		return strings.Join(parts, " and ")
	}
	v := strings.TrimPrefix(rule["Variable"].(string), "$.")
	switch {
	case rule["StringEquals"] != nil:
		return fmt.Sprintf("%s = %s", v, rule["StringEquals"])
	case rule["IsPresent"] != nil:
		return v + " present"
	}
	return v
}

func anyList(v any) []any {
	l, _ := v.([]any)
	return l
}

// mermaidLabel keeps a label inside mermaid's edge-label syntax.
func mermaidLabel(s string) string {
	return strings.NewReplacer(`"`, "'", "|", "/", "(", "‹", ")", "›", ";", ",", "{", "‹", "}", "›", ":", " —").Replace(s)
}
