package checkexpr

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Values are JSON as the callers decode it: nil, bool, int64, float64,
// string, []any and map[string]any. Evaluation goes left to right and the
// first error wins, as in cel-go.

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
	return qualify(v, n.name)
}

// has is has(x.f): whether x holds the key f. As in cel-go, a scalar holds
// no keys (false) and a list cannot be asked (ErrBadIndex).
type has struct{ f field }

func (n has) eval(env map[string]any) (any, error) {
	v, err := n.f.of.eval(env)
	if err != nil {
		return nil, err
	}
	switch c := v.(type) {
	case map[string]any:
		_, ok := c[n.f.name]
		return ok, nil
	case []any:
		return nil, fmt.Errorf("%w: string in list", ErrBadIndex)
	}
	return false, nil
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
	return qualify(v, at)
}

// qualify is x.f and x[i] as cel-go applies them to JSON values: a map is
// read by string key (any other key is not there), a list by an int or an
// integral double, and a scalar has no keys.
func qualify(v, at any) (any, error) {
	switch at.(type) {
	case nil, []any, map[string]any:
		return nil, fmt.Errorf("%w: %s", ErrBadIndex, kindOf(at))
	}
	switch c := v.(type) {
	case map[string]any:
		if k, ok := at.(string); ok {
			if f, ok := c[k]; ok {
				return f, nil
			}
		}
		return nil, fmt.Errorf("%w: %v", ErrNoSuchKey, at)
	case []any:
		var i int64
		switch x := at.(type) {
		case int64:
			i = x
		case float64:
			var ok bool
			if i, ok = losslessInt(x); !ok {
				return nil, fmt.Errorf("%w: %v in list", ErrBadIndex, x)
			}
		default:
			return nil, fmt.Errorf("%w: %s in list", ErrBadIndex, kindOf(at))
		}
		if i < 0 || i >= int64(len(c)) {
			return nil, fmt.Errorf("%w: %d", ErrIndexOutOfRange, i)
		}
		return c[i], nil
	}
	return nil, fmt.Errorf("%w: %v", ErrNoSuchKey, at)
}

// losslessInt is cel-go's doubleToInt64Lossless.
func losslessInt(f float64) (int64, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) || f <= math.MinInt64 || f >= math.MaxInt64 {
		return 0, false
	}
	i := int64(f)
	return i, float64(i) == f
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
		return nil, overload("!", v)
	}
	return !b, nil
}

type neg struct{ n node }

func (n neg) eval(env map[string]any) (any, error) {
	v, err := n.n.eval(env)
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case int64:
		if x == math.MinInt64 {
			return nil, ErrOverflow
		}
		return -x, nil
	case float64:
		return -x, nil
	}
	return nil, overload("-", v)
}

// logic is && or || over its terms: a term that decides the result wins;
// otherwise the first error (a non-bool counts as ErrNoSuchOverload), as in
// cel-go.
type logic struct {
	or    bool
	terms []node
}

func (n logic) eval(env map[string]any) (any, error) {
	var first error
	for _, t := range n.terms {
		v, err := t.eval(env)
		b, ok := v.(bool)
		if err == nil && ok && b == n.or {
			return n.or, nil
		}
		if first == nil && err != nil {
			first = err
		} else if first == nil && !ok {
			first = overload(n.name(), v)
		}
	}
	if first != nil {
		return nil, first
	}
	return !n.or, nil
}

func (n logic) name() string {
	if n.or {
		return "||"
	}
	return "&&"
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
		return in(l, r)
	case "<", "<=", ">", ">=":
		return order(n.op, l, r)
	}
	return arith(n.op, l, r)
}

type call struct {
	name      string
	recv, arg node
	re        *regexp.Regexp // matches with a literal pattern, compiled once
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
		return nil, overload("size", recv)
	}
	arg, err := n.arg.eval(env)
	if err != nil {
		return nil, err
	}
	s, ok1 := recv.(string)
	a, ok2 := arg.(string)
	if !ok1 || !ok2 {
		return nil, overload(n.name, recv, arg)
	}
	switch n.name {
	case "contains":
		return strings.Contains(s, a), nil
	case "startsWith":
		return strings.HasPrefix(s, a), nil
	case "endsWith":
		return strings.HasSuffix(s, a), nil
	}
	re := n.re
	if re == nil {
		if re, err = regexp.Compile(a); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRegex, err)
		}
	}
	return re.MatchString(s), nil
}

func overload(op string, vs ...any) error {
	kinds := make([]string, len(vs))
	for i, v := range vs {
		kinds[i] = kindOf(v)
	}
	return fmt.Errorf("%w: %s applied to %s", ErrNoSuchOverload, op, strings.Join(kinds, ", "))
}

// equal is CEL's heterogeneous equality: numbers compare by value across
// int and double (NaN equals nothing), lists and maps element-wise, values
// of different kinds are unequal.
func equal(a, b any) bool {
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			return x == y
		case float64:
			return !math.IsNaN(y) && cmpDoubleInt(y, x) == 0
		}
		return false
	case float64:
		switch y := b.(type) {
		case float64:
			return x == y
		case int64:
			return !math.IsNaN(x) && cmpDoubleInt(x, y) == 0
		}
		return false
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
	case nil, bool, string:
		return a == b
	}
	return false
}

// cmpDoubleInt is cel-go's compareDoubleInt.
func cmpDoubleInt(d float64, i int64) int {
	switch {
	case d < math.MinInt64:
		return -1
	case d > math.MaxInt64:
		return 1
	}
	return cmpDouble(d, float64(i))
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpDouble(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// in is `x in list` (CEL equality) or `key in map` (presence; a map of JSON
// holds only string keys).
func in(x, container any) (any, error) {
	switch c := container.(type) {
	case []any:
		for _, it := range c {
			if equal(x, it) {
				return true, nil
			}
		}
		return false, nil
	case map[string]any:
		k, ok := x.(string)
		if !ok {
			return false, nil
		}
		_, ok = c[k]
		return ok, nil
	}
	return nil, overload("in", x, container)
}

// order is < <= > >= as cel-go's standard library has them: NaN on either
// side is false; ints and doubles compare by value; strings by code point;
// false < true; anything else is ErrNoSuchOverload.
func order(op string, a, b any) (any, error) {
	if x, ok := a.(float64); ok && math.IsNaN(x) {
		return false, nil
	}
	if y, ok := b.(float64); ok && math.IsNaN(y) {
		return false, nil
	}
	c, ok := 0, false
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			c, ok = cmpInt(x, y), true
		case float64:
			c, ok = -cmpDoubleInt(y, x), true
		}
	case float64:
		switch y := b.(type) {
		case float64:
			c, ok = cmpDouble(x, y), true
		case int64:
			c, ok = cmpDoubleInt(x, y), true
		}
	case string:
		if y, isStr := b.(string); isStr {
			c, ok = strings.Compare(x, y), true
		}
	case bool:
		if y, isBool := b.(bool); isBool {
			c, ok = boolInt(x)-boolInt(y), true
		}
	}
	if !ok {
		return nil, overload(op, a, b)
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// arith is + - * / % with CEL's rules: int64 overflow and integer division
// or modulus by zero are errors, doubles follow IEEE 754, int and double do
// not mix, + also joins strings and lists.
func arith(op string, a, b any) (any, error) {
	switch x := a.(type) {
	case int64:
		if y, ok := b.(int64); ok {
			return intArith(op, x, y)
		}
	case float64:
		if y, ok := b.(float64); ok {
			switch op {
			case "+":
				return x + y, nil
			case "-":
				return x - y, nil
			case "*":
				return x * y, nil
			case "/":
				return x / y, nil
			}
		}
	case string:
		if y, ok := b.(string); ok && op == "+" {
			return x + y, nil
		}
	case []any:
		if y, ok := b.([]any); ok && op == "+" {
			return append(append(make([]any, 0, len(x)+len(y)), x...), y...), nil
		}
	}
	return nil, overload(op, a, b)
}

// intArith is cel-go's checked int64 arithmetic.
func intArith(op string, x, y int64) (any, error) {
	switch op {
	case "+":
		if y > 0 && x > math.MaxInt64-y || y < 0 && x < math.MinInt64-y {
			return nil, ErrOverflow
		}
		return x + y, nil
	case "-":
		if y < 0 && x > math.MaxInt64+y || y > 0 && x < math.MinInt64+y {
			return nil, ErrOverflow
		}
		return x - y, nil
	case "*":
		if x == -1 && y == math.MinInt64 || y == -1 && x == math.MinInt64 ||
			x > 0 && y > 0 && x > math.MaxInt64/y || x > 0 && y < 0 && y < math.MinInt64/x ||
			x < 0 && y > 0 && x < math.MinInt64/y || x < 0 && y < 0 && y < math.MaxInt64/x {
			return nil, ErrOverflow
		}
		return x * y, nil
	}
	if y == 0 {
		if op == "%" {
			return nil, fmt.Errorf("%w (modulus)", ErrDivideByZero)
		}
		return nil, ErrDivideByZero
	}
	if x == math.MinInt64 && y == -1 {
		return nil, ErrOverflow
	}
	if op == "%" {
		return x % y, nil
	}
	return x / y, nil
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "double"
	case string:
		return "string"
	case []any:
		return "list"
	case map[string]any:
		return "map"
	}
	return fmt.Sprintf("%T", v)
}
