// Package linearizability checks recorded histories of concurrent job
// operations — create, replay, conflicting create, get, complete — against
// a sequential model of the job contract with porcupine.
//
// The model, per (owner, key):
//
//	absent | job{fingerprint, id, completed_by, result}
//
//	create(fp)  absent            → id, replayed=false; the job exists
//	            job, same fp      → id, replayed=true
//	            job, other fp     → KeyReused(id)
//	get         → the current state
//	complete(n) no winner yet     → won; n wins with its result
//	            n already won     → won (a redelivery)
//	            m ≠ n won         → lost, winner m
//
// complete compares on the version the attempt read; the workload starts
// every attempt before any result is offered and nothing else writes an
// outcome, so "the version is unchanged" is "nobody won yet".
//
// A call that failed (unknown outcome) is recorded with no output and a
// return after every other operation: porcupine may place its effect
// anywhere after its call, including nowhere that matters.
package linearizability

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is an operation of the job contract.
type Op string

// Operations.
const (
	OpCreate   Op = "create"
	OpGet      Op = "get"
	OpComplete Op = "complete"
)

// Input is what a call asked.
type Input struct {
	Op  Op
	Key string // "owner/key": the partition
	// ID is job.NewID(owner, key), the only ID the key may ever name.
	ID string
	// Create: the request's fingerprint, and a short label for pictures.
	Fingerprint string
	Label       string
	// Complete: the attempt offering its result, and the result.
	Attempt int
	Result  string
	// Retried is an observation filled in at return: the create's PutItem
	// was retried by the SDK after an attempt that may have been applied.
	// Only Options.AllowRetriedReplay looks at it.
	Retried bool
}

// Output is what a call was told.
type Output struct {
	// Ambiguous: the call failed; its effect is unknown.
	Ambiguous bool
	// Create.
	ID       string
	Replayed bool
	Reused   bool // KeyReusedError naming ID
	// Get.
	Found       bool
	Fingerprint string
	CompletedBy int
	Result      string
	// Complete.
	Won    bool
	Winner int // when lost
}

// State is the model's state of one key.
type State struct {
	Exists      bool
	ID          string
	Fingerprint string
	Label       string
	Winner      int
	Result      string
}

// Options relax the model for documented, not yet fixed deviations.
type Options struct {
	// AllowRetriedReplay accepts replayed=true from the create whose own
	// write created the job when the SDK retried that write after an
	// ambiguous attempt: store.Create cannot tell its retried write from
	// someone else's today.
	AllowRetriedReplay bool
}

// Model is the job contract as a porcupine model, partitioned by key.
func Model(o Options) porcupine.Model {
	return porcupine.Model{
		Partition: partition,
		Init:      func() any { return State{} },
		Step: func(state, input, output any) (bool, any) {
			return step(o, state.(State), input.(Input), output.(Output))
		},
		Equal:             func(a, b any) bool { return a.(State) == b.(State) },
		DescribeOperation: describeOperation,
		DescribeState:     describeState,
	}
}

func partition(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string]int{}
	var out [][]porcupine.Operation
	for _, op := range history {
		k := op.Input.(Input).Key
		i, ok := byKey[k]
		if !ok {
			i = len(out)
			byKey[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], op)
	}
	return out
}

func step(o Options, s State, in Input, out Output) (bool, State) {
	switch in.Op {
	case OpCreate:
		if !s.Exists {
			created := State{Exists: true, ID: in.ID, Fingerprint: in.Fingerprint, Label: in.Label}
			if out.Ambiguous {
				return true, created
			}
			ok := !out.Reused && out.ID == in.ID && (!out.Replayed || (o.AllowRetriedReplay && in.Retried))
			return ok, created
		}
		if out.Ambiguous {
			return true, s
		}
		if in.Fingerprint == s.Fingerprint {
			return !out.Reused && out.Replayed && out.ID == s.ID, s
		}
		return out.Reused && out.ID == s.ID, s
	case OpGet:
		if out.Ambiguous {
			return true, s
		}
		if !s.Exists {
			return !out.Found, s
		}
		return out.Found && out.ID == s.ID && out.Fingerprint == s.Fingerprint &&
			out.CompletedBy == s.Winner && out.Result == s.Result, s
	case OpComplete:
		if !s.Exists {
			// Results are offered only for attempts of existing jobs.
			return out.Ambiguous, s
		}
		next := s
		if s.Winner == 0 {
			next.Winner, next.Result = in.Attempt, in.Result
		}
		if out.Ambiguous {
			return true, next
		}
		if s.Winner == 0 || s.Winner == in.Attempt {
			return out.Won, next
		}
		return !out.Won && out.Winner == s.Winner, s
	}
	return false, s
}

func describeOperation(input, output any) string {
	in, out := input.(Input), output.(Output)
	var call string
	switch in.Op {
	case OpCreate:
		call = fmt.Sprintf("create(%s)", in.Label)
		if in.Retried {
			call += "[sdk-retried]"
		}
	case OpGet:
		call = "get()"
	case OpComplete:
		call = fmt.Sprintf("complete(%d)", in.Attempt)
	}
	if out.Ambiguous {
		return call + " → ? (failed: unknown outcome)"
	}
	switch in.Op {
	case OpCreate:
		switch {
		case out.Reused:
			return call + " → KeyReused(" + short(out.ID) + ")"
		case out.Replayed:
			return call + " → replayed " + short(out.ID)
		}
		return call + " → created " + short(out.ID)
	case OpGet:
		if !out.Found {
			return call + " → not found"
		}
		return fmt.Sprintf("%s → %s completed_by=%d", call, short(out.ID), out.CompletedBy)
	case OpComplete:
		if out.Won {
			return call + " → won"
		}
		return fmt.Sprintf("%s → lost to %d", call, out.Winner)
	}
	return call
}

func describeState(state any) string {
	s := state.(State)
	if !s.Exists {
		return "absent"
	}
	return fmt.Sprintf("job %s (%s) completed_by=%d", short(s.ID), s.Label, s.Winner)
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12] + "…"
	}
	return id
}

// Check checks a history; timeout 0 means none.
func Check(history []porcupine.Operation, o Options, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model(o), history, timeout)
}

// Visualize writes porcupine's HTML picture of a checked history to a new
// file in dir (os.TempDir() if empty) and returns its path.
func Visualize(dir string, o Options, info porcupine.LinearizationInfo) (string, error) {
	f, err := os.CreateTemp(dir, "onejob-linearizability-*.html")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := porcupine.Visualize(Model(o), info, f); err != nil {
		return "", err
	}
	return f.Name(), nil
}

// Explain lists, for each key whose history is not linearizable, its
// operations in call order: the first thing to read after a failure.
func Explain(history []porcupine.Operation, o Options, limit int) []string {
	m := Model(o)
	var out []string
	for _, ops := range partition(history) {
		if porcupine.CheckOperations(m, ops) {
			continue
		}
		sorted := append([]porcupine.Operation(nil), ops...)
		slices.SortFunc(sorted, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		lines := []string{"key " + ops[0].Input.(Input).Key + ":"}
		for _, op := range sorted {
			lines = append(lines, fmt.Sprintf("  client %d [%d, %d] %s", op.ClientId, op.Call, op.Return,
				describeOperation(op.Input, op.Output)))
		}
		out = append(out, strings.Join(lines, "\n"))
		if len(out) >= limit {
			break
		}
	}
	return out
}
