package checkexpr_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"

	"github.com/onejob/onejob/internal/jobtype"
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

func issueExamples() []string {
	return []string{`output.s.matches('\d+')`, `output.s == '\u0064123'`, `'\x41' == 'A'`, `output.n + 1 > 0`}
}

func escapeCorpus() []string {
	var out []string
	// every backslash-character pair, in both quotes and raw
	for c := byte(0x20); c < 0x7f; c++ {
		for _, q := range []string{`'`, `"`} {
			out = append(out, q+`\`+string(c)+q, q+`a\`+string(c)+`b`+q, `r`+q+`\`+string(c)+q)
		}
	}
	out = append(out,
		`'\x41'`, `'\X4a'`, `'\x4'`, `'\xg0'`, `'\xff'`, `'\x00'`, `'\x7f'`, `'\x80'`,
		`'\u00e9'`, `'\u00E9'`, `'\u12'`, `'\ud800'`, `'\udfff'`, `'\uffff'`, `'\ufffe'`, `'\u0000'`,
		`'\U0001F600'`, `'\U0010FFFF'`, `'\U00110000'`, `'\U0000d800'`, `'\U0001f60'`, `'\UFFFFFFFF'`,
		`'\000'`, `'\101'`, `'\377'`, `'\400'`, `'\08'`, `'\1'`, `'\12'`, `'\0'`, `'\7777'`,
		`'\\'`, `'\\\\'`, `'a\\'`, `'\\d'`, `'\'`, `'\''`, `"\""`, `'"'`, `"'"`, `'\"'`, `"\'"`,
		`r'\d'`, `R'\n'`, `r"\""`, `r'\'`, `r''`, `R""`, `r'a\\b'`, `r'\u00e9'`,
		`''`, `""`, `'''a'''`, `"""a"""`, `''''`, `'a`, `"a`, `'a"`, `'é'`, `'😀'`, `'\t\n'`,
		`b'a'`, `B"a"`, `br'a'`, `'a' + '\n' + 'b'`, `'tab	here'`,
		"'a\nb'", "'a\rb'", "r'a\nb'", `'\a\b\f\n\r\t\v\\\'\"\?\`+"`"+`'`,
		`output.s.matches('\d+')`, `output.s.matches('\\d+')`, `output.s.matches(r'\d+')`,
		`output.nl.contains('\n')`, `output.nl == 'a\nb'`, `output.nl == 'a\012b'`, `output.nl == 'a\x0ab'`,
		`output.bs == 'a\\d'`, `output.bs == r'a\d'`, `output.dig == r'\d+'`, `output.e == 'h\u00e9llo'`,
		`output.e == 'h\xe9llo'`, `output.e == 'h\351llo'`, `output.emoji == '\U0001F600'`, `output.emoji == '\ud83d\ude00'`,
		`size('\xff')`, `size('\U0001F600')`, `size(r'\n')`, `size('\n')`, `'\x41' == 'A'`, `'\u0064' == 'd'`,
	)
	return out
}

func numberCorpus() []string {
	lits := []string{"0", "007", "1", "-1", "- 1", "--1", "---1", "-(1)", "9223372036854775807", "9223372036854775808",
		"-9223372036854775808", "-9223372036854775809", "--9223372036854775808", "-(-9223372036854775808)",
		"0x0", "0x7fffffffffffffff", "0x8000000000000000", "-0x8000000000000000", "0xFF", "0x", "0X1", "0xg",
		"1u", "1U", "0x1u", "1.", "1.0", ".5", "1.5", "-1.5", "1e3", "1E3", "1e+3", "1e-3", "1e", "1e+", "1.5e3",
		"1.5e", "1e308", "1e309", "-1e309", "1e-400", "1.7976931348623157e308", "0.0", "-0.0", "1.5.5", "1abc",
		"1.size()", "1..5", "00", "01.5",
	}
	var out []string
	for _, l := range lits {
		out = append(out, l, l+" == 1", l+" == 1.0", "output.i == "+l, "output.f < "+l)
	}
	for _, e := range []string{
		"9223372036854775807 + 1", "-9223372036854775808 - 1", "9223372036854775807 * 2", "-9223372036854775808 * -1",
		"-1 * -9223372036854775808", "-9223372036854775808 / -1", "-9223372036854775808 % -1", "-9223372036854775807 - 1",
		"output.n + 1", "output.n - -1", "output.n * 2", "output.n * -1", "output.neg - 1", "output.neg * -1",
		"-output.neg", "-output.n", "output.neg / -1", "output.neg % -1", "output.neg / 1", "output.neg % 1",
		"output.n + output.n", "output.neg + output.neg", "output.n - output.neg", "output.neg - output.n",
		"4611686018427387904 * 2", "4611686018427387904 * -2", "-4611686018427387904 * 2", "3037000500 * 3037000500",
		"-3037000500 * 3037000500", "1 / 0", "1 % 0", "0 / 0", "output.i / output.zero", "output.i % output.zero",
		"7 / 2", "-7 / 2", "7 % -2", "-7 % 2", "1.0 / 0.0", "-1.0 / 0.0", "0.0 / 0.0", "output.f / 0.0",
		"1e308 * 10.0", "1e308 * 10.0 - 1e308 * 10.0", "(1e308 * 10.0 - 1e308 * 10.0) == (1e308 * 10.0 - 1e308 * 10.0)",
		"(0.0/0.0) < 1.0", "(0.0/0.0) != (0.0/0.0)", "[0.0/0.0] == [0.0/0.0]", "(0.0/0.0) in [0.0/0.0]",
		"output.i < (0.0/0.0)", "(0.0/0.0) >= output.i", "output.big == 100000000000000000000.0", "output.big > output.n",
		"output.n == 9223372036854775807.0", "output.n < 9223372036854775807.0", "output.neg == -9223372036854775808.0",
		"output.neg <= -9223372036854775808.0", "output.one == 1", "output.one + 1", "output.one + 1.0", "output.one * 2.0",
		"9007199254740993 == 9007199254740992.0", "output.i == 1.0", "output.f == 1.5", "-0.0 == 0.0", "2 * 3 + 4 * 5",
		"2 + 3 * 4 - 5 / 2 % 3", "10 - 2 - 3", "100 / 10 / 5", "output.i + 1.5", "output.f + 1", "output.f * output.i",
		"output.f - output.f", "output.f % 2.0", "output.i % 2.0", "output.f % output.f", "-output.f", "--output.f",
	} {
		out = append(out, e, e+" == 0", "("+e+") > 0")
	}
	return out
}

// operands for the cross product: one of each kind, as literal and as
// field, plus missing keys.
var operands = []string{
	"1", "-1", "1.5", "0.0", "'a'", "''", "true", "false", "null", "[]", "[1]", "['a', 'b']", "[1, 'a']",
	"output.i", "output.zero", "output.f", "output.one", "output.s", "output.e", "output.b", "output.z",
	"output.tags", "output.nums", "output.m", "output.empty", "output.missing", "output", "output.n",
}

func operatorCorpus() []string {
	var out []string
	for _, op := range []string{"==", "!=", "<", "<=", ">", ">=", "in", "+", "-", "*", "/", "%"} {
		for _, a := range operands {
			for _, b := range operands {
				out = append(out, a+" "+op+" "+b)
			}
		}
	}
	for _, a := range operands {
		out = append(out, "!"+a, "-"+a, "!!"+a, "--"+a, "!!!"+a, "---"+a, "- "+a, "!-"+a, "-!"+a, "size("+a+")", a+".size()")
	}
	out = append(out, "1 == 1 == true", "1 < 2 == true", "1 < 2 < 3", "'a' in ['a'] in [true]", "1 == 1 != false",
		"output.i == output.i == output.b", "[[], [1]] == [['a']]", "[[1], []] == [['a']]", "[[1], ['a']] == [1]",
		"[[1], [output.s]] == [['a']]", "([1] + [output.s]) == ['a']", "(output.tags + [1]) == ['a']", "[] + [1]",
		"([] + [1]) == ['a']", "[1] + [1.0]", "[null] == [1]", "[null, 1] == [1]", "[1, []] == [1]", "[output.s, 1][0] == 1.0",
		"[1, 1][0] == 1.0", "(output.f + 1) == 1.0", "(output.f + 1.0) == 1.0", "-output.s == 1", "(1 in [1]) == 1",
		"[[]][0] == [1]", "[][0]", "[][0] == 1", "output.tags + output.tags", "output.tags + ['c'] == ['a', 'b', 'c']",
		"output.s + output.s", "output.m == {'k': 1}", "output.lom == [output.m]", "[output.m] == output.lom",
		"output.deep == output.deep", "output.deep.a == {'b': {'c': 'x'}}", "output == output", "output in [output]",
		"output.s + 1", "output.i + 'a'", "output.b + output.b", "output.z + output.z", "output.m + output.m",
	)
	return out
}

// composedCorpus applies operators to the results of operators, where the
// static type of the inner result decides what the outer accepts.
func composedCorpus() []string {
	small := []string{"1", "1.5", "'a'", "output.i", "output.f", "output.s", "[1]", "output.tags"}
	var out []string
	for _, inner := range []string{"+", "-", "=="} {
		for _, a := range small {
			for _, b := range small {
				for _, outer := range []string{"==", "<", "+", "in"} {
					for _, c := range small {
						out = append(out, "("+a+" "+inner+" "+b+") "+outer+" "+c, c+" "+outer+" ("+a+" "+inner+" "+b+")")
					}
				}
			}
		}
	}
	return out
}

// randomCorpus draws n expressions from the subset's grammar (and a little
// beyond it), deterministically.
func randomCorpus(n int) []string {
	r := rand.New(rand.NewPCG(11, 3))
	fields := []string{"output.i", "output.f", "output.s", "output.b", "output.z", "output.tags", "output.m", "output.missing",
		"output.n", "output.neg", "output.e", "output.nums", "output.lom", "output.deep", "output.re", "output.one"}
	atoms := append(slices.Clone(operands), "output.m.k", "output.tags[0]", "output.deep.a", "output.lom[0]", "output['s']",
		"input.prompt", "input.n", "'é'", "r'\\d'", "'\\x41'", "-9223372036854775808", "9223372036854775807", "0x10",
		"1e3", "output.nums[1]", "output.emoji", "output.no", "output.big", "output.neg")
	var gen func(d int) string
	gen = func(d int) string {
		if d == 0 || r.IntN(4) == 0 {
			if r.IntN(3) > 0 {
				return fields[r.IntN(len(fields))]
			}
			return atoms[r.IntN(len(atoms))]
		}
		switch r.IntN(9) {
		case 0:
			return []string{"!", "-", "!!", "--"}[r.IntN(4)] + gen(d-1)
		case 1:
			return "size(" + gen(d-1) + ")"
		case 2:
			return gen(d-1) + "." + []string{"contains", "startsWith", "endsWith", "matches"}[r.IntN(4)] + "(" + gen(d-1) + ")"
		case 3:
			return gen(d-1) + "[" + gen(d-1) + "]"
		case 4:
			return "has(" + gen(d-1) + "." + []string{"k", "s", "a", "missing"}[r.IntN(4)] + ")"
		case 5:
			return "[" + gen(d-1) + ", " + gen(d-1) + "]"
		case 6:
			return "(" + gen(d-1) + ")"
		}
		ops := []string{"==", "!=", "<", "<=", ">", ">=", "in", "+", "-", "*", "/", "%", "&&", "||"}
		return gen(d-1) + " " + ops[r.IntN(len(ops))] + " " + gen(d-1)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = gen(4)
	}
	return out
}

func logicCorpus() []string {
	terms := []string{"true", "false", "output.b", "output.no", "output.missing == 1", "output.i", "(1/0 == 1)", "output.z", "output.s.x == 1"}
	var out []string
	for _, op := range []string{"&&", "||"} {
		for _, a := range terms {
			for _, b := range terms {
				out = append(out, a+" "+op+" "+b)
				for _, c := range terms[:5] {
					out = append(out, a+" "+op+" "+b+" "+op+" "+c, a+" && "+b+" || "+c, a+" || "+b+" && "+c)
				}
			}
		}
	}
	for _, a := range terms {
		out = append(out, "!"+a, "!("+a+")", "!!("+a+")", "1 || "+a, a+" || 1", "'a' && "+a)
	}
	long := strings.Repeat("output.missing == 1 || ", 100) + "true"
	out = append(out, long, strings.Repeat("true && ", 200)+"output.missing", strings.Repeat("output.b && ", 300)+"output.b")
	return out
}

func accessCorpus() []string {
	var out []string
	containers := []string{"output", "output.m", "output.tags", "output.nums", "output.s", "output.i", "output.z",
		"output.empty", "output.deep", "output.lom", "output.missing", "[1, 2]", "['a']", "[]", "'abc'", "1", "null", "[output.m]"}
	keys := []string{"0", "1", "2", "-1", "5", "1.0", "1.5", "-0.0", "1e300", "'k'", "'s'", "'missing'", "'a'", "true",
		"null", "[1]", "output.i", "output.f", "output.one", "output.s", "output.z", "output.tags", "output.m",
		"output.missing", "1/0", "0.0/0.0", "9223372036854775807", "-9223372036854775808"}
	for _, c := range containers {
		for _, k := range keys {
			out = append(out, c+"["+k+"]")
		}
		for _, f := range []string{"k", "s", "missing", "if", "size", "x", "a"} {
			out = append(out, c+"."+f, "has("+c+"."+f+")")
		}
		for _, k := range keys[:14] {
			out = append(out, k+" in "+c)
		}
	}
	out = append(out, "output.m.k", "output.m.if", "output.m['if']", "output['m']['k']", "output.deep.a.b.c",
		"output.deep['a'].b['c']", "output.deep.a.b.c.d", "output.deep.a.x.c", "has(output.deep.a.b)", "has(output.deep.a.b.c)",
		"has(output.deep.a.b.c.d)", "has(output.deep.x.b)", "output.lom[0].k", "output.lom[0]['k']", "has(output.lom[0].k)",
		"has(output.lom[1].k)", "output.tags[output.i]", "output.tags[output.i - 1]", "output.tags[output.one]",
		"output.tags[0] == 'a'", "output.tags[1.0]", "output.m.k == 1", "output['s']", "output.in", "output.true",
		"output.null", "output.`s`", ".output.s", "output..s", "output.", "output[", "output[]", "output['s'", "has(output)",
		"has(output['s'])", "has(output.s, 1)", "has()", "has(output.s.size())", "has(1)", "has('a'.b)", "has([1].a)",
		"[output.m][0].k", "has([output.m][0].k)", "[output.m].k", "(output.s + '').x", "'abc'.x", "null.x", "true.x",
		"input.prompt", "input.prompt == 'hi'", "input.n + output.i", "input.missing", "has(input.prompt)", "input",
		"if", "as", "output.if.x", "in", "size", "has", "outputs", "Output", "output.m.k.k", "output[output.s]",
		"output[output.i]", "output.m[output.tags]", "output.tags[output.z]", "output.tags[output.m]", "output.s[output.z]",
	)
	return out
}

func functionCorpus() []string {
	var out []string
	args := []string{"'a'", "''", "'d'", "'3'", "'é'", "'\\\\d+'", "r'\\d+'", "'['", "'^d[0-9]+$'", "'(?i)D123'", "1", "null",
		"output.s", "output.e", "output.re", "output.dig", "output.i", "output.z", "output.tags", "output.missing"}
	recvs := []string{"'abc'", "''", "'héllo'", "output.s", "output.e", "output.emoji", "output.nl", "output.i",
		"output.z", "output.tags", "output.m", "output.missing", "1", "[1]"}
	for _, f := range []string{"contains", "startsWith", "endsWith", "matches"} {
		for _, r := range recvs {
			for _, a := range args {
				out = append(out, r+"."+f+"("+a+")")
			}
			out = append(out, r+"."+f+"()", r+"."+f+"('a', 'b')", f+"("+r+", 'a')")
		}
	}
	for _, r := range recvs {
		out = append(out, "size("+r+")", r+".size()", r+".size(1)", "size("+r+") == 3", "size("+r+", 1)")
	}
	out = append(out, "size()", "size('héllo') == 5", "size('😀') == 1", "'😀'.size()", "size(output.e)", "size(output.emoji)",
		"size(output)", "size(output.m) + size(output.tags)", "size([1, [2, 3]])", "output.tags.all(t, t != '')",
		"output.tags.exists(t, t == 'a')", "output.tags.exists_one(t, t == 'a')", "output.tags.map(t, t)",
		"output.tags.filter(t, t == 'a')", "int(1.5) == 1", "string(1)", "type(1) == int", "dyn(1) == 1",
		"output.s.lowerAscii()", "matches(output.s, 'd')", "output.tags.contains('a')", "['a'].contains('a')",
		"output.s.matches(output.s + '[')", "output.s.matches(output.re)", "output.s.matches(output.dig)",
		"output.e.matches('^h.llo$')", "output.e.matches('^h..llo$')", "output.s.matches('')", "output.s.contains(output.s)",
	)
	return out
}

func syntaxCorpus() []string {
	deep := func(n int, open, close string) string {
		return strings.Repeat(open, n) + "output.b" + strings.Repeat(close, n)
	}
	out := []string{"", " ", "output.b // comment", "output.b // comment\n && true", "output.b\t&&\ntrue", "output.b\f|| false",
		"output .b", "output. b", "output.s.contains ('d')", "size (output.s)", "has (output.s)", "has( output.s )",
		"output.b ? 1 : 2", "{'a': 1}", "{}", "output.b &", "output.b |", "output.b = true", "output.b ==", "== output.b",
		"(output.b", "output.b)", "[1, 2,]", "[1,,2]", "[,]", "[", "]", "output.tags[0", "output.b;", "#", "@", "$",
		"output.b && && true", "!", "-", "output.b.", "é", "output.é", "1 2", "'a' 'b'", "output.b output.b",
		"(((output.b)))", "[[[[1]]]] == [[[[1]]]]", deep(30, "(", ")"), deep(31, "(", ")"), deep(40, "(", ")"),
		deep(100, "(", ")"), deep(300, "(", ")"), deep(30, "[", "]"), deep(35, "[", "]"), deep(31, "!", ""),
		deep(300, "!", ""), deep(301, "-", ""), strings.Repeat("output.deep.a.b.c == ", 40) + "1",
		strings.Repeat("1 + ", 40) + "1", strings.Repeat("1 + ", 300) + "1", strings.Repeat("'a' + ", 20) + "'a'",
		"output.b" + strings.Repeat(" ", 20000), strings.Repeat("output.b || ", 2000) + "true",
	}
	return out
}

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
