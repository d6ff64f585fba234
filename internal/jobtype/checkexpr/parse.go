package checkexpr

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

type parser struct {
	toks []token
	pos  int
	vars map[string]bool
	nest int // open brackets and parentheses
}

// Word lists, space-separated (smaller in a binary than maps).
const (
	// reserved: CEL's reserved words, refused as names of variables and
	// functions (as fields they are allowed: output.if).
	reserved = " as break const continue else for function if import let loop package namespace return var void while "
	// keywords: tokens of their own in CEL, never names.
	keywords = " true false null in "
	macros   = " all exists exists_one map filter "
)

func listed(list, word string) bool { return strings.Contains(list, " "+word+" ") }

func (p *parser) peekOp(op string) bool {
	return p.pos < len(p.toks) && p.toks[p.pos].kind == tokOp && p.toks[p.pos].text == op
}

func (p *parser) accept(op string) bool {
	if p.peekOp(op) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) acceptKeyword(kw string) bool {
	if p.pos < len(p.toks) && p.toks[p.pos].kind == tokIdent && p.toks[p.pos].text == kw {
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

// The grammar is CEL's, without ?: and map or message literals:
//
//	expr   = and {"||" and}      and  = rel {"&&" rel}
//	rel    = add {relop add}     add  = mul {("+"|"-") mul}
//	mul    = unary {("*"|"/"|"%") unary}
//	unary  = member | "!"{"!"} member | "-"{"-"} member
//	member = primary {"." name | "." name "(" args ")" | "[" expr "]"}
//
// Like CEL's parser, an even run of ! or - is dropped (`!!x` is x), and a -
// directly before a number is part of the literal.
func (p *parser) expr() (node, error) {
	return p.logic(true)
}

// nested parses an expression inside brackets or parentheses, which the
// AST does not show but cel-go's parser counts towards its limit.
func (p *parser) nested() (node, error) {
	if p.nest++; p.nest > maxDepth {
		return nil, fmt.Errorf("expression nested more than %d deep", maxDepth)
	}
	defer func() { p.nest-- }()
	return p.expr()
}

func (p *parser) logic(or bool) (node, error) {
	op, next := "||", func() (node, error) { return p.logic(false) }
	if !or {
		op, next = "&&", p.rel
	}
	first, err := next()
	if err != nil {
		return nil, err
	}
	terms := []node{first}
	for p.accept(op) {
		n, err := next()
		if err != nil {
			return nil, err
		}
		terms = append(terms, n)
	}
	if len(terms) == 1 {
		return first, nil
	}
	return logic{or: or, terms: terms}, nil
}

func (p *parser) rel() (node, error) {
	l, err := p.add()
	for err == nil {
		op := ""
		for _, o := range []string{"==", "!=", "<=", ">=", "<", ">"} {
			if p.accept(o) {
				op = o
				break
			}
		}
		if op == "" && p.acceptKeyword("in") {
			op = "in"
		}
		if op == "" {
			return l, nil
		}
		var r node
		if r, err = p.add(); err == nil {
			l = binary{op: op, l: l, r: r}
		}
	}
	return nil, err
}

func (p *parser) add() (node, error) {
	l, err := p.mul()
	for err == nil && (p.peekOp("+") || p.peekOp("-")) {
		op := p.toks[p.pos].text
		p.pos++
		var r node
		if r, err = p.mul(); err == nil {
			l = binary{op: op, l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) mul() (node, error) {
	l, err := p.unary()
	for err == nil && (p.peekOp("*") || p.peekOp("/") || p.peekOp("%")) {
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
	for _, op := range []string{"!", "-"} {
		if !p.peekOp(op) || op == "-" && p.signedNumber() {
			continue
		}
		n := 0
		for p.accept(op) {
			n++
		}
		m, err := p.member()
		if err != nil || n%2 == 0 {
			return m, err
		}
		if op == "!" {
			return not{m}, nil
		}
		return neg{m}, nil
	}
	return p.member()
}

// signedNumber reports whether the next tokens are "-" and a number: a
// negative literal in CEL (so -9223372036854775808 is an int).
func (p *parser) signedNumber() bool {
	return p.peekOp("-") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tokNumber
}

func (p *parser) member() (node, error) {
	n, err := p.primary()
	for err == nil {
		switch {
		case p.accept("."):
			if p.pos >= len(p.toks) || p.toks[p.pos].kind != tokIdent || listed(keywords, p.toks[p.pos].text) {
				return nil, errors.New("want a field or function name after '.'")
			}
			name := p.toks[p.pos].text
			p.pos++
			if p.peekOp("(") && listed(macros, name) {
				return nil, fmt.Errorf("the macro %s is not supported", name)
			}
			if p.accept("(") {
				var args []node
				if args, err = p.args(); err == nil {
					n, err = method(name, n, args)
				}
			} else {
				n = field{of: n, name: name}
			}
		case p.accept("["):
			var at node
			if at, err = p.nested(); err == nil {
				err = p.expect("]")
				n = index{of: n, at: at}
			}
		default:
			return n, nil
		}
	}
	return nil, err
}

func (p *parser) args() ([]node, error) {
	var out []node
	if p.accept(")") {
		return out, nil
	}
	for {
		a, err := p.nested()
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
	sign := ""
	if p.signedNumber() {
		sign = "-"
		p.pos++
	}
	t := p.toks[p.pos]
	p.pos++
	switch t.kind {
	case tokNumber:
		return number(sign, t)
	case tokString:
		return lit{t.str}, nil
	case tokIdent:
		return p.ident(t)
	}
	switch t.text {
	case "(":
		n, err := p.nested()
		if err != nil {
			return nil, err
		}
		return n, p.expect(")")
	case "[":
		var items []node
		for !p.accept("]") {
			it, err := p.nested()
			if err != nil {
				return nil, err
			}
			items = append(items, it)
			if !p.accept(",") && !p.peekOp("]") {
				return nil, p.expect("]")
			}
		}
		return list(items), nil
	}
	return nil, fmt.Errorf("unexpected %q at offset %d", t.text, t.off)
}

func (p *parser) ident(t token) (node, error) {
	switch t.text {
	case "true":
		return lit{true}, nil
	case "false":
		return lit{false}, nil
	case "null":
		return lit{nil}, nil
	case "in":
		return nil, fmt.Errorf("unexpected \"in\" at offset %d", t.off)
	}
	if listed(reserved, t.text) {
		return nil, fmt.Errorf("reserved identifier: %s", t.text)
	}
	if !p.accept("(") {
		if !p.vars[t.text] {
			return nil, fmt.Errorf("undeclared reference to %q", t.text)
		}
		return variable(t.text), nil
	}
	args, err := p.args()
	if err != nil {
		return nil, err
	}
	switch t.text {
	case "size":
		if len(args) != 1 {
			return nil, errors.New("size takes one argument")
		}
		return call{name: "size", recv: args[0]}, nil
	case "has":
		var f field
		ok := len(args) == 1
		if ok {
			f, ok = args[0].(field)
		}
		if !ok {
			return nil, errors.New("has() takes one field selection, e.g. has(output.name)")
		}
		return has{f}, nil
	}
	return nil, fmt.Errorf("unknown function %q", t.text)
}

// number parses a numeric literal with its sign as CEL does: out of range
// is an error, not a float (9223372036854775808) or infinity (1e999).
func number(sign string, t token) (node, error) {
	if t.float {
		f, err := strconv.ParseFloat(sign+t.text, 64)
		if err != nil {
			return nil, fmt.Errorf("invalid double literal %s%s", sign, t.text)
		}
		return lit{f}, nil
	}
	text, base := t.text, 10
	if t.hex {
		text, base = text[2:], 16
	}
	i, err := strconv.ParseInt(sign+text, base, 64)
	if err != nil {
		return nil, fmt.Errorf("invalid int literal %s%s", sign, t.text)
	}
	return lit{i}, nil
}

func method(name string, recv node, args []node) (node, error) {
	n := 1
	switch {
	case name == "size":
		n = 0
	case !listed(" contains startsWith endsWith matches ", name):
		return nil, fmt.Errorf("unknown function %q", name)
	}
	if len(args) != n {
		return nil, fmt.Errorf("%s takes %d argument(s)", name, n)
	}
	c := call{name: name, recv: recv}
	if n == 1 {
		c.arg = args[0]
	}
	if l, ok := c.arg.(lit); ok && name == "matches" {
		if s, ok := l.v.(string); ok {
			re, err := regexp.Compile(s)
			if err != nil {
				return nil, fmt.Errorf("matches: %v", err)
			}
			c.re = re
		}
	}
	return c, nil
}

// depth is the nesting of n; a chain of && or || counts once, as cel-go
// balances it.
func depth(n node) int {
	var kids []node
	switch x := n.(type) {
	case list:
		kids = x
	case field:
		kids = []node{x.of}
	case index:
		kids = []node{x.of, x.at}
	case has:
		kids = []node{x.f}
	case not:
		kids = []node{x.n}
	case neg:
		kids = []node{x.n}
	case logic:
		kids = x.terms
	case binary:
		kids = []node{x.l, x.r}
	case call:
		kids = []node{x.recv}
		if x.arg != nil {
			kids = append(kids, x.arg)
		}
	}
	d := 0
	for _, k := range kids {
		d = max(d, depth(k))
	}
	return d + 1
}
