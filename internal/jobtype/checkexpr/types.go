package checkexpr

import "fmt"

// The static types of CEL's checker, as far as the subset reaches. A field
// of a variable is dyn; dyn is assignable to and from every type, so a
// mismatch involving a field surfaces at evaluation (ErrNoSuchOverload).
type kind uint8

const (
	kDyn  kind = iota
	kFree      // a type variable not yet bound (see checkIndex)
	kBool
	kInt
	kDouble
	kString
	kNull
	kList
	kMap // map(string, V): the variables
)

type typ struct {
	k    kind
	elem *typ // list element or map value
}

var (
	tDyn    = typ{k: kDyn}
	tBool   = typ{k: kBool}
	tInt    = typ{k: kInt}
	tDouble = typ{k: kDouble}
	tString = typ{k: kString}
)

func listOf(t typ) typ { return typ{k: kList, elem: &t} }

func (t typ) String() string {
	switch t.k {
	case kDyn:
		return "dyn"
	case kFree:
		return "_"
	case kBool:
		return "bool"
	case kInt:
		return "int"
	case kDouble:
		return "double"
	case kString:
		return "string"
	case kNull:
		return "null"
	case kList:
		return "list(" + t.elem.String() + ")"
	}
	return "map(string, " + t.elem.String() + ")"
}

// assignable is CEL's type unification for the subset: dyn and an unbound
// element type match anything, containers match element-wise.
func assignable(a, b typ) bool {
	switch {
	case a.k == kDyn || b.k == kDyn || a.k == kFree || b.k == kFree:
		return true
	case a.k != b.k:
		return false
	case a.k == kList || a.k == kMap:
		return assignable(*a.elem, *b.elem)
	}
	return true
}

// general is the more general of two assignable types: dyn wins, an unbound
// element type loses.
func general(a, b typ) typ {
	switch {
	case a.k == kDyn || b.k == kDyn:
		return tDyn
	case a.k == kFree:
		return b
	case b.k == kFree:
		return a
	case a.k == kList || a.k == kMap:
		e := general(*a.elem, *b.elem)
		return typ{k: a.k, elem: &e}
	}
	return a
}

func mismatch(op string, ts ...typ) error {
	return fmt.Errorf("found no matching overload for %s applied to %v", op, ts)
}

// check type-checks n as cel-go's checker does and returns its type; what
// cel-go would refuse is refused here, so evaluation never meets it.
func check(n node) (typ, error) {
	switch x := n.(type) {
	case lit:
		switch x.v.(type) {
		case bool:
			return tBool, nil
		case int64:
			return tInt, nil
		case float64:
			return tDouble, nil
		case string:
			return tString, nil
		}
		return typ{k: kNull}, nil
	case list:
		elem := typ{k: kFree}
		for _, it := range x {
			t, err := check(it)
			if err != nil {
				return typ{}, err
			}
			if assignable(elem, t) {
				elem = general(elem, t)
			} else {
				elem = tDyn
			}
		}
		return listOf(elem), nil
	case variable:
		return typ{k: kMap, elem: &tDyn}, nil
	case field:
		return checkSelect(x)
	case has:
		if _, err := checkSelect(x.f); err != nil {
			return typ{}, err
		}
		return tBool, nil
	case index:
		return checkIndex(x)
	case not:
		t, err := check(x.n)
		if err == nil && !boolish(t) {
			err = mismatch("!_", t)
		}
		return tBool, err
	case neg:
		t, err := check(x.n)
		if err == nil && t.k != kInt && t.k != kDouble && t.k != kDyn {
			err = mismatch("-_", t)
		}
		return t, err
	case logic:
		for _, term := range x.terms {
			t, err := check(term)
			if err != nil {
				return typ{}, err
			}
			if !boolish(t) {
				return typ{}, fmt.Errorf("found no matching overload for && or || applied to %s", t)
			}
		}
		return tBool, nil
	case binary:
		l, err := check(x.l)
		if err != nil {
			return typ{}, err
		}
		r, err := check(x.r)
		if err != nil {
			return typ{}, err
		}
		return checkBinary(x.op, l, r)
	case call:
		return checkCall(x)
	}
	return typ{}, fmt.Errorf("unexpected node %T", n)
}

// boolish: bool, or a type that may be one at evaluation.
func boolish(t typ) bool { return t.k == kBool || t.k == kDyn || t.k == kFree }

func checkSelect(x field) (typ, error) {
	t, err := check(x.of)
	switch {
	case err != nil:
		return typ{}, err
	case t.k == kMap:
		return *t.elem, nil
	case t.k == kDyn || t.k == kFree:
		return tDyn, nil
	}
	return typ{}, fmt.Errorf("type '%s' does not support field selection", t)
}

func checkIndex(x index) (typ, error) {
	t, err := check(x.of)
	if err != nil {
		return typ{}, err
	}
	at, err := check(x.at)
	if err != nil {
		return typ{}, err
	}
	// cel-go types dyn[k] as a list or a map read: dyn when k may be an int
	// (both apply), else the map's value type, an unbound type variable that
	// the next operator binds as it likes; kFree stands for it.
	switch {
	case t.k == kList && (at.k == kInt || at.k == kDyn || at.k == kFree):
		return *t.elem, nil
	case t.k == kMap && (at.k == kString || at.k == kDyn || at.k == kFree):
		return *t.elem, nil
	case t.k == kDyn && (at.k == kInt || at.k == kDyn || at.k == kFree):
		return tDyn, nil
	case (t.k == kDyn || t.k == kFree) && (at.k == kString || at.k == kDouble || at.k == kBool):
		return typ{k: kFree}, nil
	case t.k == kFree && (at.k == kInt || at.k == kDyn || at.k == kFree):
		return typ{k: kFree}, nil
	}
	return typ{}, mismatch("_[_]", t, at)
}

// takes reports whether an arithmetic operator takes operands of kind k
// (both of one kind).
func takes(op string, k kind) bool {
	switch op {
	case "+":
		return k == kInt || k == kDouble || k == kString || k == kList
	case "%":
		return k == kInt
	}
	return k == kInt || k == kDouble
}

func checkBinary(op string, l, r typ) (typ, error) {
	switch op {
	case "==", "!=":
		if !assignable(l, r) {
			return typ{}, mismatch("_"+op+"_", l, r)
		}
		return tBool, nil
	case "<", "<=", ">", ">=":
		ok := func(t typ) bool {
			return t.k == kDyn || t.k == kFree || t.k == kBool || t.k == kInt || t.k == kDouble || t.k == kString
		}
		loose := func(t typ) bool { return t.k == kDyn || t.k == kFree }
		if !ok(l) || !ok(r) || !loose(l) && !loose(r) && l.k != r.k {
			return typ{}, mismatch("_"+op+"_", l, r)
		}
		return tBool, nil
	case "in":
		switch {
		case r.k == kDyn, r.k == kFree,
			r.k == kList && assignable(l, *r.elem),
			r.k == kMap && assignable(l, tString):
			return tBool, nil
		}
		return typ{}, mismatch("@in", l, r)
	}
	// A type variable (kFree) is bound by the other operand; against dyn or
	// another variable cel-go binds it arbitrarily (bytes for +), so refuse.
	switch {
	case l.k == kDyn && r.k == kDyn:
		return tDyn, nil
	case (l.k == kDyn || l.k == kFree) && takes(op, r.k):
		return r, nil
	case (r.k == kDyn || r.k == kFree) && takes(op, l.k):
		return l, nil
	case l.k == r.k && takes(op, l.k) && (l.k != kList || assignable(*l.elem, *r.elem)):
		return general(l, r), nil
	}
	return typ{}, mismatch("_"+op+"_", l, r)
}

func checkCall(x call) (typ, error) {
	recv, err := check(x.recv)
	if err != nil {
		return typ{}, err
	}
	if x.name == "size" {
		switch recv.k {
		case kString, kList, kMap, kDyn, kFree:
			return tInt, nil
		}
		return typ{}, mismatch("size", recv)
	}
	arg, err := check(x.arg)
	if err != nil {
		return typ{}, err
	}
	stringish := func(t typ) bool { return t.k == kString || t.k == kDyn || t.k == kFree }
	if !stringish(recv) || !stringish(arg) {
		return typ{}, fmt.Errorf("found no matching overload for %s applied to %s.(%s)", x.name, recv, arg)
	}
	return tBool, nil
}
