// Package checkexpr evaluates job type checks written in a subset of CEL:
// field access (`output.a.b`, `output['a']`, `list[0]`), `has(x.f)`,
// literals (int, double, string, raw string, bool, null, lists), the
// operators `! - * / % + < <= > >= == != in && ||`, and the functions
// size, contains, startsWith, endsWith and matches. Checks are boolean
// rules over an answer ("priority 1 ⇒ needs_human":
// `output.priority != 1 || output.needs_human`), which this subset covers;
// the full cel-go runtime would add about 8 MB to every function binary.
//
// The rule is: every expression Compile accepts means what it means in CEL
// (cel-go, with each variable declared as map(string, dyn) and JSON numbers
// decoded as int64 when integral, float64 otherwise): the same value, or an
// error of the same class (errors.Is with the Err* values below). What the
// subset does not cover is refused by Compile, never approximated. A
// differential test against cel-go holds this. In particular:
//
//   - Strings take CEL's escapes exactly (\\ \' \" \` \? \a \b \f \n \r \t \v,
//     \xHH, \uHHHH, \UHHHHHHHH, octal \NNN) and raw strings r'...'; any other
//     escape, such as '\d', is refused: write '\\d' or r'\d'.
//   - int arithmetic that overflows int64 is an error, as is integer division
//     or modulus by zero; int and double never mix in arithmetic.
//   - Types are checked as CEL's checker does: `1 == 'a'`, `1 + 1.0`,
//     `size(1)` or `output[1]` are refused; over fields (dyn) the mismatch is
//     an evaluation error (ErrNoSuchOverload), or false for ==.
//   - `in` works on lists (membership by CEL's equality) and maps (key
//     presence); has(x.f) tests presence of a key, so optional fields can be
//     checked. list.contains is not CEL and is refused (use `in`).
//   - Refused: uint, bytes and triple-quoted literals, map literals, ?:,
//     macros (all, exists, map, filter), other functions, and expressions
//     nested more than maxDepth deep or longer than maxLen bytes.
//
// Reading a missing field is an error (the check fails as "could not
// evaluate"); && and || absorb an error (or a non-bool) on one side when
// the other side decides the result; == between values of different kinds
// is false, ordering them is an error.
package checkexpr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Evaluation error classes; each matches a class of cel-go runtime errors.
var (
	// ErrNoSuchKey: a field or map key that is not there ("no such key").
	ErrNoSuchKey = errors.New("no such key")
	// ErrNoSuchOverload: an operator or function applied to values of
	// kinds it does not take, e.g. a string field plus an int.
	ErrNoSuchOverload = errors.New("no such overload")
	// ErrOverflow: int64 arithmetic overflow.
	ErrOverflow = errors.New("integer overflow")
	// ErrDivideByZero: integer division or modulus by zero.
	ErrDivideByZero = errors.New("division by zero")
	// ErrIndexOutOfRange: a list index outside the list.
	ErrIndexOutOfRange = errors.New("index out of range")
	// ErrBadIndex: a list indexed by a string, bool or non-integral double,
	// or anything indexed by null, a list or a map.
	ErrBadIndex = errors.New("invalid index")
	// ErrBadRegex: a pattern computed at evaluation time that is not RE2.
	ErrBadRegex = errors.New("invalid regular expression")
)

const (
	// maxDepth bounds nesting, well inside cel-go's parser limit (250).
	maxDepth = 32
	// maxLen bounds the source, well inside cel-go's (100,000 code points).
	maxLen = 10_000
)

// Compile parses and type-checks expr over the named variables (each a JSON
// object, map(string, dyn) in CEL terms) and returns its evaluator.
// Its signature is jobtype's compileFunc.
func Compile(expr string, vars ...string) (func(map[string]any) (any, error), error) {
	return compile(expr, true, vars...)
}

// compile is Compile; boolean=false admits any result type (for tests that
// compare values with cel-go).
func compile(expr string, boolean bool, vars ...string) (func(map[string]any) (any, error), error) {
	if len(expr) > maxLen {
		return nil, fmt.Errorf("expression longer than %d bytes", maxLen)
	}
	if !utf8.ValidString(expr) {
		return nil, errors.New("expression is not valid UTF-8")
	}
	p := &parser{vars: map[string]bool{}}
	for _, v := range vars {
		p.vars[v] = true
	}
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	p.toks = toks
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.toks) {
		return nil, fmt.Errorf("unexpected %q at offset %d", p.toks[p.pos].text, p.toks[p.pos].off)
	}
	if depth(n) > maxDepth {
		return nil, fmt.Errorf("expression nested more than %d deep", maxDepth)
	}
	t, err := check(n)
	if err != nil {
		return nil, err
	}
	if boolean && !boolish(t) {
		return nil, fmt.Errorf("expression must be boolean, not %s", t)
	}
	return func(env map[string]any) (any, error) { return n.eval(env) }, nil
}

// Decode reads JSON into the values checks evaluate over: integral numbers
// become int64 (so `output.priority == 1` compares ints), other numbers
// float64, as a JSON number is an int or a double in CEL.
func Decode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return numbers(v), nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}
