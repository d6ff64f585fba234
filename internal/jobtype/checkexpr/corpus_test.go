package checkexpr_test

import (
	"math/rand/v2"
	"slices"
	"strings"
)

// The differential test's corpora (differential_test.go runs them): the
// issue's examples, escapes, numbers, operators, compositions, random
// expressions, logic, access, functions and syntax.

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
