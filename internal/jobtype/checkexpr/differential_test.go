package checkexpr_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"

	"github.com/onejob/onejob/internal/jobtype/checkexpr"
)

// The differential test holds checkexpr to its rule: every expression it
// compiles means what it means in cel-go (variables declared as
// map(string, dyn), JSON decoded by checkexpr.Decode as the callers do):
// the same value, or an error of the same class. checkexpr may refuse at
// compile time what it does not cover; it may never accept what cel-go
// refuses.

// outcome is what one evaluator made of one expression in one environment.
type outcome struct {
	refused bool   // at compile time
	why     string // the compile error
	value   any    // when evaluation succeeded
	class   string // when evaluation failed: the error class
	msg     string // the error message
}

func (o outcome) String() string {
	switch {
	case o.refused:
		return "refused: " + o.why
	case o.class != "":
		return fmt.Sprintf("error %s (%s)", o.class, o.msg)
	}
	return fmt.Sprintf("value %#v", o.value)
}

// celClass sorts cel-go's evaluation errors into checkexpr's classes.
func celClass(msg string) string {
	for _, c := range []struct{ class, sub string }{
		{"NoSuchKey", "no such key"},
		{"NoSuchOverload", "no such overload"},
		{"Overflow", "integer overflow"},
		{"DivideByZero", "division by zero"},
		{"DivideByZero", "modulus by zero"},
		{"IndexOutOfRange", "out of bounds"},
		{"IndexOutOfRange", "out of range"},
		{"BadIndex", "unsupported index"},
		{"BadIndex", "invalid qualifier"},
		{"BadRegex", "error parsing regexp"},
	} {
		if strings.Contains(msg, c.sub) {
			return c.class
		}
	}
	return "Unclassified"
}

func checkexprClass(err error) string {
	for _, c := range []struct {
		class string
		err   error
	}{
		{"NoSuchKey", checkexpr.ErrNoSuchKey},
		{"NoSuchOverload", checkexpr.ErrNoSuchOverload},
		{"Overflow", checkexpr.ErrOverflow},
		{"DivideByZero", checkexpr.ErrDivideByZero},
		{"IndexOutOfRange", checkexpr.ErrIndexOutOfRange},
		{"BadIndex", checkexpr.ErrBadIndex},
		{"BadRegex", checkexpr.ErrBadRegex},
	} {
		if errors.Is(err, c.err) {
			return c.class
		}
	}
	return "Unclassified"
}

// oracle is cel-go over a fixed set of variables.
type oracle struct{ env *cel.Env }

func newOracle(t *testing.T, vars ...string) oracle {
	t.Helper()
	opts := make([]cel.EnvOption, len(vars))
	for i, v := range vars {
		opts[i] = cel.Variable(v, cel.MapType(cel.StringType, cel.DynType))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return oracle{env}
}

func (o oracle) run(expr string, envs []map[string]any) []outcome {
	out := make([]outcome, len(envs))
	ast, iss := o.env.Compile(expr)
	if iss.Err() != nil {
		return fill(out, outcome{refused: true, why: iss.Err().Error()})
	}
	prg, err := o.env.Program(ast)
	if err != nil {
		return fill(out, outcome{refused: true, why: err.Error()})
	}
	for i, env := range envs {
		v, _, err := prg.Eval(env)
		if err != nil {
			out[i] = outcome{class: celClass(err.Error()), msg: err.Error()}
			continue
		}
		out[i] = outcome{value: native(v)}
	}
	return out
}

func runCheckexpr(compile func(string, ...string) (func(map[string]any) (any, error), error), expr string, vars []string, envs []map[string]any) []outcome {
	out := make([]outcome, len(envs))
	f, err := compile(expr, vars...)
	if err != nil {
		return fill(out, outcome{refused: true, why: err.Error()})
	}
	for i, env := range envs {
		v, err := f(env)
		if err != nil {
			out[i] = outcome{class: checkexprClass(err), msg: err.Error()}
			continue
		}
		out[i] = outcome{value: v}
	}
	return out
}

func fill(out []outcome, o outcome) []outcome {
	for i := range out {
		out[i] = o
	}
	return out
}

// native turns a cel-go value into the JSON-like values checkexpr returns.
func native(v ref.Val) any {
	switch x := v.(type) {
	case types.Bool:
		return bool(x)
	case types.Int:
		return int64(x)
	case types.Double:
		return float64(x)
	case types.String:
		return string(x)
	case types.Null:
		return nil
	case traits.Mapper:
		m := map[string]any{}
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			m[fmt.Sprint(k.Value())] = native(x.Get(k))
		}
		return m
	case traits.Lister:
		l := []any{}
		for it := x.Iterator(); it.HasNext() == types.True; {
			l = append(l, native(it.Next()))
		}
		return l
	}
	return fmt.Sprintf("unexpected cel value %T %v", v, v)
}

// same compares values exactly: kinds must match (1 is not 1.0), NaN is NaN,
// and -0.0 is not 0.0.
func same(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && (x == y && math.Signbit(x) == math.Signbit(y) || math.IsNaN(x) && math.IsNaN(y))
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && allSame(x, y)
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !same(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func allSame(x, y []any) bool {
	for i := range x {
		if !same(x[i], y[i]) {
			return false
		}
	}
	return true
}

// agree reports whether checkexpr's outcome is allowed given cel-go's.
func agree(ours, cel outcome) bool {
	switch {
	case ours.refused:
		return true
	case cel.refused:
		return false
	case ours.class != "" || cel.class != "":
		return ours.class == cel.class && ours.class != "Unclassified"
	}
	return same(ours.value, cel.value)
}

// tally counts what a corpus exercised, so that a corpus that checkexpr
// refuses wholesale cannot pass unnoticed.
type tally struct{ exprs, refused, celOnly, values, errors int }

func (s *tally) add(os []outcome) {
	s.exprs++
	if len(os) > 0 && os[0].refused {
		s.refused++
		return
	}
	for _, o := range os {
		if o.class != "" {
			s.errors++
		} else {
			s.values++
		}
	}
}

// differ runs exprs through both and reports every disagreement.
// CHECKEXPR_LIST_REFUSED=1 logs what checkexpr refuses and cel-go accepts:
// the subset's gaps, each one safe.
func differ(t *testing.T, compile func(string, ...string) (func(map[string]any) (any, error), error), vars []string, exprs []string, envs []map[string]any) tally {
	t.Helper()
	o := newOracle(t, vars...)
	var s tally
	for _, expr := range exprs {
		ours := runCheckexpr(compile, expr, vars, envs)
		theirs := o.run(expr, envs)
		s.add(ours)
		if ours[0].refused && !theirs[0].refused {
			s.celOnly++
			if os.Getenv("CHECKEXPR_LIST_REFUSED") != "" {
				t.Logf("refused by checkexpr, accepted by cel-go: %s (%s)", expr, ours[0].why)
			}
		}
		for i := range envs {
			if !agree(ours[i], theirs[i]) {
				env, _ := json.Marshal(envs[i])
				t.Errorf("%s\n  checkexpr: %v\n  cel-go:    %v\n  env: %s", expr, ours[i], theirs[i], env)
				break
			}
		}
	}
	return s
}

// corpusDoc is the output the generated corpus reads: every JSON kind, the
// int64 limits, an integral double (1.0 decodes as a double), unicode.
const corpusDoc = `{"s": "d123", "n": 9223372036854775807, "neg": -9223372036854775808, "i": 1, "zero": 0,
	"f": 1.5, "one": 1.0, "big": 1e20, "z": null, "b": true, "no": false, "e": "héllo", "emoji": "😀",
	"empty_s": "", "nl": "a\nb", "bs": "a\\d", "tags": ["a", "b"], "nums": [1, 2.5], "m": {"k": 1, "if": 2},
	"empty": {}, "deep": {"a": {"b": {"c": "x"}}}, "lom": [{"k": 1}], "re": "[", "dig": "\\d+"}`

func decode(t *testing.T, doc string) any {
	t.Helper()
	v, err := checkexpr.Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDifferentialGenerated(t *testing.T) {
	t.Parallel()
	envs := []map[string]any{{"output": decode(t, corpusDoc), "input": decode(t, `{"prompt": "hi", "n": 2}`)}}
	vars := []string{"input", "output"}
	tests := []struct {
		name  string
		exprs []string
		// least values and errors both must agree on (against a corpus
		// refused wholesale)
		minValues, minErrors int
	}{
		{"IssueExamples", issueExamples(), 2, 1},
		{"Escapes", escapeCorpus(), 250, 0},
		{"Numbers", numberCorpus(), 150, 80},
		{"Operators", operatorCorpus(), 2000, 3000},
		{"Composed", composedCorpus(), 500, 1000},
		{"Logic", logicCorpus(), 150, 80},
		{"Access", accessCorpus(), 200, 400},
		{"Functions", functionCorpus(), 350, 400},
		{"Syntax", syntaxCorpus(), 15, 1},
		{"Random", randomCorpus(4000), 1000, 400},
	}
	var total tally
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := differ(t, checkexpr.CompileValue, vars, tc.exprs, envs)
			t.Logf("%d expressions: %d refused by checkexpr (%d of them accepted by cel-go); of the rest %d values and %d errors agree with cel-go",
				s.exprs, s.refused, s.celOnly, s.values, s.errors)
			if s.values < tc.minValues || s.errors < tc.minErrors {
				t.Errorf("corpus too thin: %d values (want ≥ %d), %d errors (want ≥ %d)", s.values, tc.minValues, s.errors, tc.minErrors)
			}
		})
		total.exprs += len(tc.exprs)
	}
	t.Logf("generated corpus: %d expressions", total.exprs)
}

// TestIssueExamples pins the three divergences issue 11 names.
func TestIssueExamples(t *testing.T) {
	t.Parallel()
	env := []map[string]any{{"output": decode(t, corpusDoc)}}
	tests := []struct {
		name, expr string
		want       outcome // cel-go's and ours
	}{
		{"BackslashDInMatches", `output.s.matches('\d+')`, outcome{refused: true}},
		{"EscapedBackslashDInMatches", `output.s.matches('\\d+')`, outcome{value: true}},
		{"RawStringInMatches", `output.s.matches(r'\d+')`, outcome{value: true}},
		{"UnicodeEscape", `output.s == '\u0064123'`, outcome{value: true}},
		{"HexEscape", `'\x41' == 'A'`, outcome{value: true}},
		{"Int64Overflow", `output.n + 1 > 0`, outcome{class: "Overflow"}},
	}
	o := newOracle(t, "output")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ours := runCheckexpr(checkexpr.Compile, tc.expr, []string{"output"}, env)[0]
			theirs := o.run(tc.expr, env)[0]
			for who, got := range map[string]outcome{"checkexpr": ours, "cel-go": theirs} {
				if got.refused != tc.want.refused || got.class != tc.want.class || !same(got.value, tc.want.value) {
					t.Errorf("%s: %s = %v, want %v", who, tc.expr, got, tc.want)
				}
			}
		})
	}
}
