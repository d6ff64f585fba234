package jobtype

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
)

// celCostLimit bounds the evaluation cost of one check, so a pathological
// expression over a large output cannot stall a worker.
const celCostLimit = 100_000

// celEnvs are built once per load: environment construction is the
// expensive part of CEL.
type celEnvs struct {
	output *cel.Env // checks: `output`
	cases  *cel.Env // case assertions: `input` and `output`
}

func newCELEnvs() (*celEnvs, error) {
	obj := cel.MapType(cel.StringType, cel.DynType)
	out, err := cel.NewEnv(cel.Variable("output", obj))
	if err != nil {
		return nil, err
	}
	cases, err := cel.NewEnv(cel.Variable("input", obj), cel.Variable("output", obj))
	if err != nil {
		return nil, err
	}
	return &celEnvs{output: out, cases: cases}, nil
}

type compiledCheck struct {
	spec CheckSpec
	prg  cel.Program
}

func compileChecks(env *cel.Env, specs []CheckSpec, requireName bool) ([]compiledCheck, error) {
	var errs []error
	out := make([]compiledCheck, 0, len(specs))
	seen := map[string]bool{}
	for i, s := range specs {
		label := fmt.Sprintf("[%d]", i)
		if s.Name != "" {
			label += " " + s.Name
		}
		switch {
		case requireName && !namePatternCheck(s.Name):
			errs = append(errs, fmt.Errorf("%s: name must be snake_case", label))
			continue
		case seen[s.Name] && s.Name != "":
			errs = append(errs, fmt.Errorf("%s: duplicate name", label))
			continue
		case strings.TrimSpace(s.Message) == "":
			errs = append(errs, fmt.Errorf("%s: message is required (it is what a failing report shows)", label))
			continue
		}
		seen[s.Name] = true
		ast, iss := env.Compile(s.Expr)
		if iss.Err() != nil {
			errs = append(errs, fmt.Errorf("%s: %w", label, iss.Err()))
			continue
		}
		if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
			errs = append(errs, fmt.Errorf("%s: expression must be boolean, is %s", label, t))
			continue
		}
		prg, err := env.Program(ast, cel.CostLimit(celCostLimit))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", label, err))
			continue
		}
		out = append(out, compiledCheck{spec: s, prg: prg})
	}
	return out, errors.Join(errs...)
}

func namePatternCheck(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// eval runs a check; ok is false when the check fails or cannot be
// evaluated (e.g. a field it reads is missing), and why says which.
func (c compiledCheck) eval(vars map[string]any) (ok bool, why string) {
	val, _, err := c.prg.Eval(vars)
	if err != nil {
		return false, c.spec.Message + " (could not evaluate: " + err.Error() + ")"
	}
	b, isBool := val.Value().(bool)
	if !isBool {
		return false, c.spec.Message + fmt.Sprintf(" (check returned %v, not a bool)", val.Value())
	}
	if !b {
		return false, c.spec.Message
	}
	return true, ""
}

// celValue decodes JSON for CEL: integral numbers become int64 so that
// `output.priority == 1` compares ints, others float64.
func celValue(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return normaliseNumbers(v), nil
}

func normaliseNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = normaliseNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normaliseNumbers(e)
		}
		return x
	default:
		return v
	}
}
