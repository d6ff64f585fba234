package checkexpr_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/jobtype/checkexpr"
)

// TestDifferentialJobTypes runs every check and case assertion of the
// embedded job types, and every case expectation written as the equality
// it asserts, over outputs built from each type's output schema: the
// schema's example, each case's expectations on top, and each property
// missing or replaced by a value of every JSON kind.
func TestDifferentialJobTypes(t *testing.T) {
	t.Parallel()
	cat, err := jobtype.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range cat.Names() {
		typ, _ := cat.Get(name)
		t.Run(camel(name), func(t *testing.T) {
			t.Parallel()
			outputs := sampleOutputs(t, typ.OutputSchema(), cat.Cases(name))
			var checks []string
			for _, c := range typ.Checks() {
				checks = append(checks, c.Expr)
			}
			envs := make([]map[string]any, len(outputs))
			for i, o := range outputs {
				envs[i] = map[string]any{"output": o}
			}
			s := differ(t, checkexpr.Compile, []string{"output"}, checks, envs)
			if s.refused > 0 {
				t.Errorf("checkexpr refuses %d of %s's checks", s.refused, name)
			}
			for _, c := range cat.Cases(name) {
				in := decode(t, string(c.Input))
				caseEnvs := make([]map[string]any, len(outputs))
				for i, o := range outputs {
					caseEnvs[i] = map[string]any{"input": in, "output": o}
				}
				var exprs []string
				for _, a := range c.Assert {
					exprs = append(exprs, a.Expr)
				}
				for ptr, want := range c.Expect {
					exprs = append(exprs, expectExpr(t, ptr, want))
				}
				s := differ(t, checkexpr.Compile, []string{"input", "output"}, exprs, caseEnvs)
				if s.refused > 0 {
					t.Errorf("case %s: checkexpr refuses %d of %d expressions", c.Name, s.refused, len(exprs))
				}
			}
		})
	}
}

// expectExpr writes a case expectation ({"/category": "outage"}) as the
// CEL equality it asserts: output['category'] == 'outage'.
func expectExpr(t *testing.T, ptr string, want json.RawMessage) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("output")
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		b.WriteString("[" + celString(tok) + "]")
	}
	b.WriteString(" == " + celLiteral(t, decode(t, string(want))))
	return b.String()
}

func celLiteral(t *testing.T, v any) string {
	t.Helper()
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return celString(x)
	case float64:
		return fmt.Sprintf("%#v", x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = celLiteral(t, e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		t.Fatalf("expectation holds an object (%v): CEL map literals are outside the subset", x)
	}
	return fmt.Sprint(v)
}

// celString quotes s as a CEL string literal, escaping with \u so the
// escapes themselves are exercised.
func celString(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range s {
		switch {
		case r == '\'' || r == '\\':
			b.WriteString(`\` + string(r))
		case r < 0x20 || r > 0x7e:
			if r > 0xffff {
				fmt.Fprintf(&b, `\U%08x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// sampleOutputs builds outputs for a type from its output schema.
func sampleOutputs(t *testing.T, schema json.RawMessage, cases []jobtype.Case) []any {
	t.Helper()
	var s struct {
		Properties map[string]struct {
			Type string `json:"type"`
			Enum []any  `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		t.Fatal(err)
	}
	base := map[string]any{}
	for name, p := range s.Properties {
		switch {
		case len(p.Enum) > 0:
			base[name] = p.Enum[0]
		case p.Type == "string":
			base[name] = "sample " + name
		case p.Type == "integer":
			base[name] = 1
		case p.Type == "number":
			base[name] = 1.5
		case p.Type == "boolean":
			base[name] = true
		case p.Type == "array":
			base[name] = []any{}
		default:
			base[name] = map[string]any{}
		}
	}
	palette := []any{nil, true, false, 0, 1, 2, 4, -1, math.MaxInt64, math.MinInt64, 1.5, 1.0, 1e20, "", "x", "a\nb",
		"héllo", "sample", "outage", []any{}, []any{"a"}, map[string]any{}, map[string]any{"k": 1}}
	var docs []map[string]any
	docs = append(docs, base)
	for _, c := range cases {
		d := clone(base)
		for ptr, want := range c.Expect {
			var v any
			_ = json.Unmarshal(want, &v)
			d[strings.TrimPrefix(ptr, "/")] = v
		}
		docs = append(docs, d)
		// an output that echoes the input, as the demo simulator does
		var in map[string]any
		_ = json.Unmarshal(c.Input, &in)
		e := clone(d)
		for k, v := range in {
			if _, ok := e[k]; !ok {
				e["text"] = fmt.Sprint(v)
			}
		}
		docs = append(docs, e)
	}
	for name := range s.Properties {
		d := clone(base)
		delete(d, name)
		docs = append(docs, d)
		for _, v := range palette {
			d := clone(base)
			d[name] = v
			docs = append(docs, d)
		}
	}
	out := make([]any, len(docs))
	for i, d := range docs {
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = decode(t, string(raw))
	}
	return out
}

func clone(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func camel(name string) string {
	var b strings.Builder
	for _, part := range strings.Split(name, "-") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}
