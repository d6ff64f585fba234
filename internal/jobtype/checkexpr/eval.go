package checkexpr

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

type node interface {
	eval(env map[string]any) (any, error)
}

type lit struct{ v any }

func (n lit) eval(map[string]any) (any, error) { return n.v, nil }

type variable string

func (n variable) eval(env map[string]any) (any, error) {
	v, ok := env[string(n)]
	if !ok {
		return nil, fmt.Errorf("no value for %s", string(n))
	}
	return v, nil
}

type field struct {
	of   node
	name string
}

func (n field) eval(env map[string]any) (any, error) {
	v, err := n.of.eval(env)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("cannot read .%s of %s", n.name, kindOf(v))
	}
	f, ok := m[n.name]
	if !ok {
		return nil, fmt.Errorf("no such key: %s", n.name)
	}
	return f, nil
}

type index struct{ of, at node }

func (n index) eval(env map[string]any) (any, error) {
	v, err := n.of.eval(env)
	if err != nil {
		return nil, err
	}
	at, err := n.at.eval(env)
	if err != nil {
		return nil, err
	}
	switch c := v.(type) {
	case map[string]any:
		k, ok := at.(string)
		if !ok {
			return nil, errors.New("map index must be a string")
		}
		f, ok := c[k]
		if !ok {
			return nil, fmt.Errorf("no such key: %s", k)
		}
		return f, nil
	case []any:
		i, ok := at.(int64)
		if !ok || i < 0 || i >= int64(len(c)) {
			return nil, fmt.Errorf("index %v out of range", at)
		}
		return c[i], nil
	}
	return nil, fmt.Errorf("cannot index %s", kindOf(v))
}

type list []node

func (n list) eval(env map[string]any) (any, error) {
	out := make([]any, len(n))
	for i, it := range n {
		v, err := it.eval(env)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

type not struct{ n node }

func (n not) eval(env map[string]any) (any, error) {
	v, err := n.n.eval(env)
	if err != nil {
		return nil, err
	}
	b, ok := v.(bool)
	if !ok {
		return nil, fmt.Errorf("! needs a bool, got %s", kindOf(v))
	}
	return !b, nil
}

// logic is && and ||: like CEL, a side that decides the result absorbs an
// error on the other side.
type logic struct {
	or   bool
	l, r node
}

func (n logic) eval(env map[string]any) (any, error) {
	lv, lerr := n.l.eval(env)
	lb, lok := lv.(bool)
	if lerr == nil && !lok {
		return nil, fmt.Errorf("logic needs bools, got %s", kindOf(lv))
	}
	if lerr == nil && lb == n.or {
		return n.or, nil
	}
	rv, rerr := n.r.eval(env)
	rb, rok := rv.(bool)
	if rerr == nil && !rok {
		return nil, fmt.Errorf("logic needs bools, got %s", kindOf(rv))
	}
	if rerr == nil && rb == n.or {
		return n.or, nil
	}
	if lerr != nil {
		return nil, lerr
	}
	if rerr != nil {
		return nil, rerr
	}
	return !n.or, nil
}

type binary struct {
	op   string
	l, r node
}

func (n binary) eval(env map[string]any) (any, error) {
	l, err := n.l.eval(env)
	if err != nil {
		return nil, err
	}
	r, err := n.r.eval(env)
	if err != nil {
		return nil, err
	}
	switch n.op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "in":
		items, ok := r.([]any)
		if !ok {
			return nil, fmt.Errorf("in needs a list, got %s", kindOf(r))
		}
		for _, it := range items {
			if equal(l, it) {
				return true, nil
			}
		}
		return false, nil
	case "+", "-":
		return arith(n.op, l, r)
	}
	c, err := compare(l, r)
	if err != nil {
		return nil, err
	}
	switch n.op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	default:
		return c >= 0, nil
	}
}

type call struct {
	name      string
	recv, arg node
}

func (n call) eval(env map[string]any) (any, error) {
	recv, err := n.recv.eval(env)
	if err != nil {
		return nil, err
	}
	if n.name == "size" {
		switch v := recv.(type) {
		case string:
			return int64(utf8.RuneCountInString(v)), nil
		case []any:
			return int64(len(v)), nil
		case map[string]any:
			return int64(len(v)), nil
		}
		return nil, fmt.Errorf("size of %s", kindOf(recv))
	}
	arg, err := n.arg.eval(env)
	if err != nil {
		return nil, err
	}
	if list, ok := recv.([]any); ok && n.name == "contains" {
		for _, it := range list {
			if equal(it, arg) {
				return true, nil
			}
		}
		return false, nil
	}
	s, ok1 := recv.(string)
	a, ok2 := arg.(string)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%s needs strings, got %s and %s", n.name, kindOf(recv), kindOf(arg))
	}
	switch n.name {
	case "contains":
		return strings.Contains(s, a), nil
	case "startsWith":
		return strings.HasPrefix(s, a), nil
	case "endsWith":
		return strings.HasSuffix(s, a), nil
	}
	re, err := regexp.Compile(a)
	if err != nil {
		return nil, err
	}
	return re.MatchString(s), nil
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case int:
		return float64(x), true
	}
	return 0, false
}

func equal(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	}
	return a == b
}

func compare(a, b any) (int, error) {
	if x, ok := number(a); ok {
		if y, ok := number(b); ok {
			switch {
			case x < y:
				return -1, nil
			case x > y:
				return 1, nil
			}
			return 0, nil
		}
	}
	if x, ok := a.(string); ok {
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	}
	return 0, fmt.Errorf("cannot order %s and %s", kindOf(a), kindOf(b))
}

func arith(op string, a, b any) (any, error) {
	if x, ok := a.(int64); ok {
		if y, ok := b.(int64); ok {
			if op == "+" {
				return x + y, nil
			}
			return x - y, nil
		}
	}
	x, ok1 := number(a)
	y, ok2 := number(b)
	if ok1 && ok2 {
		if op == "+" {
			return x + y, nil
		}
		return x - y, nil
	}
	if s, ok := a.(string); ok && op == "+" {
		if t, ok := b.(string); ok {
			return s + t, nil
		}
	}
	return nil, fmt.Errorf("cannot apply %s to %s and %s", op, kindOf(a), kindOf(b))
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case int64, float64, int:
		return "number"
	case string:
		return "string"
	case []any:
		return "list"
	case map[string]any:
		return "map"
	}
	return fmt.Sprintf("%T", v)
}
