package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// submitStreamed submits a demo-stream job created with "stream": true
// (submit --stream) whose answer repeats prompt, the providers scripted
// (and paced) by simulate.
func (c cli) submitStreamed(t *testing.T, prompt, simulate string) jobView {
	t.Helper()
	input, err := json.Marshal(prompt)
	if err != nil {
		t.Fatal(err)
	}
	r := c.must(t, "submit", "--type", "demo-stream", "--stream", "--json", "--input", `{"prompt":`+string(input)+`,"simulate":`+simulate+`}`)
	var j jobView
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.StreamURL == "" {
		t.Fatalf("submit --stream printed %q (%v)", r.stdout, err)
	}
	return j
}

// writes records every Write a command makes to stdout, in order.
type writes struct {
	mu  sync.Mutex
	all []string
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all = append(w.all, string(p))
	return len(p), nil
}

func (w *writes) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.all, "")
}

const paced = `{"sim-primary":{"first_token_ms":100,"tokens_per_second":100},"sim-fallback":{"first_token_ms":100,"tokens_per_second":100}}`

func words(n int, tag string) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("%s%d", tag, i)
	}
	return strings.Join(w, " ")
}

// TestJobsWatchStream: `onejob jobs watch --stream` prints a streamed
// job's answer as it forms (several writes before the job's end), then
// the job's end as watch does; a fallback's dropped attempt is named; a
// connection cut mid-event is resumed after the last whole event, nothing
// printed twice; what the answer carries reaches the terminal escaped,
// its lines kept; --json prints each event.
func TestJobsWatchStream(t *testing.T) {
	t.Parallel()
	t.Run("FormsThenEnds", func(t *testing.T) {
		t.Parallel()
		c := owner(t, "stream")
		j := c.submitStreamed(t, words(40, "w"), paced)
		var out writes
		var errs strings.Builder
		code := runJobs(t.Context(), []string{"watch", "--stream", j.ID}, c.getenv, &out, &errs)
		done := c.getJob(t, j.ID)
		text := resultText(t, done)
		if code != 0 || !strings.HasPrefix(out.String(), text+"\nsucceeded  #1 sim-primary succeeded\n") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant the text %q", code, out.String(), errs.String(), text)
		}
		var pieces int
		for _, w := range out.all {
			if strings.HasPrefix(w, "\n") {
				break
			}
			pieces++
		}
		if pieces < 2 || !strings.Contains(out.String(), "  result  ") {
			t.Errorf("the text came in %d writes before the end (want it printed as it forms)\n%s", pieces, out.all)
		}
		if errs.String() != "[attempt 1 on sim-primary started]\n" {
			t.Errorf("stderr %q", errs.String())
		}
	})
	t.Run("FallbackNamesTheDroppedAttempt", func(t *testing.T) {
		t.Parallel()
		c := owner(t, "stream-fallback")
		j := c.submitStreamed(t, "over to the fallback", `{"sim-primary":{"outcome":"error"},"sim-fallback":{"first_token_ms":50,"tokens_per_second":100}}`)
		r := c.run(t, "watch", j.ID, "--stream")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "sim-fallback answered: over to the fallback\nsucceeded  #1 sim-primary failed(retryable) → #2 sim-fallback succeeded\n") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		want := "[attempt 1 on sim-primary started]\n[attempt 1 (sim-primary): failed; its text is dropped]\n[attempt 2 on sim-fallback started (a fallback)]\n"
		if r.stderr != want {
			t.Errorf("stderr %q, want %q", r.stderr, want)
		}
	})
	t.Run("ResumesAfterACutMidEvent", func(t *testing.T) {
		t.Parallel()
		c := owner(t, "stream-cut")
		j := c.submitStreamed(t, words(60, "c"), `{"sim-primary":{"first_token_ms":100,"tokens_per_second":60}}`)
		apiStack.front.cutNext(j.ID, 3)
		r := c.run(t, "watch", j.ID, "--stream")
		text := resultText(t, c.getJob(t, j.ID))
		if r.code != 0 || !strings.HasPrefix(r.stdout, text+"\nsucceeded") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant the text %q once", r.code, r.stdout, r.stderr, text)
		}
		ids := apiStack.front.lastEventIDs(j.ID)
		if len(ids) != 2 || ids[0] != "" || ids[1] == "" {
			t.Errorf("connections resumed after %q", ids)
		}
		if !strings.Contains(r.stderr, "; resuming after the last event in 1s (1/5)\n") {
			t.Errorf("stderr %q", r.stderr)
		}
	})
	t.Run("TerminalSafe", func(t *testing.T) {
		t.Parallel()
		c := owner(t, "stream-safe")
		j := c.submitStreamed(t, "red \x1b[31malert\x07\nsecond line\u202e", paced)
		r := c.run(t, "watch", j.ID, "--stream")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "sim-primary answered: red \\x1b[31malert\\x07\nsecond line\\u202e\nsucceeded") {
			t.Fatalf("exit %d\nstdout:\n%q\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		if strings.ContainsAny(r.stdout, "\x1b\x07\u202e") {
			t.Errorf("a control character reached the terminal: %q", r.stdout)
		}
	})
	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		c := owner(t, "stream-json")
		j := c.submitStreamed(t, words(10, "j"), paced)
		r := c.run(t, "watch", j.ID, "--stream", "--json")
		var types []string
		var text strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var ev struct {
				ID   string          `json:"id"`
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.ID == "" {
				t.Fatalf("line %q: %v", line, err)
			}
			types = append(types, ev.Type)
			if ev.Type == "output.delta" {
				var d struct{ Text string }
				_ = json.Unmarshal(ev.Data, &d)
				text.WriteString(d.Text)
			}
		}
		if r.code != 0 || types[0] != "attempt.started" || types[len(types)-1] != "job.succeeded" || text.String() != resultText(t, c.getJob(t, j.ID)) {
			t.Fatalf("exit %d types %v text %q\nstderr %s", r.code, types, text.String(), r.stderr)
		}
	})
}

// getJob reads a job through the CLI.
func (c cli) getJob(t *testing.T, id string) jobView {
	t.Helper()
	r := c.must(t, "get", id, "--json")
	var j jobView
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatal(err)
	}
	return j
}

// resultText is a demo job's answer's text.
func resultText(t *testing.T, j jobView) string {
	t.Helper()
	var r struct{ Text string }
	if err := json.Unmarshal(j.Result, &r); err != nil || r.Text == "" {
		t.Fatalf("job %s result %s", j.ID, j.Result)
	}
	return r.Text
}
