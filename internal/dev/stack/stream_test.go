package stack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/provider"
)

// Issue 39 on the whole local stack: a job created with "stream": true
// runs through Step Functions and the run function, whose webhook adapter
// streams the demo simulator's answer (paced: first token, token rate)
// into the log in dynalite; its owner reads it at the stream_url the job
// view names, served on its own port with the stack's tokens.

// slowDemo is the demo type with a 20 s timeout: its streams are not cut
// by the demo's 2 s on a loaded machine, nor when slow enough to cancel
// midway. rawDemo is slowDemo without a stream field: its deltas are the
// answer's raw JSON fragments, from the first one on.
const (
	slowDemo = "demo-slow"
	rawDemo  = "demo-raw"
)

func withSlowDemo(t *testing.T) *jobtype.Catalog {
	t.Helper()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := os.DirFS(filepath.Join(root, "internal", "jobtype"))
	files := fstest.MapFS{}
	for _, top := range []string{"types", "cases"} {
		err := fs.WalkDir(dir, top, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := fs.ReadFile(dir, path)
			files[path] = &fstest.MapFile{Data: b}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var spec map[string]any
	if err := json.Unmarshal(files["types/demo.json"].Data, &spec); err != nil {
		t.Fatal(err)
	}
	spec["timeout"] = "20s"
	for _, name := range []string{slowDemo, rawDemo} {
		spec["name"] = name
		if name == rawDemo {
			delete(spec, "stream_field")
		}
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		files["types/"+name+".json"] = &fstest.MapFile{Data: b}
		files["cases/"+name+"/echo.json"] = files["cases/demo/echo.json"]
	}
	cat, err := jobtype.LoadFS(files)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// watcher stands between the run function and the demo simulator's
// sim-primary, as the network would: it passes every request on and its
// answer back as it streams, and records each one whose client left
// before its answer ended, by Idempotency-Key (what the simulator's own
// server sees of a stream closed by its client: its connection gone).
type watcher struct {
	srv    *httptest.Server
	target atomic.Pointer[url.URL]
	mu     sync.Mutex
	closed map[string]bool
	moved  chan struct{}
}

func newWatcher(t *testing.T) *watcher {
	t.Helper()
	w := &watcher{closed: map[string]bool{}, moved: make(chan struct{}, 64)}
	upstream := ownClient(t)
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		up, err := http.NewRequestWithContext(r.Context(), r.Method, w.target.Load().String()+r.URL.Path, r.Body)
		if err != nil {
			rw.WriteHeader(http.StatusBadGateway)
			return
		}
		up.Header = r.Header.Clone()
		up.ContentLength = r.ContentLength
		resp, err := upstream.Do(up)
		if err != nil {
			rw.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			rw.Header()[k] = vs
		}
		rw.WriteHeader(resp.StatusCode)
		rc := http.NewResponseController(rw)
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := rw.Write(buf[:n]); werr != nil || rc.Flush() != nil {
					w.sawClosed(r)
					return
				}
			}
			if err != nil {
				if r.Context().Err() != nil {
					w.sawClosed(r)
				}
				return
			}
		}
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// sawClosed records that r's client left before its answer ended.
func (w *watcher) sawClosed(r *http.Request) {
	w.mu.Lock()
	w.closed[r.Header.Get("Idempotency-Key")] = true
	w.mu.Unlock()
	select {
	case w.moved <- struct{}{}:
	default:
	}
}

// closedBy waits until a request whose key ends with suffix was closed
// by its client; the deadline only bounds a failure.
func (w *watcher) closedBy(t *testing.T, suffix string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		w.mu.Lock()
		for k := range w.closed {
			if strings.HasSuffix(k, suffix) {
				w.mu.Unlock()
				return
			}
		}
		w.mu.Unlock()
		select {
		case <-w.moved:
		case <-deadline:
			t.Fatalf("the simulator never saw the stream of %s closed", suffix)
		}
	}
}

// streamEvent is one server-sent event.
type streamEvent struct {
	id, typ string
	data    json.RawMessage
}

// readEvent reads the next event, skipping comments; io.EOF at the end.
func readEvent(r *bufio.Reader) (streamEvent, error) {
	var ev streamEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && ev.typ == "" {
				return ev, io.EOF
			}
			return ev, fmt.Errorf("cut after %q: %w", line, err)
		}
		switch line = strings.TrimSuffix(line, "\n"); {
		case line == "" && ev.typ != "":
			return ev, nil
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = json.RawMessage(line[6:])
		}
	}
}

// follower reads one job's stream as a client would, checking every
// delta follows the last (no gap, no duplicate).
type follower struct {
	t       *testing.T
	token   string
	text    map[int]string
	seq     map[int]int
	dropped map[int]string
	kinds   []string
	final   *streamEvent
	first   time.Duration // from the stream's start to its first delta
}

func (f *follower) open(ctx context.Context, streamURL string) *http.Response {
	f.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, streamURL, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	resp, err := ownClient(f.t).Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp
}

// follow reads the stream to its end; onDelta runs after each delta.
func (f *follower) follow(streamURL string, onDelta func()) {
	f.t.Helper()
	f.text, f.seq, f.dropped = map[int]string{}, map[int]int{}, map[int]string{}
	start := time.Now()
	resp := f.open(context.Background(), streamURL)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		f.t.Fatalf("stream %s: %d %s", streamURL, resp.StatusCode, b)
	}
	r := bufio.NewReader(resp.Body)
	for f.final == nil {
		ev, err := readEvent(r)
		if err != nil {
			f.t.Fatalf("stream %s: %v", streamURL, err)
		}
		kind := ev.typ
		switch ev.typ {
		case job.EventOutputDelta:
			var d struct {
				Attempt, Seq int
				Text         string
			}
			if err := json.Unmarshal(ev.data, &d); err != nil {
				f.t.Fatal(err)
			}
			if d.Seq != f.seq[d.Attempt]+1 {
				f.t.Fatalf("attempt %d: delta %d after %d", d.Attempt, d.Seq, f.seq[d.Attempt])
			}
			if f.first == 0 {
				f.first = time.Since(start)
			}
			f.seq[d.Attempt], f.text[d.Attempt] = d.Seq, f.text[d.Attempt]+d.Text
			kind = fmt.Sprintf("delta %d", d.Attempt)
			if onDelta != nil {
				onDelta()
			}
		case job.EventAttemptDiscarded:
			var d struct {
				Attempt int
				Reason  string
			}
			if err := json.Unmarshal(ev.data, &d); err != nil {
				f.t.Fatal(err)
			}
			f.dropped[d.Attempt] = d.Reason
			kind = fmt.Sprintf("discarded %d %s", d.Attempt, d.Reason)
		case job.EventAttemptStarted:
		default:
			e := ev
			f.final = &e
		}
		if n := len(f.kinds); n == 0 || f.kinds[n-1] != kind {
			f.kinds = append(f.kinds, kind)
		}
	}
}

// createStreamed creates a job of jobType asking to stream, and returns
// its view.
func createStreamed(t *testing.T, c *client, jobType, key string) map[string]any {
	t.Helper()
	code, _, body := c.do(http.MethodPost, "/v1/jobs", key, map[string]any{"type": jobType, "input": map[string]any{"prompt": "stream " + key},
		"stream": true})
	if code != http.StatusCreated {
		t.Fatalf("create %s: %d %s", key, code, body)
	}
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func viewOf(t *testing.T, c *client, id string) map[string]any {
	t.Helper()
	code, _, body := c.do(http.MethodGet, "/v1/jobs/"+id, "", nil)
	var v map[string]any
	if code != http.StatusOK || json.Unmarshal(body, &v) != nil {
		t.Fatalf("get %s: %d %s", id, code, body)
	}
	return v
}

func TestStreamsOnTheLocalStack(t *testing.T) {
	t.Parallel()
	w := newWatcher(t)
	b := job.Budget{Amount: job.NanosPerUSD, Period: 24 * time.Hour, Prices: stack.DemoPrices()}
	s := ownStack(t, "streams", stack.Config{CertifyDemo: true, Catalog: withSlowDemo(t), Budget: b,
		DemoStream: sim.StreamOptions{FirstToken: 300 * time.Millisecond, TokenRate: 50},
		DemoProviders: func(c provider.Config) provider.Config {
			c = stack.BreakersNeverAct(c)
			for i, p := range c.Providers {
				if p.Name == sim.DemoPrimary {
					c.Providers[i].BaseURL = w.srv.URL + "/" + sim.DemoPrimary
				}
			}
			return c
		}})
	target, err := url.Parse(s.SimURL)
	if err != nil {
		t.Fatal(err)
	}
	w.target.Store(target)
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(s.JWTSecret())})
	if err != nil {
		t.Fatal(err)
	}
	token := func(sub string) string {
		tok, err := tokens.Mint(apigwlocal.Grant{Subject: sub, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	// Owners follow their jobs' answers as they form, at the address the
	// job view names; another owner is told there is no such job.
	t.Run("OwnersFollowTheirAnswers", func(t *testing.T) {
		owners := []string{"stream-a", "stream-b", "stream-c"}
		var wg sync.WaitGroup
		var firsts sync.Map
		for _, o := range owners {
			wg.Go(func() {
				c := newClient(t, s, o)
				v := createStreamed(t, c, slowDemo, o+"-1")
				id, streamURL := v["id"].(string), v["stream_url"].(string)
				if !strings.HasPrefix(streamURL, s.StreamURL+"/v1/jobs/") || v["stream"] != true {
					t.Errorf("job view: stream %v at %q, want under %s", v["stream"], streamURL, s.StreamURL)
					return
				}
				f := &follower{t: t, token: token(o)}
				f.follow(streamURL, nil)
				want := viewOf(t, c, id)
				var final map[string]any
				if err := json.Unmarshal(f.final.data, &final); err != nil {
					t.Error(err)
					return
				}
				if !reflect.DeepEqual(final, want) || f.final.typ != job.FinalEventType(job.StatusSucceeded) {
					t.Errorf("final %s %s, want GET's %v", f.final.typ, f.final.data, want)
				}
				if got, res := f.text[1], want["result"].(map[string]any)["text"]; got != res || f.seq[1] < 2 {
					t.Errorf("%s reassembled %q in %d deltas, want the answer's %q", o, got, f.seq[1], res)
				}
				firsts.Store(o, f.first)
				other := &follower{t: t, token: token("stream-nobody")}
				resp := other.open(context.Background(), streamURL)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("another owner's stream: %d, want 404", resp.StatusCode)
				}
			})
		}
		wg.Wait()
		if st := s.Sim.Stats()[sim.DemoPrimary]; st.Streamed < len(owners) {
			t.Fatalf("the simulator streamed %d answers, want %d", st.Streamed, len(owners))
		}
		var line []string
		firsts.Range(func(k, v any) bool { line = append(line, fmt.Sprintf("%s %s", k, v)); return true })
		t.Logf("first delta from the create (Step Functions, the run, the simulator's first token of 300 ms, the log, a read): %s", strings.Join(line, ", "))
	})

	// Cancelling a job whose attempt streams: the run closes the
	// provider's stream (the simulator's server sees its client leave),
	// the job's stream drops the attempt's text and ends job.cancelled,
	// and the owner's budget is charged what the attempt cost to then.
	t.Run("ACancelClosesTheProvidersStream", func(t *testing.T) {
		if err := s.Sim.SetScript(sim.DemoPrimary, sim.DemoScript{FirstTokenMS: 200, TokensPerSecond: 2}); err != nil {
			t.Fatal(err)
		}
		defer s.Sim.ClearScript(sim.DemoPrimary)
		c := newClient(t, s, "stream-cancel")
		v := createStreamed(t, c, rawDemo, "cancel-1")
		id, streamURL := v["id"].(string), v["stream_url"].(string)
		f := &follower{t: t, token: token("stream-cancel")}
		var once sync.Once
		f.follow(streamURL, func() {
			once.Do(func() {
				if code, _, body := c.do(http.MethodPost, "/v1/jobs/"+id+"/cancel", "", map[string]any{"reason": "enough"}); code != http.StatusOK {
					t.Fatalf("cancel: %d %s", code, body)
				}
			})
		})
		if f.final.typ != job.FinalEventType(job.StatusCancelled) || f.dropped[1] != job.DiscardCancelled {
			t.Fatalf("the stream ended %s after %q", f.final.typ, f.kinds)
		}
		w.closedBy(t, id+"/1")
		c.await(id, 30*time.Second, "its attempt ended", func(j apiclient.Job) bool {
			return len(j.Attempts) == 1 && j.Attempts[0].State == string(job.AttemptCancelled)
		})
		code, _, body := c.do(http.MethodGet, "/v1/jobs/"+id+"/attempts", "", nil)
		var attempts struct {
			Attempts []struct {
				Usage *struct {
					InputTokens  int `json:"input_tokens"`
					OutputTokens int `json:"output_tokens"`
				} `json:"usage"`
				Spend *struct {
					CostUSD string `json:"cost_usd"`
				} `json:"spend"`
			} `json:"attempts"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &attempts) != nil || len(attempts.Attempts) != 1 {
			t.Fatalf("attempts: %d %s", code, body)
		}
		u := attempts.Attempts[0].Usage
		if u == nil || u.OutputTokens < 1 || attempts.Attempts[0].Spend == nil {
			t.Fatalf("the cancelled attempt: %s", body)
		}
		want := stack.DemoPrices()[sim.DemoPrimary].Cost(u.InputTokens, u.OutputTokens)
		if attempts.Attempts[0].Spend.CostUSD != want.USD() {
			t.Fatalf("the attempt cost %s, want %s for its usage", attempts.Attempts[0].Spend.CostUSD, want.USD())
		}
		code, _, body = c.do(http.MethodGet, "/v1/usage", "", nil)
		var usage struct {
			Budget struct {
				SpentUSD    string `json:"spent_usd"`
				ReservedUSD string `json:"reserved_usd"`
			} `json:"budget"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &usage) != nil {
			t.Fatalf("usage: %d %s", code, body)
		}
		if usage.Budget.SpentUSD != want.USD() || usage.Budget.ReservedUSD != job.Money(0).USD() {
			t.Fatalf("the owner's budget after the cancel: %s, want %s spent (%d in, %d out) and nothing reserved",
				body, want.USD(), u.InputTokens, u.OutputTokens)
		}
		t.Logf("cancelled after %d of the answer's deltas: charged %s USD for %d input and %d output tokens", f.seq[1], want.USD(),
			u.InputTokens, u.OutputTokens)
	})
}
