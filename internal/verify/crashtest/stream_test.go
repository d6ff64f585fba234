package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/job"
)

// Streamed jobs through the kill -9 (issue 39): owners follow their jobs'
// streams at the stream_url the create named, as a client that resumes by
// itself does; the stack dies mid-stream and comes back on the same data
// and the same stream port. Each stream must resume after the client's
// last event, no delta may appear twice (nor be missing), and each job
// must end without an operator: the attempt the kill cut is declared
// unknown after its timeout, the reconciler settles it, and the fallback
// streams the answer.
const (
	streamOwners = 3
	// streamWords: a 300-token answer at 50 tokens a second streams for
	// about 6 s, so the kill (a second or two in) lands mid-stream. The
	// restarted stack declares the cut attempt unknown once its run's
	// timeout (demo-stream's 15 s) and the overdue grace have passed, and
	// the fallback streams the answer again: about 27 s after the restart.
	streamWords = 300
	// streamPause is how long a follower waits before it reconnects.
	streamPause = 200 * time.Millisecond
)

// streamed is one owner's streamed job and its follower.
type streamed struct {
	owner string
	id    string
	url   string
	user  *client
	mu    sync.Mutex
	got   []apiclient.StreamEvent
	// deltas is signalled at every delta received.
	deltas chan struct{}
	done   chan struct{}
	events []apiclient.StreamEvent
	conns  []apiclient.StreamConn
	err    error
}

// startStreamedJobs creates one demo-stream job ("stream": true) per owner,
// paced like a model on both providers, and follows each one's stream.
func startStreamedJobs(t *testing.T, ctx context.Context, base string) []*streamed {
	t.Helper()
	prompt := make([]string, streamWords)
	for i := range prompt {
		prompt[i] = letterWord(i)
	}
	pace := map[string]any{"first_token_ms": 300, "tokens_per_second": 50}
	var out []*streamed
	for i := range streamOwners {
		s := &streamed{owner: fmt.Sprintf("stream-owner-%d", i), deltas: make(chan struct{}, 1024), done: make(chan struct{})}
		s.user = newClient(t, base, secret, s.owner)
		code, body, err := s.user.do(ctx, http.MethodPost, "/v1/jobs", "streamed", map[string]any{"type": "demo-stream", "stream": true,
			"input": map[string]any{"prompt": strings.Join(prompt, " "), "simulate": map[string]any{"sim-primary": pace, "sim-fallback": pace}}})
		var j apiclient.Job
		if err != nil || code != http.StatusCreated || json.Unmarshal(body, &j) != nil || j.StreamURL == "" {
			t.Fatalf("create %s's streamed job: %d %s %v", s.owner, code, body, err)
		}
		s.id, s.url = j.ID, j.StreamURL
		go func() {
			defer close(s.done)
			s.events, s.conns, s.err = s.user.api.Follow(ctx, s.url, streamPause, func(e apiclient.StreamEvent) {
				s.mu.Lock()
				s.got = append(s.got, e)
				s.mu.Unlock()
				if e.Type == "output.delta" {
					s.deltas <- struct{}{}
				}
			})
		}()
		out = append(out, s)
	}
	return out
}

// awaitDelta waits until every follower has received a delta.
func awaitDelta(t *testing.T, ctx context.Context, ss []*streamed) {
	t.Helper()
	for _, s := range ss {
		select {
		case <-s.deltas:
		case <-ctx.Done():
			t.Fatalf("%s's stream sent no delta", s.owner)
		}
	}
}

// midStream says how far each follower had got when the stack died:
// every one must still be waiting for its job's end.
func midStream(t *testing.T, ss []*streamed) string {
	t.Helper()
	var parts []string
	for _, s := range ss {
		s.mu.Lock()
		n, last := len(s.got), s.got[len(s.got)-1]
		s.mu.Unlock()
		if last.Final() {
			t.Fatalf("%s's stream had ended (%s) before the kill: the drill needs it mid-stream", s.owner, last.Type)
		}
		parts = append(parts, fmt.Sprintf("%s %d events", s.owner, n))
	}
	return strings.Join(parts, ", ")
}

// checkStreams waits for every follower to reach its job's end and holds
// each stream to the drill's bounds.
func checkStreams(t *testing.T, ctx context.Context, ss []*streamed, restarted time.Time) {
	t.Helper()
	var figures []string
	for _, s := range ss {
		select {
		case <-s.done:
		case <-ctx.Done():
			t.Fatalf("%s's stream did not end", s.owner)
		}
		if s.err != nil {
			t.Errorf("%s: %v", s.owner, s.err)
			continue
		}
		// Each connection resumed strictly after the last event received
		// before it; one was cut by the kill and one resumed after it.
		cut, resumedAfterRestart := false, false
		seen := 0
		for i, c := range s.conns {
			want := ""
			if seen > 0 {
				want = s.events[seen-1].ID
			}
			if c.After != want {
				t.Errorf("%s: connection %d resumed after %q, want %q (the last event received)", s.owner, i+1, c.After, want)
			}
			if c.Err != nil && c.Events > 0 {
				cut = true
			}
			if cut && c.Status == http.StatusOK && c.Sent.After(restarted) && c.After != "" {
				resumedAfterRestart = true
			}
			seen += c.Events
		}
		if !cut || !resumedAfterRestart {
			t.Errorf("%s: connections %+v: want one cut by the kill, then one resumed after the restart", s.owner, s.conns)
		}
		// No delta twice, none missing: each attempt's seqs are 1, 2, …
		texts, discarded := map[int]*strings.Builder{}, map[int]string{}
		next := map[int]int{}
		var final apiclient.StreamEvent
		for _, e := range s.events {
			switch e.Type {
			case "output.delta":
				var d apiclient.Delta
				if err := json.Unmarshal(e.Data, &d); err != nil {
					t.Fatal(err)
				}
				if d.Seq != next[d.Attempt]+1 {
					t.Errorf("%s: attempt %d's delta %d after %d: repeated or missing text", s.owner, d.Attempt, d.Seq, next[d.Attempt])
				}
				next[d.Attempt] = d.Seq
				if texts[d.Attempt] == nil {
					texts[d.Attempt] = &strings.Builder{}
				}
				texts[d.Attempt].WriteString(d.Text)
			case "attempt.discarded":
				var d struct {
					Attempt int
					Reason  string
				}
				_ = json.Unmarshal(e.Data, &d)
				discarded[d.Attempt] = d.Reason
			}
			if e.Final() {
				final = e
			}
		}
		// The job ended with no operator, as GET says, with the text the
		// winner's deltas built.
		j, err := s.user.get(ctx, s.id)
		if err != nil {
			t.Fatal(err)
		}
		var fromStream, fromGet map[string]any
		_, body, err := s.user.do(ctx, http.MethodGet, "/v1/jobs/"+s.id, "", nil)
		if err != nil || json.Unmarshal(final.Data, &fromStream) != nil || json.Unmarshal(body, &fromGet) != nil || !reflect.DeepEqual(fromStream, fromGet) {
			t.Errorf("%s: the final event %s\nis not GET's body %s (%v)", s.owner, final.Data, body, err)
		}
		if final.Type != "job.succeeded" || j.Status != string(job.StatusSucceeded) {
			t.Errorf("%s: ended %s (%s), want succeeded", s.owner, final.Type, j.States())
			continue
		}
		var result struct{ Text string }
		_ = json.Unmarshal(j.Result, &result)
		if w := texts[j.CompletedBy]; w == nil || w.String() != result.Text {
			t.Errorf("%s: the winner's (attempt %d) deltas built %q, its result is %q", s.owner, j.CompletedBy, w, result.Text)
		}
		atts, err := s.user.attempts(ctx, s.id)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range atts {
			if a.Resolution != nil && a.Resolution.By != job.Reconciler {
				t.Errorf("%s: attempt %d was settled by %q, not the reconciler", s.owner, a.Number, a.Resolution.By)
			}
		}
		figures = append(figures, fmt.Sprintf("%s: %d connections, %d events, attempts %s, dropped %v, ended %s after the restart",
			s.owner, len(s.conns), len(s.events), j.States(), discarded, final.At.Sub(restarted).Round(time.Millisecond)))
	}
	t.Logf("streams through the kill: %s", strings.Join(figures, "; "))
}

// letterWord is the ith word of letters only ("a", …, "z", "ba", …):
// one token each for the simulators' tokenizer (which cuts digits apart).
func letterWord(i int) string {
	w := string(rune('a' + i%26))
	for i /= 26; i > 0; i /= 26 {
		w = string(rune('a'+i%26)) + w
	}
	return w
}
