package jobtype

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Case is a golden contract case: an input and what a correct output must
// look like beyond the type's own contract.
type Case struct {
	// Name is the case file's base name.
	Name        string
	Description string
	Input       json.RawMessage
	// Expect maps JSON pointers into the output to the exact expected value,
	// e.g. {"/category": "outage"}.
	Expect map[string]json.RawMessage
	// Assert are checks (checkexpr) over `input` and `output`.
	Assert  []CheckSpec
	asserts []compiledCheck
}

type caseSpec struct {
	Description string                     `json:"description"`
	Input       json.RawMessage            `json:"input"`
	Expect      map[string]json.RawMessage `json:"expect"`
	Assert      []CheckSpec                `json:"assert"`
}

// loadCases loads and validates cases/<type>/*.json; each type needs at
// least one so it can be certified.
func loadCases(fsys fs.FS, compile compileFunc, t *Type) ([]Case, error) {
	files, err := fs.Glob(fsys, path.Join("cases", t.Name(), "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, &TypeError{File: path.Join("cases", t.Name()), Problems: []string{"no golden cases: a type must have at least one"}}
	}
	cases := make([]Case, 0, len(files))
	for _, file := range files {
		c, problems := loadCase(fsys, compile, t, file)
		if len(problems) > 0 {
			return nil, &TypeError{File: file, Problems: problems}
		}
		cases = append(cases, c)
	}
	return cases, nil
}

func loadCase(fsys fs.FS, compile compileFunc, t *Type, file string) (Case, []string) {
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return Case{}, []string{err.Error()}
	}
	var s caseSpec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Case{}, []string{"decode: " + err.Error()}
	}
	c := Case{
		Name:        strings.TrimSuffix(path.Base(file), ".json"),
		Description: s.Description,
		Input:       s.Input,
		Expect:      s.Expect,
		Assert:      s.Assert,
	}
	var problems []string
	if fes := t.ValidateInput(s.Input); len(fes) > 0 {
		for _, fe := range fes {
			problems = append(problems, "input "+fe.String())
		}
	} else if _, _, err := t.Render(s.Input); err != nil {
		problems = append(problems, err.Error())
	}
	for ptr := range s.Expect {
		if _, err := parsePointer(ptr); err != nil || ptr == "" {
			problems = append(problems, fmt.Sprintf("expect: %q is not a JSON pointer into the output", ptr))
		}
	}
	if len(s.Expect) == 0 && len(s.Assert) == 0 {
		problems = append(problems, "a case needs expect or assert")
	}
	if c.asserts, err = compileChecks(compile, []string{"input", "output"}, s.Assert, false); err != nil {
		problems = append(problems, "assert: "+err.Error())
	}
	return c, problems
}

// check returns the case-specific violations of an output that already
// passed the type's contract.
func (c Case) check(output json.RawMessage) []Violation {
	var out any
	if err := json.Unmarshal(output, &out); err != nil {
		return []Violation{{Rule: RuleJSON, Message: err.Error()}}
	}
	var vs []Violation
	ptrs := make([]string, 0, len(c.Expect))
	for p := range c.Expect {
		ptrs = append(ptrs, p)
	}
	slices.Sort(ptrs)
	for _, p := range ptrs {
		var want any
		_ = json.Unmarshal(c.Expect[p], &want)
		got, ok := resolvePointer(out, p)
		if !ok {
			vs = append(vs, Violation{Pointer: p, Rule: RuleExpect, Message: "missing, want " + compact(c.Expect[p])})
			continue
		}
		if !reflect.DeepEqual(got, want) {
			gotJSON, _ := json.Marshal(got)
			vs = append(vs, Violation{Pointer: p, Rule: RuleExpect, Message: "got " + string(gotJSON) + ", want " + compact(c.Expect[p])})
		}
	}
	if len(c.asserts) > 0 {
		in, err1 := celValue(c.Input)
		o, err2 := celValue(output)
		if err1 != nil || err2 != nil {
			return append(vs, Violation{Rule: RuleAssert, Message: "cannot decode input or output"})
		}
		vars := map[string]any{"input": in, "output": o}
		for _, a := range c.asserts {
			if ok, why := a.eval(vars); !ok {
				vs = append(vs, Violation{Rule: RuleAssert, Message: why})
			}
		}
	}
	return vs
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// parsePointer splits an RFC 6901 pointer into unescaped tokens.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("pointer %q must start with /", p)
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		toks[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
	}
	return toks, nil
}

func resolvePointer(doc any, p string) (any, bool) {
	toks, err := parsePointer(p)
	if err != nil {
		return nil, false
	}
	cur := doc
	for _, t := range toks {
		switch x := cur.(type) {
		case map[string]any:
			v, ok := x[t]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			cur = x[i]
		default:
			return nil, false
		}
	}
	return cur, true
}
