package iamcheck

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/awscalls"
)

// Statement is one statement of a function's role, one action on one
// resource: the way IAM evaluates it.
type Statement struct {
	Function string
	Deny     bool
	// Action and Resource as deployed; either may hold IAM wildcards.
	Action   string
	Resource string
	// Attributes, when the statement holds dynamodb:Attributes to a list
	// (ForAllValues:StringEquals), is that list: the check holds each
	// recorded item write's attributes to it (review L5).
	Attributes []string
	// Conditional statements with any other condition count as allowing:
	// the check does not evaluate those, and says so.
	Conditional bool
}

// attributesKey is the one condition the check evaluates.
const (
	attributesOp  = "ForAllValues:StringEquals"
	attributesKey = "dynamodb:Attributes"
)

// conditionOf reads a statement's Condition: the attributes it holds
// calls to, and whether it has any condition the check cannot evaluate.
func conditionOf(c any) (attributes []string, other bool) {
	for op, keys := range asMap(c) {
		for key, v := range asMap(keys) {
			if op != attributesOp || key != attributesKey {
				other = true
				continue
			}
			attributes = []string{}
			for _, a := range list(v) {
				s, _ := a.(string)
				attributes = append(attributes, s)
			}
		}
	}
	return attributes, other
}

// admits is IAM's reading of st's evaluated condition for call c: every
// attribute the call names is in the list (ForAllValues: a call naming
// none passes).
func (st Statement) admits(c awscalls.Call) bool {
	if st.Attributes == nil {
		return true
	}
	for _, a := range c.AttributeList() {
		if !slices.Contains(st.Attributes, a) {
			return false
		}
	}
	return true
}

// Statements are every function's statements in t: the inline policies of
// its role and the AWS::IAM::Policy resources attached to it. Managed
// policies (AWSLambdaBasicExecutionRole: logs only) are not read.
func (t *Template) Statements() ([]Statement, error) {
	var out []Statement
	add := func(role string, doc any) error {
		fn, ok := t.roles[role]
		if !ok {
			return nil // the state machine's or a custom resource's
		}
		for _, st := range list(asMap(doc)["Statement"]) {
			stm := asMap(st)
			for _, k := range []string{"NotAction", "NotResource", "NotPrincipal"} {
				if _, bad := stm[k]; bad {
					return fmt.Errorf("function %s: a statement uses %s, which this check does not evaluate", fn, k)
				}
			}
			attributes, cond := conditionOf(stm["Condition"])
			for _, a := range list(stm["Action"]) {
				action, _ := a.(string)
				for _, r := range list(stm["Resource"]) {
					out = append(out, Statement{Function: fn, Deny: stm["Effect"] == "Deny", Action: action,
						Resource: t.render(r), Attributes: attributes, Conditional: cond})
				}
			}
		}
		return nil
	}
	for _, id := range slices.Sorted(maps.Keys(t.resources)) {
		r := t.resources[id]
		switch r.Type {
		case "AWS::IAM::Policy":
			for _, role := range list(r.Properties["Roles"]) {
				if ref, ok := asMap(role)["Ref"].(string); ok {
					if err := add(ref, r.Properties["PolicyDocument"]); err != nil {
						return nil, err
					}
				}
			}
		case "AWS::IAM::Role":
			for _, p := range list(r.Properties["Policies"]) {
				if err := add(id, asMap(p)["PolicyDocument"]); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// matches is IAM's reading of st for a call of action on arn (empty: a
// resource the stack does not have, which only "*" covers).
func (st Statement) matches(action, arn string) bool {
	if !wildcard(strings.ToLower(st.Action), strings.ToLower(action)) {
		return false
	}
	if st.Resource == "*" {
		return true
	}
	return arn != "" && wildcard(arnKey(st.Resource), arnKey(arn))
}

// arnKey drops an ARN's partition, region and account: a template is one
// stack in one account and region, whatever it spells them as.
func arnKey(arn string) string {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" {
		return arn
	}
	return parts[2] + ":" + parts[5]
}

// wildcard matches s against an IAM pattern: * is any run of characters
// (slashes included), ? one character.
func wildcard(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	switch pattern[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if wildcard(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && wildcard(pattern[1:], s[1:])
	}
	return s != "" && s[0] == pattern[0] && wildcard(pattern[1:], s[1:])
}

// platformActions are granted for the Lambda service's own use, never
// called by a function's code, so no recording can exercise them.
var platformActions = map[string]string{
	"xray:PutTraceSegments":    "active tracing (Lambda sends the segments)",
	"xray:PutTelemetryRecords": "active tracing (Lambda sends the segments)",
}

// Denied is a recorded call a template does not allow.
type Denied struct {
	Template string
	awscalls.Recorded
	// Why: no statement allows it, or which Deny refuses it.
	Why string
}

// Unexercised is a statement no recorded call used.
type Unexercised struct {
	Function, Action, Resource string
	Templates                  []string
}

// Report is the check's outcome.
type Report struct {
	Templates []string
	Calls     []awscalls.Recorded
	Files     int
	Denied    []Denied
	// Silent lists deployed functions no call was recorded for: their
	// code never ran in the suites, or runs on clients nobody tagged.
	Silent      []string
	Unexercised []Unexercised
	// Platform lists the statements kept for the Lambda service's use.
	Platform []string
	// Conditional lists the conditional statements that allowed a call.
	Conditional []string
	// Unreadable lists statement resources the check could not resolve.
	Unreadable []string
	// Forbidden lists statements that allow what permissions.Forbidden
	// keeps out, whether any call used them or not.
	Forbidden []string
}

// Failed says whether the check fails: a call not allowed, a forbidden
// grant, a function with no recorded call, nothing recorded or no template.
func (r Report) Failed() bool {
	return len(r.Denied) > 0 || len(r.Forbidden) > 0 || len(r.Silent) > 0 || len(r.Calls) == 0 || len(r.Templates) == 0
}

// Check checks calls against every template.
func Check(templates []*Template, calls []awscalls.Recorded, files int) (Report, error) {
	rep := Report{Calls: calls, Files: files}
	unused := map[[3]string][]string{}
	platform, conditional, unreadable := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, t := range templates {
		rep.Templates = append(rep.Templates, t.Name)
		stmts, err := t.Statements()
		if err != nil {
			return Report{}, fmt.Errorf("%s: %w", t.Name, err)
		}
		rep.Forbidden = append(rep.Forbidden, forbidden(t, stmts)...)
		used := make([]bool, len(stmts))
		for _, c := range calls {
			arn, _ := t.ARN(c.Resource)
			allowed, denied, narrowed := -1, -1, -1
			for i, st := range stmts {
				if st.Function != c.Function || !st.matches(c.Action, arn) {
					continue
				}
				switch {
				case st.Deny:
					denied = i
				case !st.admits(c.Call):
					narrowed = i
				case allowed < 0 || stmts[allowed].Conditional:
					allowed = i
				}
			}
			switch {
			case denied >= 0:
				rep.Denied = append(rep.Denied, Denied{Template: t.Name, Recorded: c,
					Why: fmt.Sprintf("denied by %s on %s", stmts[denied].Action, t.symbolic(stmts[denied].Resource))})
			case allowed < 0 && narrowed >= 0:
				st := stmts[narrowed]
				var outside []string
				for _, a := range c.AttributeList() {
					if !slices.Contains(st.Attributes, a) {
						outside = append(outside, a)
					}
				}
				rep.Denied = append(rep.Denied, Denied{Template: t.Name, Recorded: c,
					Why: fmt.Sprintf("its role's %s on %s may name only %s, not %s", st.Action, t.symbolic(st.Resource),
						strings.Join(st.Attributes, ","), strings.Join(outside, ","))})
			case allowed < 0:
				why := "no statement of its role allows it"
				if arn == "" {
					why = "it names no resource of this stack"
				}
				rep.Denied = append(rep.Denied, Denied{Template: t.Name, Recorded: c, Why: why})
			default:
				used[allowed] = true
				if st := stmts[allowed]; st.Conditional {
					conditional[fmt.Sprintf("%s: %s on %s (%s)", st.Function, st.Action, t.symbolic(st.Resource), t.Name)] = true
				}
			}
		}
		for i, st := range stmts {
			res := t.symbolic(st.Resource)
			switch {
			case st.Deny || used[i]:
			case platformActions[st.Action] != "":
				platform[fmt.Sprintf("%s on %s: %s", st.Action, res, platformActions[st.Action])] = true
			default:
				if strings.HasPrefix(res, unresolvedMark) {
					unreadable[fmt.Sprintf("%s: %s on %s (%s)", st.Function, st.Action, strings.TrimPrefix(res, unresolvedMark), t.Name)] = true
				}
				k := [3]string{st.Function, st.Action, res}
				unused[k] = append(unused[k], t.Name)
			}
		}
	}
	seen := map[string]bool{}
	for _, c := range calls {
		seen[c.Function] = true
	}
	for _, f := range deploy.Names() {
		if !seen[f] {
			rep.Silent = append(rep.Silent, f)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(unused), func(a, b [3]string) int {
		return strings.Compare(strings.Join(a[:], " "), strings.Join(b[:], " "))
	}) {
		rep.Unexercised = append(rep.Unexercised, Unexercised{Function: k[0], Action: k[1], Resource: k[2], Templates: unused[k]})
	}
	rep.Platform = slices.Sorted(maps.Keys(platform))
	rep.Conditional = slices.Sorted(maps.Keys(conditional))
	rep.Unreadable = slices.Sorted(maps.Keys(unreadable))
	return rep, nil
}

// forbidden names t's statements that allow what permissions.Forbidden
// keeps out: by action and resource, wildcards included, whatever their
// condition (a narrowed put is still a put).
func forbidden(t *Template, stmts []Statement) []string {
	var out []string
	for _, f := range permissions.Forbidden() {
		arn, ok := t.ARN(f.Resource)
		if !ok {
			continue
		}
		for _, st := range stmts {
			if st.Function == f.Function && !st.Deny && st.matches(f.Action, arn) {
				out = append(out, fmt.Sprintf("%s: %s may %s on %s (its %s on %s): %s", t.Name, f.Function, f.Action, f.Resource,
					st.Action, t.symbolic(st.Resource), f.Why))
			}
		}
	}
	return out
}

// Write prints the report: failures first, then what was not exercised.
func (r Report) Write(w io.Writer) {
	byFn := map[string]int{}
	for _, c := range r.Calls {
		byFn[c.Function]++
	}
	var counts []string
	for _, f := range deploy.Names() {
		counts = append(counts, fmt.Sprintf("%s %d", f, byFn[f]))
	}
	fmt.Fprintf(w, "iamcheck: %d distinct AWS calls (%s) from %d recordings, against %s\n",
		len(r.Calls), strings.Join(counts, ", "), r.Files, strings.Join(r.Templates, ", "))
	switch {
	case len(r.Templates) == 0:
		fmt.Fprintf(w, "FAIL: no synthesized template: infra/stack's TestStack writes them where $%s says (make unit)\n", EnvTemplatesDir)
	case len(r.Calls) == 0:
		fmt.Fprintf(w, "FAIL: no recorded call: the end-to-end suites record them where $%s says (make unit, make test-clients)\n", awscalls.EnvDir)
	}
	for _, d := range r.Denied {
		fmt.Fprintf(w, "FAIL: %s: %s: %s on %s is not granted (%s); recorded by %s\n", d.Template, d.Function, d.Action,
			d.Resource, d.Why, strings.Join(d.Sources, ", "))
	}
	for _, f := range r.Forbidden {
		fmt.Fprintf(w, "FAIL: forbidden grant: %s\n", f)
	}
	for _, f := range r.Silent {
		fmt.Fprintf(w, "FAIL: no AWS call recorded for function %s: no suite ran its code, or its SDK clients are not tagged (internal/dev/stack/functions.go)\n", f)
	}
	if len(r.Unexercised) > 0 {
		fmt.Fprintln(w, "granted but never called in any suite:")
		for _, u := range r.Unexercised {
			fmt.Fprintf(w, "  %s: %s on %s (%s)\n", u.Function, u.Action, u.Resource, strings.Join(u.Templates, ", "))
		}
	}
	for _, p := range r.Platform {
		fmt.Fprintf(w, "for the Lambda service, not the code: %s\n", p)
	}
	for _, c := range r.Conditional {
		fmt.Fprintf(w, "allowed by a conditional statement (its condition not evaluated): %s\n", c)
	}
	for _, u := range r.Unreadable {
		fmt.Fprintf(w, "a statement's resource the check cannot resolve: %s\n", u)
	}
	if !r.Failed() {
		fmt.Fprintln(w, "ok: every recorded call is granted")
	}
}
