package jobtype

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/template/parse"
)

// A prompt template is text/template's language (its parser,
// text/template/parse), executed here over the decoded JSON input without
// reflection. text/template's executor looks every field name up as a
// method first (reflect.Value.MethodByName), and a binary that can call
// MethodByName with a name known only at run time makes Go's linker keep
// every exported method of every type that can reach an interface: 3.0 to
// 3.7 MB more in each function (run 12.31 -> 15.34 MB with tracing), the
// OpenTelemetry SDK's and the AWS SDK's included. internal/deploy's guard
// keeps text/template out of every function.
//
// A JSON input has no methods to call, so the difference is small and
// stated: what this executes, it executes as text/template does with
// missingkey=error and the json function (TestPromptsRenderAsTextTemplate
// holds every construct to text/template itself); what it does not, a type
// cannot load with (the functions eq, ne, lt, le, gt, ge, slice, call,
// html, js, urlquery; {{define}}, {{template}}, {{block}}), or its render
// fails (a method of a JSON number, {{.n.Int64}}, which text/template would
// call).

// promptFuncs are the functions a template may call: text/template's
// builtins that need no reflection, and json.
var promptFuncs = map[string]any{
	"and": true, "or": true, "not": true, "len": true, "index": true,
	"print": true, "printf": true, "println": true, "json": true,
}

// prompt is a parsed prompt template.
type prompt struct{ tree *parse.Tree }

// parseTemplate parses a prompt template. Missing keys are errors, so a
// renamed input field cannot silently render as "<no value>"; optional fields
// are read with {{with index . "field"}}{{.}}{{end}}, which yields nothing
// when absent ({{index . "field"}} alone renders "<no value>", which a
// contract run refuses).
func parseTemplate(name, text string) (*prompt, error) {
	trees, err := parse.Parse(name, text, "", "", promptFuncs)
	if err != nil {
		return nil, err
	}
	if len(trees) != 1 || trees[name] == nil {
		return nil, fmt.Errorf("template: %s: {{define}} and {{block}} are not supported", name)
	}
	t := trees[name]
	if err := refuseTemplateCalls(t.Root); err != nil {
		return nil, fmt.Errorf("template: %s: %w", name, err)
	}
	return &prompt{tree: t}, nil
}

func refuseTemplateCalls(n parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := refuseTemplateCalls(c); err != nil {
				return err
			}
		}
	case *parse.TemplateNode:
		return errors.New("{{template}} is not supported")
	case *parse.IfNode:
		return errors.Join(refuseTemplateCalls(n.List), refuseTemplateCalls(n.ElseList))
	case *parse.WithNode:
		return errors.Join(refuseTemplateCalls(n.List), refuseTemplateCalls(n.ElseList))
	case *parse.RangeNode:
		return errors.Join(refuseTemplateCalls(n.List), refuseTemplateCalls(n.ElseList))
	}
	return nil
}

// execute renders p over data (a decoded JSON value: map[string]any,
// []any, string, json.Number, bool or nil).
func (p *prompt) execute(b *strings.Builder, data any) (err error) {
	s := &promptState{out: b, vars: []promptVar{{"$", data}}}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(promptError)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("template: %s: %s", p.tree.Name, string(e))
		}
	}()
	s.walk(data, p.tree.Root)
	return nil
}

// promptError is an execution error, raised as a panic inside the walk
// (as text/template does) and returned by execute.
type promptError string

// loop control, raised by {{break}} and {{continue}}.
type promptLoop bool

const (
	loopBreak    promptLoop = true
	loopContinue promptLoop = false
)

type promptVar struct {
	name  string
	value any
}

type promptState struct {
	out  *strings.Builder
	vars []promptVar
}

func (s *promptState) errorf(format string, args ...any) {
	panic(promptError(fmt.Sprintf(format, args...)))
}

func (s *promptState) mark() int            { return len(s.vars) }
func (s *promptState) pop(mark int)         { s.vars = s.vars[:mark] }
func (s *promptState) push(n string, v any) { s.vars = append(s.vars, promptVar{n, v}) }

func (s *promptState) setVar(name string, v any) {
	for i := len(s.vars) - 1; i >= 0; i-- {
		if s.vars[i].name == name {
			s.vars[i].value = v
			return
		}
	}
	s.errorf("undefined variable: %s", name)
}

func (s *promptState) varValue(name string) any {
	for i := len(s.vars) - 1; i >= 0; i-- {
		if s.vars[i].name == name {
			return s.vars[i].value
		}
	}
	s.errorf("undefined variable: %s", name)
	return nil
}

func (s *promptState) walk(dot any, node parse.Node) {
	switch n := node.(type) {
	case *parse.ActionNode:
		v := s.pipeline(dot, n.Pipe)
		if len(n.Pipe.Decl) == 0 {
			s.print(v)
		}
	case *parse.BreakNode:
		panic(loopBreak)
	case *parse.ContinueNode:
		panic(loopContinue)
	case *parse.CommentNode:
	case *parse.IfNode:
		s.ifOrWith(false, dot, n.Pipe, n.List, n.ElseList)
	case *parse.WithNode:
		s.ifOrWith(true, dot, n.Pipe, n.List, n.ElseList)
	case *parse.ListNode:
		for _, c := range n.Nodes {
			s.walk(dot, c)
		}
	case *parse.RangeNode:
		s.walkRange(dot, n)
	case *parse.TextNode:
		s.out.Write(n.Text)
	default:
		s.errorf("unsupported node: %s", node)
	}
}

// print writes v as text/template prints a value: fmt's default format,
// and "<no value>" for nothing.
func (s *promptState) print(v any) {
	if v == nil {
		s.out.WriteString("<no value>")
		return
	}
	fmt.Fprint(s.out, v)
}

func (s *promptState) ifOrWith(with bool, dot any, pipe *parse.PipeNode, list, elseList *parse.ListNode) {
	defer s.pop(s.mark())
	v := s.pipeline(dot, pipe)
	switch {
	case truth(v) && with:
		s.walk(v, list)
	case truth(v):
		s.walk(dot, list)
	case elseList != nil:
		s.walk(dot, elseList)
	}
}

// truth is text/template's: the zero of each kind, empty collections and
// nothing are false (a JSON number is text, so "0" is true there too).
func truth(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case string:
		return v != ""
	case json.Number:
		return v != ""
	case map[string]any:
		return len(v) > 0
	case []any:
		return len(v) > 0
	case int:
		return v != 0
	case uint8:
		return v != 0
	case float64:
		return v != 0
	case complex128:
		return v != 0
	}
	return true
}

func (s *promptState) walkRange(dot any, r *parse.RangeNode) {
	defer s.pop(s.mark())
	v := s.pipeline(dot, r.Pipe)
	mark := s.mark()
	one := func(index, elem any) (stop bool) {
		decl := r.Pipe.Decl
		if len(decl) > 0 {
			if r.Pipe.IsAssign {
				if len(decl) > 1 {
					s.setVar(decl[0].Ident[0], index)
				} else {
					s.setVar(decl[0].Ident[0], elem)
				}
			} else {
				s.vars[len(s.vars)-1].value = elem
			}
		}
		if len(decl) > 1 {
			if r.Pipe.IsAssign {
				s.setVar(decl[1].Ident[0], elem)
			} else {
				s.vars[len(s.vars)-2].value = index
			}
		}
		defer s.pop(mark)
		defer func() {
			if rec := recover(); rec != nil {
				l, ok := rec.(promptLoop)
				if !ok {
					panic(rec)
				}
				stop = l == loopBreak
			}
		}()
		s.walk(elem, r.List)
		return false
	}
	ran := false
	switch v := v.(type) {
	case []any:
		for i, e := range v {
			ran = true
			if one(i, e) {
				break
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ran = true
			if one(k, v[k]) {
				break
			}
		}
	case int:
		if len(r.Pipe.Decl) > 1 {
			s.errorf("can't use %v to iterate over more than one variable", v)
		}
		for i := range v {
			ran = true
			if one(nil, i) {
				break
			}
		}
	case uint8: // a string's byte (index), which text/template ranges over too
		if len(r.Pipe.Decl) > 1 {
			s.errorf("can't use %v to iterate over more than one variable", v)
		}
		for i := range v {
			ran = true
			if one(nil, i) {
				break
			}
		}
	case nil:
	default:
		s.errorf("range can't iterate over %v", v)
	}
	if !ran && r.ElseList != nil {
		s.walk(dot, r.ElseList)
	}
}

// pipeline evaluates a pipeline, declaring or assigning its variables.
func (s *promptState) pipeline(dot any, pipe *parse.PipeNode) any {
	if pipe == nil {
		return nil
	}
	var v any
	final := false
	for _, cmd := range pipe.Cmds {
		v = s.command(dot, cmd, v, final)
		final = true
	}
	for _, d := range pipe.Decl {
		if pipe.IsAssign {
			s.setVar(d.Ident[0], v)
		} else {
			s.push(d.Ident[0], v)
		}
	}
	return v
}

// command evaluates one command; final (when hasFinal) is the value the
// pipeline brought, its last argument.
func (s *promptState) command(dot any, cmd *parse.CommandNode, final any, hasFinal bool) any {
	switch n := cmd.Args[0].(type) {
	case *parse.FieldNode:
		s.noArgs(cmd.Args, hasFinal, n)
		return s.fields(dot, n.Ident)
	case *parse.ChainNode:
		s.noArgs(cmd.Args, hasFinal, n)
		return s.fields(s.arg(dot, n.Node), n.Field)
	case *parse.VariableNode:
		s.noArgs(cmd.Args, hasFinal, n)
		return s.fields(s.varValue(n.Ident[0]), n.Ident[1:])
	case *parse.IdentifierNode:
		return s.call(dot, n.Ident, cmd.Args[1:], final, hasFinal)
	case *parse.PipeNode:
		s.noArgs(cmd.Args, hasFinal, n)
		return s.pipeline(dot, n)
	}
	s.noArgs(cmd.Args, hasFinal, cmd.Args[0])
	switch n := cmd.Args[0].(type) {
	case *parse.BoolNode:
		return n.True
	case *parse.DotNode:
		return dot
	case *parse.NumberNode:
		return s.constant(n)
	case *parse.StringNode:
		return n.Text
	case *parse.NilNode:
		s.errorf("nil is not a command")
	}
	s.errorf("can't evaluate command %q", cmd.Args[0])
	return nil
}

func (s *promptState) noArgs(args []parse.Node, hasFinal bool, n parse.Node) {
	if len(args) > 1 || hasFinal {
		s.errorf("can't give argument to non-function %s", n)
	}
}

// constant is a number as text/template reads one with no type to go by.
func (s *promptState) constant(n *parse.NumberNode) any {
	switch {
	case n.IsComplex:
		return n.Complex128
	case n.IsFloat && !isHexInt(n.Text) && !strings.HasPrefix(n.Text, "'") && strings.ContainsAny(n.Text, ".eEpP"):
		return n.Float64
	case n.IsInt:
		i := int(n.Int64)
		if int64(i) != n.Int64 {
			s.errorf("%s overflows int", n.Text)
		}
		return i
	}
	s.errorf("%s overflows int", n.Text)
	return nil
}

func isHexInt(s string) bool {
	return len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && !strings.ContainsAny(s, "pP")
}

// fields walks .a.b.c from v: each a key of an object, missing keys an
// error (missingkey=error).
func (s *promptState) fields(v any, idents []string) any {
	for _, name := range idents {
		switch m := v.(type) {
		case map[string]any:
			e, ok := m[name]
			if !ok {
				s.errorf("map has no entry for key %q", name)
			}
			v = e
		case nil:
			s.errorf("nil data; no entry for key %q", name)
		default:
			s.errorf("can't evaluate field %s in type %T", name, v)
		}
	}
	return v
}

// arg evaluates a function's argument or a chain's base.
func (s *promptState) arg(dot any, n parse.Node) any {
	switch n := n.(type) {
	case *parse.DotNode:
		return dot
	case *parse.NilNode:
		return nil
	case *parse.FieldNode:
		return s.fields(dot, n.Ident)
	case *parse.VariableNode:
		return s.fields(s.varValue(n.Ident[0]), n.Ident[1:])
	case *parse.PipeNode:
		return s.pipeline(dot, n)
	case *parse.IdentifierNode:
		return s.call(dot, n.Ident, nil, nil, false)
	case *parse.ChainNode:
		return s.fields(s.arg(dot, n.Node), n.Field)
	case *parse.BoolNode:
		return n.True
	case *parse.NumberNode:
		return s.constant(n)
	case *parse.StringNode:
		return n.Text
	}
	s.errorf("can't handle argument %s", n)
	return nil
}

// call runs a function of promptFuncs.
func (s *promptState) call(dot any, name string, args []parse.Node, final any, hasFinal bool) any {
	n := len(args)
	if hasFinal {
		n++
	}
	want := func(min int, exact bool) {
		if n < min || (exact && n != min) {
			s.errorf("wrong number of args for %s: want %d got %d", name, min, n)
		}
	}
	if name == "and" || name == "or" {
		want(1, false)
		var v any
		for _, a := range args {
			if v = s.arg(dot, a); truth(v) == (name == "or") {
				return v
			}
		}
		if hasFinal {
			v = final
		}
		return v
	}
	vals := make([]any, 0, n)
	for _, a := range args {
		vals = append(vals, s.arg(dot, a))
	}
	if hasFinal {
		vals = append(vals, final)
	}
	switch name {
	case "not":
		want(1, true)
		return !truth(vals[0])
	case "len":
		want(1, true)
		return s.length(vals[0])
	case "index":
		want(1, false)
		return s.index(vals[0], vals[1:])
	case "json":
		want(1, true)
		b, err := json.Marshal(vals[0])
		if err != nil {
			s.errorf("error calling json: %v", err)
		}
		return string(b)
	case "print":
		return fmt.Sprint(vals...)
	case "println":
		return fmt.Sprintln(vals...)
	case "printf":
		want(1, false)
		format, ok := vals[0].(string)
		if !ok {
			s.errorf("wrong type for value; expected string; got %T", vals[0])
		}
		return fmt.Sprintf(format, vals[1:]...)
	}
	s.errorf("%q is not a defined function", name)
	return nil
}

func (s *promptState) length(v any) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case json.Number:
		return len(v)
	case map[string]any:
		return len(v)
	case []any:
		return len(v)
	}
	s.errorf("error calling len: len of %T", v)
	return 0
}

func (s *promptState) index(item any, keys []any) any {
	if item == nil {
		s.errorf("error calling index: index of untyped nil")
	}
	for _, k := range keys {
		switch it := item.(type) {
		case map[string]any:
			key, ok := k.(string)
			if !ok {
				s.errorf("error calling index: value has type %T; should be string", k)
			}
			item = it[key] // a missing key is nothing, as text/template's index says
		case []any:
			item = it[s.position(k, len(it))]
		case string:
			item = it[s.position(k, len(it))]
		case json.Number:
			item = it[s.position(k, len(it))]
		case nil:
			s.errorf("error calling index: index of nil pointer")
		default:
			s.errorf("error calling index: can't index item of type %T", item)
		}
	}
	return item
}

func (s *promptState) position(k any, n int) int {
	var x int
	switch k := k.(type) {
	case int:
		x = k
	case uint8:
		x = int(k)
	case nil:
		s.errorf("error calling index: cannot index slice/array with nil")
	default:
		s.errorf("error calling index: cannot index slice/array with type %T", k)
	}
	if x < 0 || x >= n {
		s.errorf("error calling index: index out of range: %d", x)
	}
	return x
}
