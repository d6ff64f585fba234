package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Streamed jobs' log (issue 39): one conditional write per (job, attempt,
// seq), so a writer that retries never duplicates or reorders text; a
// read is each attempt's chunks strictly after the reader's cursor, in
// order, bounded.

func chunk(jobID string, attempt, seq int, text string) job.StreamChunk {
	return job.StreamChunk{JobID: jobID, Attempt: attempt, Seq: seq, Text: text, At: at(seq)}
}

func appendChunk(t *testing.T, st Store, c job.StreamChunk) bool {
	t.Helper()
	written, err := st.AppendChunk(context.Background(), c, at(0).Add(job.DefaultRetention))
	if err != nil {
		t.Fatalf("append %s %d.%d: %v", c.JobID, c.Attempt, c.Seq, err)
	}
	return written
}

func readChunks(t *testing.T, st Store, jobID, cursor string, attempts ...int) []job.StreamChunk {
	t.Helper()
	c, err := job.ParseStreamCursor(cursor)
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.ReadChunks(context.Background(), jobID, c, attempts)
	if err != nil {
		t.Fatalf("read %s after %s: %v", jobID, cursor, err)
	}
	return got
}

// places renders chunks as "attempt.seq:text".
func places(cs []job.StreamChunk) string {
	var b []string
	for _, c := range cs {
		b = append(b, fmt.Sprintf("%d.%d:%s", c.Attempt, c.Seq, c.Text))
	}
	return strings.Join(b, " ")
}

var streamTests = []test{
	{"ARepeatIsNoDuplicate", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		if !appendChunk(t, st, chunk("job_a", 1, 1, "Hello")) {
			t.Fatal("the first write of a chunk was not written")
		}
		// A writer's retry, or another text at the same place: the first
		// stays, the repeat is an outcome.
		for _, text := range []string{"Hello", "Other"} {
			if appendChunk(t, st, chunk("job_a", 1, 1, text)) {
				t.Fatalf("a repeat of 1.1 (%q) was written again", text)
			}
		}
		if got := places(readChunks(t, st, "job_a", "0", 1)); got != "1.1:Hello" {
			t.Fatalf("read %q, want 1.1:Hello", got)
		}
	}},
	{"ReadsInOrderStrictlyAfterTheCursor", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		// Written out of order (as no writer does): read in order anyway.
		for _, seq := range []int{3, 1, 2, 5, 4} {
			appendChunk(t, st, chunk("job_a", 1, seq, fmt.Sprintf("a%d", seq)))
		}
		for seq := 1; seq <= 3; seq++ {
			appendChunk(t, st, chunk("job_a", 2, seq, fmt.Sprintf("b%d", seq)))
		}
		appendChunk(t, st, chunk("job_a", 12, 1, "l1")) // sorts after 2 as a number, not as text
		appendChunk(t, st, chunk("job_b", 1, 1, "other job"))
		for _, tc := range []struct {
			cursor   string
			attempts []int
			want     string
		}{
			{"0", []int{1, 2, 12}, "1.1:a1 1.2:a2 1.3:a3 1.4:a4 1.5:a5 2.1:b1 2.2:b2 2.3:b3 12.1:l1"},
			{"1.2,2.0", []int{1, 2}, "1.3:a3 1.4:a4 1.5:a5 2.1:b1 2.2:b2 2.3:b3"},
			{"1.5,2.3", []int{1, 2}, ""},
			{"1.9", []int{1}, ""},
			{"1.2d,2.1", []int{1, 2}, "2.2:b2 2.3:b3"}, // a discarded attempt is not read
			{"1.1", []int{2}, "2.1:b1 2.2:b2 2.3:b3"},
			{"0", []int{3}, ""},
		} {
			if got := places(readChunks(t, st, "job_a", tc.cursor, tc.attempts...)); got != tc.want {
				t.Errorf("after %s of %v: %q, want %q", tc.cursor, tc.attempts, got, tc.want)
			}
		}
	}},
	{"KeepsWhatWasWritten", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		big := strings.Repeat("é", job.MaxChunkBytes/2)
		want := []job.StreamChunk{
			{JobID: "job_a", Attempt: 1, Seq: 1, Text: "Ünïcode ☃ \"quoted\"\n", At: at(1).Add(123 * time.Millisecond)},
			{JobID: "job_a", Attempt: 1, Seq: 2, Text: big, At: at(2)},
			{JobID: "job_a", Attempt: 1, Seq: 3, Text: "", Last: true, At: at(3)},
		}
		for _, c := range want {
			appendChunk(t, st, c)
		}
		got := readChunks(t, st, "job_a", "0", 1)
		if len(got) != len(want) {
			t.Fatalf("read %d chunks, want %d", len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.JobID != w.JobID || g.Attempt != w.Attempt || g.Seq != w.Seq || g.Text != w.Text || g.Last != w.Last || !g.At.Equal(w.At) {
				t.Errorf("chunk %d: %+v, want %+v", i, g, w)
			}
		}
	}},
	{"AReadIsBounded", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		n := lifecycle.MaxChunksPerRead + 5
		var wg sync.WaitGroup
		for seq := 1; seq <= n; seq++ {
			wg.Go(func() { appendChunk(t, st, chunk("job_a", 1, seq, fmt.Sprint(seq))) })
		}
		wg.Wait()
		appendChunk(t, st, chunk("job_a", 2, 1, "b"))
		first := readChunks(t, st, "job_a", "0", 1, 2)
		if len(first) != lifecycle.MaxChunksPerRead || first[0].Seq != 1 || first[len(first)-1].Seq != lifecycle.MaxChunksPerRead {
			t.Fatalf("first read: %d chunks, %s…", len(first), places(first[:min(3, len(first))]))
		}
		rest := readChunks(t, st, "job_a", fmt.Sprintf("1.%d", lifecycle.MaxChunksPerRead), 1, 2)
		if got := len(rest); got != 6 || rest[0].Seq != lifecycle.MaxChunksPerRead+1 || rest[5].Attempt != 2 {
			t.Fatalf("second read: %s", places(rest))
		}
	}},
	{"ConcurrentWritersOfASeqOneWins", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		for round := range st.rounds() {
			var wg sync.WaitGroup
			var wins atomic.Int32
			var winner atomic.Value
			for w := range 4 {
				wg.Go(func() {
					text := fmt.Sprintf("writer %d", w)
					if appendChunk(t, st, chunk("job_a", 1, round+1, text)) {
						wins.Add(1)
						winner.Store(text)
					}
				})
			}
			wg.Wait()
			if wins.Load() != 1 {
				t.Fatalf("round %d: %d writers of one seq wrote it, want exactly 1", round, wins.Load())
			}
			got := readChunks(t, st, "job_a", fmt.Sprintf("1.%d", round), 1)
			if len(got) != 1 || got[0].Text != winner.Load() {
				t.Fatalf("round %d: read %q, want the winner's %q", round, places(got), winner.Load())
			}
		}
	}},
	{"JobStatus", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		j := createAt(t, st, "a", "k", at(0))
		// Eventually consistent: a test's store has no replica behind, but
		// a real one may answer the status before the last write.
		if s, err := st.JobStatus(ctx, j.ID); err != nil || s != job.StatusPending {
			t.Fatalf("status of a new job: %q %v", s, err)
		}
		on(t, st).apply(job.DecideCancel(j, at(1)))
		if s, err := st.JobStatus(ctx, j.ID); err != nil || s != job.StatusCancelled {
			t.Fatalf("status of a cancelled job: %q %v", s, err)
		}
		if _, err := st.JobStatus(ctx, job.NewID("a", "none")); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("status of no job: %v", err)
		}
	}},
}
