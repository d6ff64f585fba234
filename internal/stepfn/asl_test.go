package stepfn_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

func loadASL(t *testing.T) (string, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(testenv.Path(t, "statemachine", "onejob.asl.json"))
	if err != nil {
		t.Fatal(err)
	}
	var def map[string]any
	if err := json.Unmarshal(raw, &def); err != nil {
		t.Fatal(err)
	}
	return string(raw), def
}

// walkStates visits every state, including those inside Parallel branches.
func walkStates(states map[string]any, visit func(name string, st map[string]any)) {
	for name, v := range states {
		st := v.(map[string]any)
		visit(name, st)
		if branches, ok := st["Branches"].([]any); ok {
			for _, b := range branches {
				walkStates(b.(map[string]any)["States"].(map[string]any), visit)
			}
		}
	}
}

func TestStateMachineUsesOnlyWhatRunsLocally(t *testing.T) {
	t.Parallel()
	raw, def := loadASL(t)
	for _, banned := range []string{".waitForTaskToken", "QueryLanguage", "JSONata", `"Assign"`, "arn:aws:states:::lambda:invoke", "{%"} {
		if strings.Contains(raw, banned) {
			t.Errorf("definition uses %s, which the local interpreter lacks", banned)
		}
	}
	placeholders := map[string]bool{}
	for p := range deploy.Tasks() {
		placeholders["${"+p+"}"] = true
	}
	used := map[string]bool{}
	walkStates(def["States"].(map[string]any), func(name string, st map[string]any) {
		if st["Type"] != "Task" {
			return
		}
		res, _ := st["Resource"].(string)
		if !placeholders[res] {
			t.Errorf("task %s has resource %q, want one of the function placeholders", name, res)
		}
		used[res] = true
	})
	for p := range placeholders {
		if !used[p] {
			t.Errorf("placeholder %s is never used", p)
		}
	}
	if got := regexp.MustCompile(`\$\{[A-Za-z]+\}`).FindAllString(raw, -1); len(got) == 0 {
		t.Fatal("no substitutions found")
	}
}

// TestStateMachineErrorNamesAreDeclared checks both directions: every name
// the definition matches is declared in Go, and every declared name is
// matched somewhere (else a task's error would fall through to a catch-all).
func TestStateMachineErrorNamesAreDeclared(t *testing.T) {
	t.Parallel()
	_, def := loadASL(t)
	declared := lifecycle.ErrorNames()
	matched := map[string]bool{}
	walkStates(def["States"].(map[string]any), func(name string, st map[string]any) {
		for _, field := range []string{"Retry", "Catch"} {
			rules, _ := st[field].([]any)
			for _, r := range rules {
				for _, e := range r.(map[string]any)["ErrorEquals"].([]any) {
					n := e.(string)
					if strings.HasPrefix(n, "States.") || strings.HasPrefix(n, "Lambda.") || n == "ServiceException" {
						continue
					}
					if !slices.Contains(declared, n) {
						t.Errorf("state %s %s matches %q, which no Go constant declares", name, field, n)
					}
					matched[n] = true
				}
			}
		}
	})
	for _, n := range declared {
		if !matched[n] {
			t.Errorf("the task error %q is declared but no Retry or Catch matches it", n)
		}
	}
}

// placeholder is the ASL resource of the task function fn.
func placeholder(t *testing.T, fn string) string {
	t.Helper()
	f, ok := deploy.Lookup(fn)
	if !ok || f.Placeholder == "" {
		t.Fatalf("%s is not a task function", fn)
	}
	return "${" + f.Placeholder + "}"
}

// catches maps each error name a state catches to the state it leads to.
func catches(st map[string]any) map[string]string {
	out := map[string]string{}
	rules, _ := st["Catch"].([]any)
	for _, c := range rules {
		rule := c.(map[string]any)
		for _, e := range rule["ErrorEquals"].([]any) {
			out[e.(string)] = rule["Next"].(string)
		}
	}
	return out
}

// TestUnreportedEndsAreUnknown keeps the timeout rule: the run has its
// own TimeoutSeconds, and any end of it not named — its timeout, a crash —
// leads to the hold task, which decides its attempts unknown, with the
// error name it was caught with.
func TestUnreportedEndsAreUnknown(t *testing.T) {
	t.Parallel()
	_, def := loadASL(t)
	states := map[string]map[string]any{}
	walkStates(def["States"].(map[string]any), func(name string, st map[string]any) { states[name] = st })
	run, hold := placeholder(t, deploy.FnRun), placeholder(t, deploy.FnHold)
	runners := 0
	for name, st := range states {
		if st["Resource"] != run {
			continue
		}
		runners++
		if st["TimeoutSecondsPath"] != "$.timeout_seconds" {
			t.Errorf("%s: TimeoutSecondsPath %v, want the execution's $.timeout_seconds", name, st["TimeoutSecondsPath"])
		}
		c := catches(st)
		if _, ok := c["States.Timeout"]; ok {
			t.Errorf("%s catches States.Timeout on its own; it must reach the hold like every unnamed end", name)
		}
		next := states[c["States.ALL"]]
		if next["Resource"] != hold {
			t.Errorf("%s: States.ALL leads to %q, not to the hold task", name, c["States.ALL"])
		}
		if params, _ := next["Parameters"].(map[string]any); params["error.$"] != "$.error.Error" {
			t.Errorf("the hold after %s is not told the error caught: %v", name, params)
		}
	}
	if runners == 0 {
		t.Fatal("no state runs attempts")
	}
}

// TestEverySignalIsRouted: each step job.Next can decide is carried out by
// the run itself (the execution ends) or named by a signal the run state
// catches explicitly — RunNext into a new run, WaitOpen into the hold and
// its wait.
func TestEverySignalIsRouted(t *testing.T) {
	t.Parallel()
	_, def := loadASL(t)
	states := def["States"].(map[string]any)
	run := states["Run"].(map[string]any)
	if run["Resource"] != placeholder(t, deploy.FnRun) || run["End"] != true {
		t.Fatalf("the Run state must run the run function and end the execution when the job is done: %v", run)
	}
	c := catches(run)
	want := map[job.Signal]string{job.SignalRunNext: "Run", job.SignalWaitOpen: "Hold"}
	for _, a := range job.Actions() {
		s, ok := job.Plan{Action: a}.Signal()
		if !ok {
			continue // done, finalize: the run ends the job itself
		}
		if c[string(s)] != want[s] {
			t.Errorf("action %s signals %s, which leads to %q, want %q", a, s, c[string(s)], want[s])
		}
	}
	if hold := states["Hold"].(map[string]any); hold["Next"] != "Wait" || states["Wait"].(map[string]any)["Next"] != "Run" {
		t.Error("the hold must lead through Wait back to Run")
	}
}
