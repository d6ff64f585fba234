package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// Jobs' streams (issue 39), measured on a stack of their own whose demo
// simulator streams at a model's pace (streamFirstToken, then
// streamTokenRate), with a watch between the run function and the
// simulator that notes when each answer's first piece of text left the
// simulator:
//   - latency: over -stream-jobs jobs of several owners, how long after
//     the simulator sent an answer's first text its first delta reached an
//     SSE client that opened the job's stream_url right after the create;
//     the first token through onejob (create sent to that delta) against
//     the simulator's own (request in to first text out); and a reconnect
//     (Last-Event-ID, half a second after leaving) to its first replayed
//     byte;
//   - cost: a job streamed (one reader, from the create to the end) beside
//     the same job not streamed, at 500 output tokens, through the counting
//     DynamoDB proxy: requests and units, transitions, Lambda invocations
//     and billed time (the stream function's is the reader's connection:
//     it is held as long), USD per million; and the happy path of a job not
//     streamed on the same stack (one transition, six requests and the
//     provider health's read).

// The simulator's pace: the figures.
const (
	streamFirstToken = 300 * time.Millisecond
	streamTokenRate  = 50
	// streamOutputTokens is the cost rows' answer: the demo's usage counts
	// the answer's words ("sim-primary answered: " and the prompt's).
	streamOutputTokens = 500
	// streamReconnectAfter is how long a reader stays away before it
	// reconnects: the answer goes on meanwhile, so the reconnection has
	// events to replay.
	streamReconnectAfter = 500 * time.Millisecond
	// streamFunctionGB is the stream function's memory (deploy.Functions).
	streamFunctionGB = 0.125
)

// The part's rows, by name (bench/rows.go lists them for the pages).
const (
	streamRowUnstreamed = "not streamed, 500 output tokens"
	streamRowStreamed   = "streamed, 500 output tokens, one reader"
	streamRowHappy      = "happy path, not streamed"
	streamRowLatency    = "latency"
)

// streamRows are the part's rows as a page cites them: the latency rows
// (one measurement, cited as "latency") and the cost rows.
func streamRows() []string {
	return []string{streamRowLatency, streamRowUnstreamed, streamRowStreamed, streamRowHappy}
}

// streamOptions are the flags of this part.
type streamOptions struct {
	only        bool
	jobs        int
	concurrency int
	owners      int
	costJobs    int
}

func (s *streamOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.only, "streams-only", false, "run only the streams section (latency and cost of jobs' streams): -only streams")
	fs.IntVar(&s.jobs, "stream-jobs", 50, "streamed jobs in the latency rows (0 skips the streams section)")
	fs.IntVar(&s.concurrency, "stream-concurrency", 5, "streamed jobs running at once in the latency rows")
	fs.IntVar(&s.owners, "stream-owners", 5, "owners the latency rows' jobs are spread over")
	fs.IntVar(&s.costJobs, "stream-cost-jobs", 5, "jobs per cost row")
}

// streamLatency is the latency rows.
type streamLatency struct {
	Jobs            int     `json:"jobs"`
	Owners          int     `json:"owners"`
	Concurrency     int     `json:"concurrency"`
	FirstTokenMS    float64 `json:"simulator_first_token_ms"`
	TokensPerSecond float64 `json:"simulator_tokens_per_second"`
	// Sent → received: the first text the simulator sent to the first
	// delta an SSE client received (goal: p50 ≤ 250 ms, p95 ≤ 500 ms).
	FirstDeltaP50MS float64 `json:"first_delta_after_simulator_p50_ms"`
	FirstDeltaP95MS float64 `json:"first_delta_after_simulator_p95_ms"`
	FirstDeltaMaxMS float64 `json:"first_delta_after_simulator_max_ms"`
	// The simulator's own first token (its request in, its first text
	// out) and onejob's (the create sent, the first delta received).
	SimFirstTokenP50MS    float64 `json:"simulator_first_token_p50_ms"`
	SimFirstTokenP95MS    float64 `json:"simulator_first_token_p95_ms"`
	OnejobFirstTokenP50MS float64 `json:"onejob_first_token_p50_ms"`
	OnejobFirstTokenP95MS float64 `json:"onejob_first_token_p95_ms"`
	// Create sent → the run's request at the simulator.
	CreateToCallP50MS float64 `json:"create_to_provider_call_p50_ms"`
	CreateToCallP95MS float64 `json:"create_to_provider_call_p95_ms"`
	// A reconnection (Last-Event-ID) to its first replayed byte (goal: p95
	// ≤ 200 ms).
	ReconnectP50MS float64 `json:"reconnect_first_byte_p50_ms"`
	ReconnectP95MS float64 `json:"reconnect_first_byte_p95_ms"`
	ReconnectMaxMS float64 `json:"reconnect_first_byte_max_ms"`
	// Deltas repeated or missing across the two connections (must be 0).
	Repeated int `json:"deltas_repeated_or_missing"`
}

// streamCost is one cost row: a job's averages.
type streamCost struct {
	Scenario     string  `json:"scenario"`
	Jobs         int     `json:"jobs"`
	OutputTokens float64 `json:"output_tokens"`
	// Generation is how long the simulated model took to the answer's
	// end, streamed (both 500-token rows: the same).
	Generation       float64            `json:"provider_generation_ms,omitempty"`
	DynamoRequests   float64            `json:"dynamodb_requests"`
	DynamoByOp       map[string]float64 `json:"dynamodb_requests_by_operation_and_table"`
	ReadUnits        float64            `json:"read_request_units"`
	WriteUnits       float64            `json:"write_request_units"`
	IndexWriteUnits  float64            `json:"index_write_request_units_modelled"`
	StateTransitions float64            `json:"state_transitions"`
	// Lambda: invocations and billed ms per function; the stream
	// function's is its reader's connections, held as long as they are.
	LambdaInvocations map[string]float64 `json:"lambda_invocations"`
	LambdaBilledMS    map[string]float64 `json:"lambda_billed_ms"`
	APIRequests       float64            `json:"api_requests"`
	// USD per million jobs, by service, and the ratio to the job not
	// streamed (goal for the streamed row: at most 2).
	USDDynamoDB   float64 `json:"usd_per_million_dynamodb"`
	USDLambda     float64 `json:"usd_per_million_lambda"`
	USDOther      float64 `json:"usd_per_million_step_functions_and_api"`
	USDTotal      float64 `json:"usd_per_million_total"`
	RatioToPlain  float64 `json:"ratio_to_not_streamed"`
	HealthReads   float64 `json:"provider_health_reads"`
	RequestsOther float64 `json:"dynamodb_requests_but_health"`
}

// streamsReport is the streams part of the report.
type streamsReport struct {
	Latency streamLatency `json:"latency"`
	Cost    []streamCost  `json:"cost"`
}

// streamWatch stands between the run function and the demo simulator:
// it passes every request on and its answer back as it arrives, noting
// per job when its request came and when the first piece of the answer's
// text (the stream field's value) went back.
type streamWatch struct {
	target string
	client *http.Client
	mu     sync.Mutex
	calls  map[string]*watchedCall // by job ID, its first streamed call
}

type watchedCall struct {
	in, firstText, end time.Time
}

func newStreamWatch() *streamWatch {
	return &streamWatch{client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, calls: map[string]*watchedCall{}}
}

// providers points the demo providers at the watch.
func (w *streamWatch) providers(srvURL string) func(provider.Config) provider.Config {
	return func(c provider.Config) provider.Config {
		c = stack.BreakersNeverAct(c)
		for i, p := range c.Providers {
			if p.Name == sim.DemoPrimary || p.Name == sim.DemoFallback {
				if i := strings.Index(p.BaseURL, "/"+p.Name); i > 0 && w.target == "" {
					w.target = p.BaseURL[:i]
				}
				c.Providers[i].BaseURL = srvURL + "/" + p.Name
			}
		}
		return c
	}
}

func (w *streamWatch) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	in := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		rw.WriteHeader(http.StatusBadGateway)
		return
	}
	var req struct {
		JobID string `json:"job_id"`
	}
	_ = json.Unmarshal(body, &req)
	streamed := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	var call *watchedCall
	if streamed && req.JobID != "" {
		w.mu.Lock()
		if w.calls[req.JobID] == nil {
			call = &watchedCall{in: in}
			w.calls[req.JobID] = call
		}
		w.mu.Unlock()
	}
	up, err := http.NewRequestWithContext(r.Context(), r.Method, w.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		rw.WriteHeader(http.StatusBadGateway)
		return
	}
	up.Header = r.Header.Clone()
	resp, err := w.client.Do(up)
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
	_ = rc.Flush()
	var seen, output strings.Builder
	found := false
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := rw.Write(buf[:n]); werr != nil || rc.Flush() != nil {
				return
			}
			if call != nil && !found {
				seen.Write(buf[:n])
				found = textBegan(&seen, &output)
				if found {
					w.mu.Lock()
					call.firstText = time.Now()
					w.mu.Unlock()
				}
			}
		}
		if err != nil {
			if call != nil {
				w.mu.Lock()
				call.end = time.Now()
				w.mu.Unlock()
			}
			return
		}
	}
}

// generation is the mean time the simulator took from a streamed call's
// request to its answer's last byte, over jobs.
func (w *streamWatch) generation(jobs []string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var sum time.Duration
	n := 0
	for _, id := range jobs {
		if c, ok := w.calls[id]; ok && !c.end.IsZero() {
			sum += c.end.Sub(c.in)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

// textBegan reads the whole delta events in seen (the webhook contract's
// event: delta, data: {"text": …}), appending their text to output, and
// reports whether output now holds a character of the answer's "text"
// member's value: the first piece a reader can be shown.
func textBegan(seen, output *strings.Builder) bool {
	all := seen.String()
	end := strings.LastIndex(all, "\n\n")
	if end < 0 {
		return false
	}
	for _, ev := range strings.Split(all[:end], "\n\n") {
		if !strings.Contains(ev, "event: delta") {
			continue
		}
		_, data, ok := strings.Cut(ev, "data: ")
		var d struct{ Text string }
		if ok && json.Unmarshal([]byte(strings.TrimSpace(data)), &d) == nil {
			output.WriteString(d.Text)
		}
	}
	seen.Reset()
	seen.WriteString(all[end+2:])
	const member = `"text":"`
	i := strings.Index(output.String(), member)
	return i >= 0 && output.Len() > i+len(member)
}

func (w *streamWatch) call(jobID string) (watchedCall, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.calls[jobID]
	if !ok || c.firstText.IsZero() {
		return watchedCall{}, false
	}
	return *c, true
}

// letterWords is n words of letters only, each one token for the
// simulators' tokenizer (which cuts digits apart).
func letterWords(n int) string {
	words := make([]string, n)
	for i := range words {
		w := string(rune('a' + i%26))
		for k := i / 26; k > 0; k /= 26 {
			w = string(rune('a'+k%26)) + w
		}
		words[i] = w
	}
	return strings.Join(words, " ")
}

// measureStreams runs the streams part on a stack of its own.
func measureStreams(ctx context.Context, o options, dynamoURL string, logOut *slog.Logger) (streamsReport, error) {
	var rep streamsReport
	watch := newStreamWatch()
	ws := httptest.NewServer(watch)
	defer ws.Close()
	proxy := newDDBProxy(dynamoURL, dynamo.NamesWithPrefix("bench-stream").Jobs)
	ps := httptest.NewServer(proxy)
	defer ps.Close()
	times := newLambdaTimes()
	log := slog.New(captureHandler{next: logOut.Handler(), observe: times.observe})
	s, err := stack.Start(ctx, stack.Config{Root: o.root, APIAddr: "127.0.0.1:0", DynamoEndpoint: ps.URL, TablePrefix: "bench-stream",
		CertifyDemo: true, CallTimeout: time.Minute, Logger: log, Quotas: &job.Quotas{}, NotificationsOff: true,
		DemoProviders: watch.providers(ws.URL), DemoStream: sim.StreamOptions{FirstToken: streamFirstToken, TokenRate: streamTokenRate}})
	if err != nil {
		return rep, err
	}
	defer s.Close()
	if watch.target == "" {
		return rep, errors.New("the demo providers were not found to watch")
	}
	var owners []*apiClient
	for i := range max(1, o.streams.owners) {
		u, err := newAPIClient(s.APIURL, s.JWTSecret(), fmt.Sprintf("bench-stream-%d", i))
		if err != nil {
			return rep, err
		}
		owners = append(owners, u)
	}
	slog.Info("streams: latency", "jobs", o.streams.jobs, "owners", len(owners), "concurrency", o.streams.concurrency)
	if rep.Latency, err = streamLatencies(ctx, o.streams, owners, watch); err != nil {
		return rep, fmt.Errorf("latency: %w", err)
	}
	slog.Info("streams: cost", "jobs", o.streams.costJobs)
	// The cost rows wait for their jobs' ends past the counting proxy.
	reader, err := dynamo.New(dynamo.Config{Client: dynalite.NewClient(dynamoURL), Tables: s.Tables})
	if err != nil {
		return rep, err
	}
	if rep.Cost, err = streamCosts(ctx, o.streams, s, proxy, times, owners[0], reader, watch); err != nil {
		return rep, fmt.Errorf("cost: %w", err)
	}
	return rep, nil
}
