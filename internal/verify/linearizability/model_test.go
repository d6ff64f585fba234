package linearizability_test

import (
	"os"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/onejob/onejob/internal/verify/linearizability"
)

const (
	id   = "job_k"
	fpA  = "fp-a"
	fpB  = "fp-b"
	part = "o/k"
)

// op builds one operation; ret < 0 marks a call that failed (ambiguous).
func op(client int, in linearizability.Input, call, ret int64, out linearizability.Output) porcupine.Operation {
	in.Key, in.ID = part, id
	if ret < 0 {
		out, ret = linearizability.Output{Ambiguous: true}, 1<<40
	}
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func create(fp string) linearizability.Input {
	label := "a"
	if fp == fpB {
		label = "b"
	}
	return linearizability.Input{Op: linearizability.OpCreate, Fingerprint: fp, Label: label}
}

func complete(n int) linearizability.Input {
	return linearizability.Input{Op: linearizability.OpComplete, Attempt: n, Result: "r" + string(rune('0'+n))}
}

func get() linearizability.Input { return linearizability.Input{Op: linearizability.OpGet} }

func created() linearizability.Output  { return linearizability.Output{ID: id} }
func replayed() linearizability.Output { return linearizability.Output{ID: id, Replayed: true} }
func reused() linearizability.Output   { return linearizability.Output{ID: id, Reused: true} }
func won() linearizability.Output      { return linearizability.Output{Won: true} }
func absent() linearizability.Output   { return linearizability.Output{} }

func lostTo(n int) linearizability.Output { return linearizability.Output{Winner: n} }

func found(fp string, winner int) linearizability.Output {
	out := linearizability.Output{Found: true, ID: id, Fingerprint: fp, CompletedBy: winner}
	if winner != 0 {
		out.Result = "r" + string(rune('0'+winner))
	}
	return out
}

// TestModel feeds hand-made histories to the checker: it must accept what
// the contract allows — ambiguous calls included — and reject what it
// forbids, or the long runs prove nothing.
func TestModel(t *testing.T) {
	t.Parallel()
	retried := create(fpA)
	retried.Retried = true
	tests := []struct {
		name    string
		opts    linearizability.Options
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{
		{name: "DoubleClick", want: porcupine.Ok, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, replayed()), op(1, create(fpA), 2, 8, created()),
		}},
		{name: "ConflictingInputIsRefused", want: porcupine.Ok, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, created()), op(1, create(fpB), 20, 30, reused()), op(2, get(), 40, 50, found(fpA, 0)),
		}},
		{name: "ConflictingInputMayWinTheRace", want: porcupine.Ok, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, reused()), op(1, create(fpB), 0, 10, created()), op(2, get(), 20, 30, found(fpB, 0)),
		}},
		{name: "AmbiguousCreateThatApplied", want: porcupine.Ok, history: []porcupine.Operation{
			op(0, create(fpA), 0, -1, linearizability.Output{}), op(1, create(fpA), 20, 30, replayed()),
		}},
		{name: "AmbiguousCreateThatDidNot", want: porcupine.Ok, history: []porcupine.Operation{
			op(0, create(fpA), 0, -1, linearizability.Output{}), op(1, get(), 20, 30, absent()),
			op(2, create(fpB), 40, 50, created()), op(3, get(), 60, 70, found(fpB, 0)),
		}},
		{name: "OneWinnerOthersLose", want: porcupine.Ok, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, created()),
			op(1, complete(1), 20, 40, lostTo(2)), op(2, complete(2), 21, 39, won()), op(3, complete(2), 22, 38, won()),
			op(4, get(), 50, 60, found(fpA, 2)),
		}},
		{name: "AmbiguousCompleteThatWon", want: porcupine.Ok, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, created()), op(1, complete(1), 20, -1, linearizability.Output{}),
			op(2, complete(2), 30, 40, lostTo(1)), op(3, get(), 50, 60, found(fpA, 1)),
		}},
		{name: "RetriedReplayAllowedWhenAsked", want: porcupine.Ok,
			opts: linearizability.Options{AllowRetriedReplay: true}, history: []porcupine.Operation{
				op(0, retried, 0, 10, replayed()), op(1, get(), 20, 30, found(fpA, 0)),
			}},
		{name: "TwoCreatesBothNew", want: porcupine.Illegal, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, created()), op(1, create(fpA), 5, 15, created()),
		}},
		{name: "TwoCreatesDifferentIDs", want: porcupine.Illegal, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, created()), op(1, create(fpA), 20, 30, linearizability.Output{ID: "job_other", Replayed: true}),
		}},
		{name: "ReplayOfNothing", want: porcupine.Illegal, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, replayed()),
		}},
		{name: "RetriedReplayStrict", want: porcupine.Illegal, history: []porcupine.Operation{
			op(0, retried, 0, 10, replayed()),
		}},
		{name: "SpuriousKeyReuse", want: porcupine.Illegal, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, created()), op(1, create(fpA), 20, 30, reused()),
		}},
		{name: "TwoWinners", want: porcupine.Illegal, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, created()), op(1, complete(1), 20, 30, won()), op(2, complete(2), 25, 35, won()),
		}},
		{name: "LostToAnAttemptThatLost", want: porcupine.Illegal, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, created()), op(1, complete(1), 20, 30, lostTo(2)), op(2, get(), 40, 50, found(fpA, 1)),
		}},
		{name: "LostWithNoWinner", want: porcupine.Illegal, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, created()), op(1, complete(1), 20, 30, lostTo(0)),
		}},
		{name: "StaleRead", want: porcupine.Illegal, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, created()), op(1, complete(1), 20, 30, won()),
			op(2, get(), 40, 50, found(fpA, 1)), op(3, get(), 60, 70, found(fpA, 0)),
		}},
		{name: "AcknowledgedCreateLost", want: porcupine.Illegal, history: []porcupine.Operation{
			op(0, create(fpA), 0, 10, created()), op(1, get(), 20, 30, absent()),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, info := linearizability.Check(tc.history, tc.opts, 0)
			if got != tc.want {
				t.Fatalf("check = %s, want %s", got, tc.want)
			}
			if got == porcupine.Illegal && tc.name == "TwoCreatesBothNew" {
				// The picture of a rejected history is what a failing run leaves behind.
				path, err := linearizability.Visualize(t.TempDir(), tc.opts, info)
				if err != nil {
					t.Fatal(err)
				}
				if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), "create(a)") {
					t.Fatalf("visualization %s: %v", path, err)
				}
			}
		})
	}
}

// TestPartitionsAreIndependent: a violation on one key is found among many
// linearizable keys, and keys do not constrain one another.
func TestPartitionsAreIndependent(t *testing.T) {
	t.Parallel()
	var ok, bad []porcupine.Operation
	for k := range 50 {
		key := string(rune('A'+k%26)) + string(rune('a'+k/26))
		a := op(0, create(fpA), int64(k), int64(k)+10, created())
		b := op(1, create(fpA), int64(k), int64(k)+10, replayed())
		for _, o := range []*porcupine.Operation{&a, &b} {
			in := o.Input.(linearizability.Input)
			in.Key = key
			o.Input = in
		}
		ok = append(ok, a, b)
		bad = append(bad, a, b)
	}
	bad[41].Output = created() // key 20: two creates both new
	if got, _ := linearizability.Check(ok, linearizability.Options{}, 0); got != porcupine.Ok {
		t.Fatalf("linearizable keys: %s", got)
	}
	if got, _ := linearizability.Check(bad, linearizability.Options{}, 0); got != porcupine.Illegal {
		t.Fatalf("one bad key among 50: %s, want Illegal", got)
	}
}
