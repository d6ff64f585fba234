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

// TestUnreportedEndsAreUnknown keeps the rule of job.EndSignal: every task
// that runs an attempt sends any end it did not name (a timeout, a crash)
// to a state that marks the attempt unknown.
func TestUnreportedEndsAreUnknown(t *testing.T) {
	t.Parallel()
	_, def := loadASL(t)
	states := map[string]map[string]any{}
	walkStates(def["States"].(map[string]any), func(name string, st map[string]any) { states[name] = st })
	runners := 0
	for name, st := range states {
		if st["Resource"] != "${RunAttemptFunctionArn}" {
			continue
		}
		runners++
		var catchAll, timeout string
		for _, c := range st["Catch"].([]any) {
			rule := c.(map[string]any)
			for _, e := range rule["ErrorEquals"].([]any) {
				switch e {
				case "States.ALL":
					catchAll = rule["Next"].(string)
				case "States.Timeout":
					timeout = rule["Next"].(string)
				}
			}
		}
		for what, next := range map[string]string{"States.ALL": catchAll, "States.Timeout": timeout} {
			if states[next]["Resource"] != "${MarkUnknownFunctionArn}" {
				t.Errorf("%s: %s leads to %q, not to a MarkUnknown task", name, what, next)
			}
		}
	}
	if runners == 0 {
		t.Fatal("no state runs attempts")
	}
}

func TestStateMachineRoutesEveryAction(t *testing.T) {
	t.Parallel()
	_, def := loadASL(t)
	route := def["States"].(map[string]any)["Route"].(map[string]any)
	var routed []string
	for _, c := range route["Choices"].([]any) {
		rule := c.(map[string]any)
		if and, ok := rule["And"].([]any); ok {
			rule = and[0].(map[string]any)
		}
		routed = append(routed, rule["StringEquals"].(string))
	}
	for _, a := range job.Actions() {
		if !slices.Contains(routed, string(a)) {
			t.Errorf("Route does not handle action %q", a)
		}
	}
}
