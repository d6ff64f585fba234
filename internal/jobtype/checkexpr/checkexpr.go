// Package checkexpr evaluates job type checks written in a small subset of
// CEL: field access, literals, lists, `! && || == != < <= > >= in + -`, and
// the string/list functions contains, startsWith, endsWith, matches and
// size. Checks are boolean rules over an answer ("priority 1 ⇒ needs_human":
// `output.priority != 1 || output.needs_human`), which this subset covers;
// the full cel-go runtime would more than double the run function's binary.
//
// Semantics follow CEL: reading a missing field is an error (the check
// fails as "could not evaluate"), && and || absorb an error when the other
// side decides the result, comparing values of different kinds is false
// for == and an error for ordering.
package checkexpr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Compile parses expr over the named variables and returns its evaluator.
// It matches jobtype.CompileFunc.
func Compile(expr string, vars ...string) (func(map[string]any) (any, error), error) {
	p := &parser{src: expr, vars: map[string]bool{}}
	for _, v := range vars {
		p.vars[v] = true
	}
	if err := p.lex(); err != nil {
		return nil, err
	}
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.toks) {
		return nil, fmt.Errorf("unexpected %q at offset %d", p.toks[p.pos].text, p.toks[p.pos].off)
	}
	if !maybeBool(n) {
		return nil, errors.New("expression must be boolean")
	}
	return func(env map[string]any) (any, error) { return n.eval(env) }, nil
}

type tokKind int

const (
	tIdent tokKind = iota
	tNumber
	tString
	tOp
)

type token struct {
	kind tokKind
	text string
	off  int
	val  any
}

type parser struct {
	src  string
	toks []token
	pos  int
	vars map[string]bool
}

var ops = []string{"||", "&&", "==", "!=", "<=", ">=", "<", ">", "!", "(", ")", "[", "]", ".", ",", "+", "-"}

func (p *parser) lex() error {
	s := p.src
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'' || c == '"':
			j := i + 1
			var b strings.Builder
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
					switch s[j] {
					case 'n':
						b.WriteByte('\n')
					case 't':
						b.WriteByte('\t')
					case 'r':
						b.WriteByte('\r')
					default:
						b.WriteByte(s[j])
					}
					continue
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return fmt.Errorf("unterminated string at offset %d", i)
			}
			p.toks = append(p.toks, token{kind: tString, text: s[i : j+1], off: i, val: b.String()})
			i = j + 1
		case c >= '0' && c <= '9':
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || s[j] == 'e' || s[j] == 'E') {
				j++
			}
			text := s[i:j]
			var v any
			if n, err := strconv.ParseInt(text, 10, 64); err == nil {
				v = n
			} else if f, err := strconv.ParseFloat(text, 64); err == nil {
				v = f
			} else {
				return fmt.Errorf("bad number %q at offset %d", text, i)
			}
			p.toks = append(p.toks, token{kind: tNumber, text: text, off: i, val: v})
			i = j
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			p.toks = append(p.toks, token{kind: tIdent, text: s[i:j], off: i})
			i = j
		default:
			matched := false
			for _, op := range ops {
				if strings.HasPrefix(s[i:], op) {
					p.toks = append(p.toks, token{kind: tOp, text: op, off: i})
					i += len(op)
					matched = true
					break
				}
			}
			if !matched {
				return fmt.Errorf("unexpected character %q at offset %d", c, i)
			}
		}
	}
	return nil
}

func (p *parser) peek(op string) bool {
	return p.pos < len(p.toks) && p.toks[p.pos].kind != tString && p.toks[p.pos].text == op
}

func (p *parser) accept(op string) bool {
	if p.peek(op) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) expect(op string) error {
	if !p.accept(op) {
		if p.pos < len(p.toks) {
			return fmt.Errorf("want %q at offset %d, got %q", op, p.toks[p.pos].off, p.toks[p.pos].text)
		}
		return fmt.Errorf("want %q at the end", op)
	}
	return nil
}

func (p *parser) expr() (node, error) { return p.or() }

func (p *parser) or() (node, error) {
	l, err := p.and()
	for err == nil && p.accept("||") {
		var r node
		if r, err = p.and(); err == nil {
			l = logic{or: true, l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) and() (node, error) {
	l, err := p.rel()
	for err == nil && p.accept("&&") {
		var r node
		if r, err = p.rel(); err == nil {
			l = logic{l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) rel() (node, error) {
	l, err := p.add()
	if err != nil {
		return nil, err
	}
	for _, op := range []string{"==", "!=", "<=", ">=", "<", ">", "in"} {
		if p.accept(op) {
			r, err := p.add()
			if err != nil {
				return nil, err
			}
			return binary{op: op, l: l, r: r}, nil
		}
	}
	return l, nil
}

func (p *parser) add() (node, error) {
	l, err := p.unary()
	for err == nil && (p.peek("+") || p.peek("-")) {
		op := p.toks[p.pos].text
		p.pos++
		var r node
		if r, err = p.unary(); err == nil {
			l = binary{op: op, l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) unary() (node, error) {
	if p.accept("!") {
		n, err := p.unary()
		return not{n}, err
	}
	if p.accept("-") {
		n, err := p.unary()
		return binary{op: "-", l: lit{int64(0)}, r: n}, err
	}
	return p.postfix()
}

func (p *parser) postfix() (node, error) {
	n, err := p.primary()
	for err == nil {
		switch {
		case p.accept("."):
			if p.pos >= len(p.toks) || p.toks[p.pos].kind != tIdent {
				return nil, errors.New("want a field or function name after '.'")
			}
			name := p.toks[p.pos].text
			p.pos++
			if p.accept("(") {
				var args []node
				if args, err = p.args(); err == nil {
					n, err = method(name, n, args)
				}
			} else {
				n = field{of: n, name: name}
			}
		case p.accept("["):
			var idx node
			if idx, err = p.expr(); err == nil {
				err = p.expect("]")
				n = index{of: n, at: idx}
			}
		default:
			return n, nil
		}
	}
	return n, err
}

func (p *parser) args() ([]node, error) {
	var out []node
	if p.accept(")") {
		return out, nil
	}
	for {
		a, err := p.expr()
		if err != nil {
			return nil, err
		}
		out = append(out, a)
		if p.accept(")") {
			return out, nil
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
	}
}

func (p *parser) primary() (node, error) {
	if p.pos >= len(p.toks) {
		return nil, errors.New("unexpected end of expression")
	}
	t := p.toks[p.pos]
	p.pos++
	switch t.kind {
	case tNumber, tString:
		return lit{t.val}, nil
	case tIdent:
		switch t.text {
		case "true":
			return lit{true}, nil
		case "false":
			return lit{false}, nil
		case "null":
			return lit{nil}, nil
		case "size":
			if err := p.expect("("); err != nil {
				return nil, err
			}
			args, err := p.args()
			if err != nil {
				return nil, err
			}
			if len(args) != 1 {
				return nil, errors.New("size takes one argument")
			}
			return call{name: "size", recv: args[0]}, nil
		}
		if !p.vars[t.text] {
			return nil, fmt.Errorf("undeclared reference to %q", t.text)
		}
		return variable(t.text), nil
	}
	switch t.text {
	case "(":
		n, err := p.expr()
		if err != nil {
			return nil, err
		}
		return n, p.expect(")")
	case "[":
		var items []node
		if !p.accept("]") {
			for {
				it, err := p.expr()
				if err != nil {
					return nil, err
				}
				items = append(items, it)
				if p.accept("]") {
					break
				}
				if err := p.expect(","); err != nil {
					return nil, err
				}
			}
		}
		return list(items), nil
	}
	return nil, fmt.Errorf("unexpected %q at offset %d", t.text, t.off)
}

func method(name string, recv node, args []node) (node, error) {
	want := map[string]int{"contains": 1, "startsWith": 1, "endsWith": 1, "matches": 1, "size": 0}
	n, ok := want[name]
	if !ok {
		return nil, fmt.Errorf("unknown function %q", name)
	}
	if len(args) != n {
		return nil, fmt.Errorf("%s takes %d argument(s)", name, n)
	}
	c := call{name: name, recv: recv}
	if n == 1 {
		c.arg = args[0]
	}
	return c, nil
}

// maybeBool rejects, before any output is seen, expressions that can never
// yield a bool; a field read may (its type is the answer's).
func maybeBool(n node) bool {
	switch x := n.(type) {
	case lit:
		_, ok := x.v.(bool)
		return ok
	case list:
		return false
	case binary:
		return x.op != "+" && x.op != "-"
	case call:
		return x.name != "size"
	}
	return true
}
