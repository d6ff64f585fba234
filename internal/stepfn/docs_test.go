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
	deploy.FnRun: "`lifecycle.(*Tasks).Run` → `job.Next`, `job.DecideLaunch`, the provider call (or an asynchronous provider's submit, " +
		"`job.DecideSubmitted`), `job.DecideComplete` or `job.DecideAttemptFailed` (or `job.DecideCallCancelled` for a streamed call " +
		"closed when its job was cancelled), `job.NextHedge` and `job.DecideLaunchHedge`, `job.DecideFail`; `job.Plan.Signal` names " +
		"what comes next; a job `job.Parked` on work at its providers ends the execution",
	deploy.FnHold: "`lifecycle.(*Tasks).Hold` → `job.DecideUnknown` for the run's attempts, `job.Next` for the wait",
}

// TestDiagramsAreCurrent keeps docs/state-machines.md drawn from the code:
// the attempt states from job.AttemptEdges, the job statuses from
// job.StatusEdges, the execution from statemachine/onejob.asl.json, a
// provider's breaker from job.BreakerEdges and job.OverrideEdges, a webhook
// delivery from job.DeliveryEdges, a provider batch from job.BatchEdges.
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
	renderBreaker(&b)
	renderStanding(&b)
	renderDeliveries(&b)
	renderParked(&b)
	renderBatches(&b)
	return b.String()
}

// renderParked draws the life of work at a provider once its job is
// parked (issue 40): what the scheduled pass does for each due kind
// (job.DueActions), and how the job is woken.
func renderParked(b *strings.Builder) {
	b.WriteString("\n## Work at a provider (parked jobs)\n\n" +
		"A run that submitted an attempt to an asynchronous provider, with nothing else open, ends its execution with the job\n" +
		"parked (`job.Parked`). The provider's webhook, or the scheduled pass over the due work (the sparse `by_poll` index,\n" +
		"keyed by `job.DueAt`), applies the work's end through the job's compare-and-swap; the pass asks one question per due\n" +
		"attempt (`job.Dues`):\n\n| due | when | asks the provider | then | decisions |\n|---|---|---|---|---|\n")
	for _, a := range job.DueActions() {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", a.Kind, a.When, a.Asks, a.Then, "`job."+strings.Join(a.By, "`, `job.")+"`")
	}
	b.WriteString("\nWhoever applied an end that leaves the job needing a run (`job.NeedsRun`: no outcome, nothing open) starts it,\n" +
		"named from the job alone (`job.ExecutionName`: the job ID, then `<job_id>-<n>` for the end of attempt n's work), so two\n" +
		"appliers start one execution; the sweeper starts one whose start was lost (`job.Stranded`).\n\n```mermaid\nstateDiagram-v2\n" +
		"    [*] --> parked: Run submits (DecideSubmitted) and ends its execution\n" +
		"    parked --> parked: due poll, not ended (DecideHeard)\n" +
		"    parked --> cancelling: due cancel (DecideCancelRemote)\n" +
		"    cancelling --> cancelling: due poll, not ended (DecideHeard)\n" +
		"    parked --> ended: webhook or poll, ended\n" +
		"    cancelling --> ended: cancel confirmed (DecideRemoteCancelled), or ended\n" +
		"    parked --> abandoned: due deadline (DecideAbandon)\n" +
		"    cancelling --> abandoned: due deadline (DecideAbandon)\n" +
		"    ended --> [*]: the job ends, or a run is started (NeedsRun)\n" +
		"    abandoned --> [*]: the job settles, or a run is started (NeedsRun)\n```\n")
}

// renderBatches draws a provider batch's states (job.BatchEdges), with the
// bounds of job.DefaultBatchPolicy.
func renderBatches(b *strings.Builder) {
	p := job.DefaultBatchPolicy()
	fmt.Fprintf(b, "\n## Provider batches (a `%s` window on a batch API)\n\n"+
		"A job that may wait %s, on a provider with a batch API, runs as one line of a provider batch: its attempt is\n"+
		"launched and claimed as any, then queued (`job.DecideQueued`: nothing of onejob runs for it). The batcher gathers\n"+
		"one provider's queued lines across owners, up to %d or for %s (`job.DecideBatchDue`), records the batch with its\n"+
		"lines before anything is sent (`job.NewBatch`), claims each line through its job's compare-and-swap\n"+
		"(`job.DecideBatched`: a line whose job ended first is dropped, never sent, not billed), submits once, and moves\n"+
		"the batch along `job.BatchEdges` only. A submit whose answer was lost is looked for by the batch's ID for %s\n"+
		"before it is sent again. Each line's result reaches its job through the same compare-and-swap as a live answer.\n\n"+
		"```mermaid\nstateDiagram-v2\n", job.TierBatch24h, job.TierBatch24h.Window(), p.MaxLines, p.MaxGather, p.LostSubmitGrace)
	fmt.Fprintf(b, "    [*] --> %s: NewBatch (the batcher's, when its lines are due)\n", job.BatchRecorded)
	for _, e := range job.BatchEdges() {
		fmt.Fprintf(b, "    %s --> %s: %s\n", e.From, e.To, mermaidLabel(strings.Join(e.By, "; ")))
	}
	fmt.Fprintf(b, "    %s --> [*]\n", job.BatchDone)
	b.WriteString("```\n")
}

// renderDeliveries draws a webhook delivery's states (job.DeliveryEdges),
// with the schedule of job.DefaultRetrySchedule.
func renderDeliveries(b *strings.Builder) {
	waits := make([]string, 0, len(job.DefaultRetrySchedule()))
	for _, w := range job.DefaultRetrySchedule() {
		waits = append(waits, w.String())
	}
	b.WriteString("\n## Webhook deliveries (one per event and endpoint)\n\n" +
		"The write that ends or blocks a job records its event in the job's outbox; the notifier fans each event out\n" +
		"into one delivery per endpoint of the owner, and moves each delivery along `job.DeliveryEdges` only. Every\n" +
		"try sends the same `webhook-id` and body; after a failed try the next is due after " + strings.Join(waits, ", ") +
		"\n(or the endpoint's `Retry-After`, if later); a delivery fails after the last.\n\n```mermaid\nstateDiagram-v2\n")
	fmt.Fprintf(b, "    [*] --> %s: NewDelivery (the notifier's fan-out of an outbox event)\n", job.DeliveryPending)
	for _, e := range job.DeliveryEdges() {
		fmt.Fprintf(b, "    %s --> %s: %s\n", e.From, e.To, mermaidLabel(strings.Join(e.By, "; ")))
	}
	b.WriteString("```\n")
}

// renderBreaker draws a provider's breaker and an operator's override of
// it, with the bounds of job.DefaultHealthPolicy.
func renderBreaker(b *strings.Builder) {
	p := job.DefaultHealthPolicy()
	b.WriteString("\n## Provider health (a circuit breaker per provider)\n\n" +
		"Each provider's breaker (`job.Health`) is shared by every runner through the store and written only when it\n" +
		"changes. Its own state moves along `job.BreakerEdges`; an operator's override (`job.OverrideEdges`: `onejob\n" +
		"providers force`, the console, `POST /v1/admin/providers/{name}/force`) wins while it is set, and the breaker\n" +
		"goes on beneath it. `TestBreakerEdgesAreWhatTheDecisionsDo` (`internal/job`) drives every health decision\n" +
		"through the reachable states and holds both tables to what the decisions do, both ways. The bounds shown are\n" +
		"`job.DefaultHealthPolicy`'s; a provider's configuration may set its own. An admission the store cannot record\n" +
		"(the health unread, or its write failed or throttled) changes no state and never goes past a declared\n" +
		fmt.Sprintf("`rate_limit` or `max_concurrent` counted from admission: it is refused for %s (`job.AdmitUnread`,\n", job.UnrecordedRetry) +
		"`job.AdmitUnrecorded`); only a provider declaring neither is let through an unreadable health, counted in\n" +
		"`AdmissionsUnread`.\n\n```mermaid\nstateDiagram-v2\n")
	fmt.Fprintf(b, "    [*] --> %s: job.NewHealth ‹nothing reported yet›\n", job.ProviderClosed)
	for _, e := range job.BreakerEdges() {
		fmt.Fprintf(b, "    %s --> %s: %s\n", e.From, e.To, mermaidLabel(strings.Join(e.By, "; ")))
	}
	// Notes are free text up to "end note"; these hold no mermaid syntax.
	note := func(state job.ProviderState, lines ...string) {
		fmt.Fprintf(b, "    note right of %s\n", state)
		for _, l := range lines {
			fmt.Fprintf(b, "        %s\n", l)
		}
		b.WriteString("    end note\n")
	}
	note(job.ProviderClosed, fmt.Sprintf("opens at %d failures within %s that are at least %.0f%% of the calls reported", p.Breaker.Failures,
		p.Breaker.Window, 100*p.Breaker.FailureRate), fmt.Sprintf("at most %d attempts hold it at once, running past its slow bound or unknown", p.MaxConcurrent))
	note(job.ProviderOpen, "new attempts skip it, each job starting on its next certified provider or waiting",
		fmt.Sprintf("cooldown %s, doubled by each re-trip up to %s, never shortened while it runs", p.Breaker.Cooldown, p.Breaker.MaxCooldown))
	note(job.ProviderHalfOpen, fmt.Sprintf("lets %d probe attempt(s) through and lasts at most %s", p.Breaker.Probes, p.Breaker.HalfOpenMax),
		"so a probe that hangs cannot hold it here")
	b.WriteString("```\n\nAn operator's override:\n\n```mermaid\nstateDiagram-v2\n" +
		"    state \"no override (auto)\" as none\n    state \"forced open\" as forced_open\n    state \"forced closed\" as forced_closed\n" +
		"    [*] --> none\n")
	name := func(s job.ProviderState) string {
		if s == "" {
			return "none"
		}
		return "forced_" + string(s)
	}
	for _, e := range job.OverrideEdges() {
		fmt.Fprintf(b, "    %s --> %s: %s\n", name(e.From), name(e.To), mermaidLabel(strings.Join(e.By, "; ")))
	}
	b.WriteString("```\n")
}

// renderStanding draws an owner's standing at a provider (issue 26's fair
// share and back-off), with the bounds of job.DefaultHealthPolicy.
func renderStanding(b *strings.Builder) {
	p := job.DefaultHealthPolicy()
	b.WriteString("\n## An owner's standing at a provider (fair share and back-off)\n\n" +
		"On a closed breaker, `job.Admit` answers each owner by its standing (`job.Standing`), which moves along\n" +
		"`job.StandingEdges`; `TestStandingEdgesAreWhatTheDecisionsDo` (`internal/job`) drives the decisions through\n" +
		"every standing with several owners and holds the table to what they do, both ways. A provider that declares\n" +
		"`max_concurrent` counts each attempt from its admission to its end; its share is `max_concurrent` divided\n" +
		"among the owners holding or waiting (at least 1), and a quarter of it (at least one slot) is kept for owners\n" +
		"under their share. " + fmt.Sprintf("An owner is tallied by its key (`job.OwnerKey`: its name up to %d bytes, else a digest); while\n", job.MaxOwnerKeyBytes) +
		fmt.Sprintf("a provider's health tallies %d owners, a newcomer is tallied in one of %d buckets, which has a standing of\n", job.MaxTrackedOwners, job.OwnerBuckets) +
		"its own as one owner does.\n\n```mermaid\nstateDiagram-v2\n")
	fmt.Fprintf(b, "    [*] --> %s\n", job.StandingUnder)
	for _, e := range job.StandingEdges() {
		fmt.Fprintf(b, "    %s --> %s: %s\n", e.From, e.To, mermaidLabel(strings.Join(e.By, "; ")))
	}
	fmt.Fprintf(b, "    note right of %s\n        at most %d of one owner's failures count toward opening the provider (owner_failures)\n"+
		"        past %d of its own within %s it backs off for %s alone\n    end note\n",
		job.StandingBackingOff, p.Breaker.OwnerFailures, p.Breaker.Failures, p.Breaker.Window, p.Breaker.Cooldown)
	b.WriteString("```\n")
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
