package job_test

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

func TestStreamCursor(t *testing.T) {
	t.Parallel()
	good := []struct {
		text string
		want job.StreamCursor
	}{
		{"0", job.StreamCursor{}},
		{"", job.StreamCursor{}},
		{"1.0", job.StreamCursor{Attempts: []job.CursorAttempt{{Number: 1}}}},
		{"1.12,2.5d", job.StreamCursor{Attempts: []job.CursorAttempt{{Number: 1, Seq: 12}, {Number: 2, Seq: 5, Discarded: true}}}},
		{"1.3d,2.7,f", job.StreamCursor{Attempts: []job.CursorAttempt{{Number: 1, Seq: 3, Discarded: true}, {Number: 2, Seq: 7}}, Final: true}},
		{"f", job.StreamCursor{Final: true}},
	}
	for _, tc := range good {
		got, err := job.ParseStreamCursor(tc.text)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseStreamCursor(%q) = %+v, %v; want %+v", tc.text, got, err, tc.want)
		}
		if want := tc.text; want != "" && got.String() != want {
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), want)
		}
	}
	bad := []string{"x", "1", "1.", ".1", "0.1", "01.1", "1.01", "1.-1", "+1.1", "1.1,1.2", "2.1,1.1", "f,1.1", "1.1,f,f",
		"1.1dd", "1.1,", ",1.1", "1.99999999999", "1 .1", "1.1\n", strings.Repeat("1", job.MaxCursorBytes+1),
		strings.TrimSuffix(strings.Repeat("1.1,", job.MaxStreamAttempts+1), ",")}
	for _, s := range bad {
		if c, err := job.ParseStreamCursor(s); !errors.Is(err, job.ErrInvalidCursor) {
			t.Errorf("ParseStreamCursor(%q) = %+v, %v; want ErrInvalidCursor", s, c, err)
		}
	}
}

func TestStreamBatching(t *testing.T) {
	t.Parallel()
	b := job.DefaultStreamBatching()
	tests := []struct {
		name             string
		pending, written int
		since            time.Duration
		want             bool
	}{
		{"NothingToWrite", 0, 3, time.Hour, false},
		{"FirstTextAtOnce", 1, 0, 0, true},
		{"TooSoon", 10, 1, 100 * time.Millisecond, false},
		{"Due", 10, 1, 200 * time.Millisecond, true},
		{"FullEarly", 1024, 5, time.Millisecond, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := b.Flush(tc.pending, tc.written, tc.since); got != tc.want {
				t.Errorf("Flush(%d, %d, %s) = %v, want %v", tc.pending, tc.written, tc.since, got, tc.want)
			}
		})
	}
}

func TestSplitChunkText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", job.MaxChunkBytes) // 2 bytes a character
	parts := job.SplitChunkText("a" + long)
	if len(parts) != 3 {
		t.Fatalf("%d parts, want 3", len(parts))
	}
	for _, p := range parts {
		if len(p) > job.MaxChunkBytes || !strings.HasSuffix(p, "é") {
			t.Errorf("a part of %d bytes ends %q: cut inside a character or too long", len(p), p[len(p)-2:])
		}
	}
	if strings.Join(parts, "") != "a"+long {
		t.Error("the parts do not join to the text")
	}
	if got := job.SplitChunkText(""); got != nil {
		t.Errorf("SplitChunkText(\"\") = %q, want none", got)
	}
}

// streamJob is a job with the given attempts (number, provider, state,
// hedge), its status and winner.
func streamJob(status job.Status, completedBy int, attempts ...job.Attempt) job.Job {
	j := job.Job{ID: "j1", Status: status, CompletedBy: completedBy, AttemptCount: len(attempts)}
	for _, a := range attempts {
		a.JobID = "j1"
		j.Attempts = append(j.Attempts, a)
	}
	return j
}

func chunk(attempt, seq int, text string) job.StreamChunk {
	return job.StreamChunk{JobID: "j1", Attempt: attempt, Seq: seq, Text: text}
}

// brief renders events as "type:attempt:seq:text|reason".
func brief(evs []job.StreamEvent) []string {
	var out []string
	for _, e := range evs {
		s := e.Type
		switch e.Type {
		case job.EventAttemptStarted:
			s += ":" + itoa(e.Attempt) + ":" + e.Provider
			if e.Hedge {
				s += ":hedge"
			}
			if e.Fallback {
				s += ":fallback"
			}
		case job.EventOutputDelta:
			s += ":" + itoa(e.Attempt) + ":" + itoa(e.Seq) + ":" + e.Text
		case job.EventAttemptDiscarded:
			s += ":" + itoa(e.Attempt) + "|" + e.Reason
		}
		out = append(out, s)
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestNextStreamEvents(t *testing.T) {
	t.Parallel()
	running := func(n int, p string) job.Attempt {
		return job.Attempt{Number: n, Provider: p, State: job.AttemptRunning}
	}
	state := func(a job.Attempt, s job.AttemptState) job.Attempt { a.State = s; return a }
	hedge := func(a job.Attempt) job.Attempt { a.Hedge = true; return a }
	tests := []struct {
		name   string
		j      job.Job
		chunks []job.StreamChunk
		after  string
		want   []string
		cursor string
	}{
		{"Pending", streamJob(job.StatusPending, 0), nil, "", nil, "0"},
		{"FirstWords", streamJob(job.StatusRunning, 0, running(1, "p")), []job.StreamChunk{chunk(1, 1, "Hel"), chunk(1, 2, "lo")}, "",
			[]string{"attempt.started:1:p", "output.delta:1:1:Hel", "output.delta:1:2:lo"}, "1.2"},
		{"ResumesStrictlyAfter", streamJob(job.StatusRunning, 0, running(1, "p")), []job.StreamChunk{chunk(1, 2, "lo"), chunk(1, 3, "!")}, "1.2",
			[]string{"output.delta:1:3:!"}, "1.3"},
		{"AGapIsReadAgain", streamJob(job.StatusRunning, 0, running(1, "p")), []job.StreamChunk{chunk(1, 1, "a"), chunk(1, 3, "c")}, "",
			[]string{"attempt.started:1:p", "output.delta:1:1:a"}, "1.1"},
		{"AnAttemptTheJobDoesNotShowYetWaits", streamJob(job.StatusRunning, 0, running(1, "p")), []job.StreamChunk{chunk(2, 1, "x")}, "1.0",
			nil, "1.0"},
		{"Fallback", streamJob(job.StatusRunning, 0, state(running(1, "p"), job.AttemptFailed), running(2, "q")),
			[]job.StreamChunk{chunk(1, 1, "abc"), chunk(2, 1, "xyz")}, "",
			[]string{"attempt.started:1:p", "output.delta:1:1:abc", "attempt.discarded:1|failed", "attempt.started:2:q:fallback", "output.delta:2:1:xyz"},
			"1.1d,2.1"},
		{"HedgeBothTagged", streamJob(job.StatusRunning, 0, running(1, "p"), hedge(running(2, "q"))),
			[]job.StreamChunk{chunk(2, 1, "B"), chunk(1, 1, "A")}, "",
			[]string{"attempt.started:1:p", "output.delta:1:1:A", "attempt.started:2:q:hedge", "output.delta:2:1:B"}, "1.1,2.1"},
		{"HedgeWinnerAndLoser", streamJob(job.StatusSucceeded, 2, state(running(1, "p"), job.AttemptDiscarded), state(hedge(running(2, "q")), job.AttemptSucceeded)),
			[]job.StreamChunk{chunk(1, 2, "A2"), chunk(2, 2, "B2")}, "1.1,2.1",
			[]string{"output.delta:1:2:A2", "attempt.discarded:1|lost_race", "output.delta:2:2:B2", "job.succeeded"}, "1.2d,2.2,f"},
		{"LoserStillRunningAtTheEnd", streamJob(job.StatusSucceeded, 1, state(running(1, "p"), job.AttemptSucceeded), hedge(running(2, "q"))),
			nil, "1.4,2.1", []string{"attempt.discarded:2|job_ended", "job.succeeded"}, "1.4,2.1d,f"},
		{"Cancelled", streamJob(job.StatusCancelled, 0, running(1, "p")), []job.StreamChunk{chunk(1, 1, "a")}, "1.0",
			[]string{"output.delta:1:1:a", "attempt.discarded:1|cancelled", "job.cancelled"}, "1.1d,f"},
		{"CutMidStreamIsDropped", streamJob(job.StatusUnknown, 0, state(running(1, "p"), job.AttemptUnknown)), []job.StreamChunk{chunk(1, 1, "a"), chunk(1, 2, "b")}, "1.1",
			[]string{"output.delta:1:2:b", "attempt.discarded:1|cut"}, "1.2d"},
		{"NoTextOfADroppedAttempt", streamJob(job.StatusUnknown, 0, state(running(1, "p"), job.AttemptUnknown)), []job.StreamChunk{chunk(1, 3, "late")}, "1.2d",
			nil, "1.2d"},
		{"ACutAttemptSettledAsTheWinner", streamJob(job.StatusSucceeded, 1, state(running(1, "p"), job.AttemptSucceeded)), nil, "1.2d",
			[]string{"job.succeeded"}, "1.2d,f"},
		{"FailedWithNoProviderLeft", streamJob(job.StatusFailed, 0, state(running(1, "p"), job.AttemptFailed)), nil, "",
			[]string{"attempt.started:1:p", "attempt.discarded:1|failed", "job.failed"}, "1.0d,f"},
		{"NothingAfterTheEnd", streamJob(job.StatusSucceeded, 1, state(running(1, "p"), job.AttemptSucceeded)), []job.StreamChunk{chunk(1, 1, "a")}, "1.1,f",
			nil, "1.1,f"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := job.ParseStreamCursor(tc.after)
			if err != nil {
				t.Fatal(err)
			}
			evs, next := job.NextStreamEvents(tc.j, tc.chunks, c)
			if got := brief(evs); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("events\n got %q\nwant %q", got, tc.want)
			}
			if next.String() != tc.cursor {
				t.Errorf("cursor %q, want %q", next.String(), tc.cursor)
			}
			if n := len(evs); n > 0 && evs[n-1].ID != next.String() {
				t.Errorf("the last event's id %q is not the cursor after it %q", evs[n-1].ID, next.String())
			}
			for _, e := range evs {
				if strings.HasPrefix(e.Type, "job.") && e.Status != tc.j.Status {
					t.Errorf("final event %s carries status %s", e.Type, e.Status)
				}
			}
		})
	}
}

// TestAStreamResumesFromEveryEvent: a reader that resumes after any event
// (its id) is sent exactly the events that followed it, so a client cut
// at any event boundary reassembles each attempt's text with no gap and
// no repeat.
func TestAStreamResumesFromEveryEvent(t *testing.T) {
	t.Parallel()
	j := streamJob(job.StatusSucceeded, 2,
		job.Attempt{Number: 1, Provider: "p", State: job.AttemptFailed},
		job.Attempt{Number: 2, Provider: "q", State: job.AttemptSucceeded},
		job.Attempt{Number: 3, Provider: "r", State: job.AttemptDiscarded, Hedge: true})
	var chunks []job.StreamChunk
	var want2 strings.Builder
	for s := 1; s <= 20; s++ {
		chunks = append(chunks, chunk(1, s, "one "), chunk(3, s, "three "))
		text := "w" + strings.Repeat("x", s%3) + " "
		chunks = append(chunks, chunk(2, s, text))
		want2.WriteString(text)
	}
	all, end := job.NextStreamEvents(j, chunks, job.StreamCursor{})
	if !end.Final {
		t.Fatal("the stream did not end")
	}
	for k := range all {
		c, err := job.ParseStreamCursor(all[k].ID)
		if err != nil {
			t.Fatalf("event %d's id %q: %v", k, all[k].ID, err)
		}
		rest, _ := job.NextStreamEvents(j, chunks, c)
		if !reflect.DeepEqual(rest, all[k+1:]) && !(len(rest) == 0 && k == len(all)-1) {
			t.Fatalf("resumed after event %d (%s): %d events, want the %d that followed it", k, all[k].ID, len(rest), len(all)-k-1)
		}
		// The client's reassembly: the winner's text from the events up
		// to k, then from the resumed rest.
		var got strings.Builder
		for _, e := range append(append([]job.StreamEvent{}, all[:k+1]...), rest...) {
			if e.Type == job.EventOutputDelta && e.Attempt == 2 {
				got.WriteString(e.Text)
			}
		}
		if got.String() != want2.String() {
			t.Fatalf("cut after event %d: the winner's text is %q, want %q", k, got.String(), want2.String())
		}
	}
}
