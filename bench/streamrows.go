package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
)

// streamLatencies streams n jobs, c at a time, spread over the owners: each
// read from its create on, left after its first delta, and read again from
// there half a second later.
func streamLatencies(ctx context.Context, so streamOptions, owners []*apiClient, watch *streamWatch) (streamLatency, error) {
	type sample struct {
		created, firstDelta time.Time
		reconnect           time.Duration
		repeated            int
		jobID               string
	}
	out := streamLatency{Jobs: so.jobs, Owners: len(owners), Concurrency: so.concurrency,
		FirstTokenMS: float64(streamFirstToken.Milliseconds()), TokensPerSecond: streamTokenRate}
	samples := make([]sample, so.jobs)
	errs := make([]error, so.jobs)
	run := time.Now().UnixNano()
	sem := make(chan struct{}, max(1, so.concurrency))
	var wg sync.WaitGroup
	for i := range so.jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			u := owners[i%len(owners)]
			sm := &samples[i]
			sm.created = time.Now()
			j, err := u.createJob(ctx, fmt.Sprintf("stream-%d-%d", run, i), map[string]any{"type": "demo-stream", "stream": true,
				"input": map[string]any{"prompt": letterWords(100)}})
			if err != nil {
				errs[i] = err
				return
			}
			sm.jobID = j.ID
			seqs := map[int]int{}
			var last string
			check := func(e apiclient.StreamEvent) {
				last = e.ID
				if e.Type != "output.delta" {
					return
				}
				var d apiclient.Delta
				_ = json.Unmarshal(e.Data, &d)
				if d.Seq != seqs[d.Attempt]+1 {
					sm.repeated++
				}
				seqs[d.Attempt] = d.Seq
			}
			first := u.api.Stream(ctx, j.StreamURL, "", func(e apiclient.StreamEvent) bool {
				check(e)
				if e.Type == "output.delta" {
					sm.firstDelta = e.At
					return false // leave after the first delta
				}
				return true
			})
			if sm.firstDelta.IsZero() {
				errs[i] = fmt.Errorf("job %s: no delta on the first connection (%d, %v)", j.ID, first.Status, first.Err)
				return
			}
			time.Sleep(streamReconnectAfter)
			final := false
			again := u.api.Stream(ctx, j.StreamURL, last, func(e apiclient.StreamEvent) bool {
				check(e)
				final = final || e.Final()
				return true
			})
			if !final || again.FirstByte.IsZero() || again.Err != nil {
				errs[i] = fmt.Errorf("job %s: the reconnection did not reach the end (%d, %v)", j.ID, again.Status, again.Err)
				return
			}
			sm.reconnect = again.FirstByte.Sub(again.Sent)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	var lag, simOwn, onejob, toCall, reconnect []time.Duration
	for _, sm := range samples {
		c, ok := watch.call(sm.jobID)
		if !ok {
			return out, fmt.Errorf("job %s: the watch saw no text leave the simulator", sm.jobID)
		}
		lag = append(lag, sm.firstDelta.Sub(c.firstText))
		simOwn = append(simOwn, c.firstText.Sub(c.in))
		onejob = append(onejob, sm.firstDelta.Sub(sm.created))
		toCall = append(toCall, c.in.Sub(sm.created))
		reconnect = append(reconnect, sm.reconnect)
		out.Repeated += sm.repeated
	}
	out.FirstDeltaP50MS, out.FirstDeltaP95MS, out.FirstDeltaMaxMS = round2(percentile(lag, 0.5)), round2(percentile(lag, 0.95)), round2(percentile(lag, 1))
	out.SimFirstTokenP50MS, out.SimFirstTokenP95MS = round2(percentile(simOwn, 0.5)), round2(percentile(simOwn, 0.95))
	out.OnejobFirstTokenP50MS, out.OnejobFirstTokenP95MS = round2(percentile(onejob, 0.5)), round2(percentile(onejob, 0.95))
	out.CreateToCallP50MS, out.CreateToCallP95MS = round2(percentile(toCall, 0.5)), round2(percentile(toCall, 0.95))
	out.ReconnectP50MS, out.ReconnectP95MS, out.ReconnectMaxMS = round2(percentile(reconnect, 0.5)), round2(percentile(reconnect, 0.95)), round2(percentile(reconnect, 1))
	return out, nil
}

// createJob posts one job and returns it as the API answered.
func (c *apiClient) createJob(ctx context.Context, key string, body any) (apiclient.Job, error) {
	code, out, err := c.do(ctx, http.MethodPost, "/v1/jobs", key, body)
	var j apiclient.Job
	if err == nil && (code != http.StatusCreated || json.Unmarshal(out, &j) != nil) {
		err = fmt.Errorf("create %s: %d %s", key, code, out)
	}
	return j, err
}

// streamCosts runs each cost row's jobs at once on the stack and averages
// what they cost.
func streamCosts(ctx context.Context, so streamOptions, s *stack.Stack, proxy *ddbProxy, times *lambdaTimes, u *apiClient,
	reader *dynamo.Store, watch *streamWatch) ([]streamCost, error) {
	// The answer repeats the prompt after "sim-primary answered:", and the
	// demo reports its words as output tokens.
	prompt := letterWords(streamOutputTokens - 2)
	// The streamed row runs first; not streamed, the same model takes as
	// long to the whole answer as the simulator took to stream it (its
	// JSON's every token at the pace), so both hold their run as long.
	var generation time.Duration
	rows := []struct {
		name   string
		body   func() map[string]any
		reader bool
	}{
		{streamRowStreamed, func() map[string]any {
			return map[string]any{"type": "demo-stream", "stream": true, "input": map[string]any{"prompt": prompt}}
		}, true},
		{streamRowUnstreamed, func() map[string]any {
			return map[string]any{"type": "demo-stream", "input": map[string]any{"prompt": prompt,
				"simulate": map[string]any{"sim-primary": map[string]any{"latency_ms": generation.Milliseconds()}}}}
		}, false},
		{streamRowHappy, func() map[string]any {
			return map[string]any{"type": "demo", "input": map[string]any{"prompt": "bench streams"}}
		}, false},
	}
	var out []streamCost
	run := time.Now().UnixNano()
	for _, row := range rows {
		body := row.body()
		if err := s.Lambda.Wait(ctx); err != nil {
			return nil, err
		}
		ddb0 := proxy.snapshot()
		ms0, _ := times.snapshot()
		req0 := map[string]int{}
		for _, fn := range deploy.TaskNames() {
			req0[fn] = s.Lambda.Requests(fn)
		}
		n := so.costJobs
		ids := make([]string, n)
		held := make([]time.Duration, n)
		conns := make([]int, n)
		tokens := make([]float64, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				j, err := u.createJob(ctx, fmt.Sprintf("cost-%d-%s-%d", run, strings.Fields(row.name)[0], i), body)
				if err != nil {
					errs[i] = err
					return
				}
				ids[i] = j.ID
				if row.reader {
					_, cs, err := u.api.Follow(ctx, j.StreamURL, 100*time.Millisecond, nil)
					// Follow returns at the end of its last connection: each
					// connection is held from its request to its end.
					held[i] = streamHeld(cs)
					conns[i] = len(cs)
					errs[i] = err
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		var transitions int
		for i, id := range ids {
			if err := awaitEnd(ctx, reader, id, &tokens[i]); err != nil {
				return nil, err
			}
			if err := awaitExecution(ctx, s, id); err != nil {
				return nil, err
			}
			t, err := s.SFN.StateTransitions(ctx, id)
			if err != nil {
				return nil, err
			}
			transitions += t
		}
		if err := s.Lambda.Wait(ctx); err != nil {
			return nil, err
		}
		fn := float64(n)
		d := deltaOf(ddb0, proxy.snapshot())
		tot, _ := d.totals()
		ms1, _ := times.snapshot()
		c := streamCost{Scenario: row.name, Jobs: n, DynamoRequests: round2(float64(tot.Requests) / fn), DynamoByOp: map[string]float64{},
			ReadUnits: round2(tot.ReadUnits / fn), WriteUnits: round2(tot.WriteUnits / fn), IndexWriteUnits: round2(tot.IndexWriteUnits / fn),
			StateTransitions: round2(float64(transitions) / fn), APIRequests: 1,
			// The API function's invocation (the create); its time is left
			// out alike on every row (small beside the rest).
			LambdaInvocations: map[string]float64{"api": 1}, LambdaBilledMS: map[string]float64{}}
		for k, st := range d {
			c.DynamoByOp[k] = round2(float64(st.Requests) / fn)
			if strings.HasSuffix(k, " "+s.Tables.Providers) && strings.HasPrefix(k, "GetItem ") {
				c.HealthReads += float64(st.Requests) / fn
			}
		}
		c.HealthReads = round2(c.HealthReads)
		c.RequestsOther = round2(c.DynamoRequests - c.HealthReads)
		for _, f := range deploy.TaskNames() {
			if k := s.Lambda.Requests(f) - req0[f]; k > 0 {
				c.LambdaInvocations[f] = round2(float64(k) / fn)
				c.LambdaBilledMS[f] = round2((ms1[f] - ms0[f]) / fn)
			}
		}
		var sumTokens float64
		var sumHeld time.Duration
		var sumConns int
		for i := range n {
			sumTokens += tokens[i]
			sumHeld += held[i]
			sumConns += conns[i]
		}
		c.OutputTokens = round2(sumTokens / fn)
		if row.reader {
			c.LambdaInvocations[deploy.FnStream] = round2(float64(sumConns) / fn)
			c.LambdaBilledMS[deploy.FnStream] = round2(float64(sumHeld.Milliseconds()) / fn)
		}
		c.price(prices())
		out = append(out, c)
		if row.reader {
			if generation = watch.generation(ids); generation == 0 {
				return nil, errors.New("the watch saw no streamed answer end")
			}
			c.Generation = round2(float64(generation.Milliseconds()))
			out[len(out)-1] = c
		}
	}
	// In the order a reader compares them: not streamed first.
	out[0], out[1] = out[1], out[0]
	out[0].Generation = out[1].Generation
	for i := range out {
		out[i].RatioToPlain = ratio(out[i].USDTotal, out[0].USDTotal)
	}
	return out, nil
}

// streamHeld is how long a reader's connections were open: each from its
// request to the next one's (the last to its end, just now).
func streamHeld(cs []apiclient.StreamConn) time.Duration {
	var d time.Duration
	for i, c := range cs {
		end := time.Now()
		if i+1 < len(cs) {
			end = cs[i+1].Sent
		}
		d += end.Sub(c.Sent)
	}
	return d
}

// awaitEnd waits until the job has ended and notes its output tokens,
// reading it straight from dynalite (reader), past the counting proxy.
func awaitEnd(ctx context.Context, reader *dynamo.Store, id string, tokens *float64) error {
	deadline := time.Now().Add(time.Minute)
	for {
		j, err := reader.Get(ctx, id)
		if err != nil {
			return err
		}
		switch {
		case j.Status == job.StatusSucceeded:
			if a, ok := j.Attempt(j.CompletedBy); ok && a.Usage != nil {
				*tokens = float64(a.Usage.OutputTokens)
			}
			return nil
		case j.Status.Terminal():
			return fmt.Errorf("job %s ended %s", id, j.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job %s still %s after a minute", id, j.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// price sets the row's USD per million jobs at the bench's prices: the
// stream function at its own memory, every other at the bench's.
func (c *streamCost) price(pr map[string]price) {
	reads := c.ReadUnits
	c.USDDynamoDB = round2(reads*pr[priceDynamoRead].USD + (c.WriteUnits+c.IndexWriteUnits)*pr[priceDynamoWrite].USD)
	var inv, gbs float64
	for fn, n := range c.LambdaInvocations {
		inv += n
		gb := lambdaMemoryGB
		if fn == deploy.FnStream {
			gb = streamFunctionGB
		}
		gbs += c.LambdaBilledMS[fn] / 1000 * gb
	}
	c.USDLambda = round2(inv*pr[priceLambdaReq].USD + gbs*pr[priceLambdaGBs].USD)
	c.USDOther = round2(c.StateTransitions*pr[priceTransition].USD + c.APIRequests*pr[priceHTTPAPI].USD)
	c.USDTotal = round2(c.USDDynamoDB + c.USDLambda + c.USDOther)
}

// printStreams prints the streams part.
func printStreams(w io.Writer, r *streamsReport) {
	if r == nil {
		return
	}
	l := r.Latency
	section(w, fmt.Sprintf("Jobs' streams: latency (%d jobs of %d owners, %d at a time; the simulator's first token after %.0f ms, then %.0f tokens/s)",
		l.Jobs, l.Owners, l.Concurrency, l.FirstTokenMS, l.TokensPerSecond))
	tw := table(w)
	fmt.Fprintln(tw, "measure\tp50 ms\tp95 ms\tgoal\t")
	fmt.Fprintf(tw, "first text sent by the simulator → first delta at an SSE client\t%.1f\t%.1f\tp50 ≤ 250, p95 ≤ 500 (max %.1f)\t\n", l.FirstDeltaP50MS, l.FirstDeltaP95MS, l.FirstDeltaMaxMS)
	fmt.Fprintf(tw, "first token, the simulator's own (request in → first text out)\t%.1f\t%.1f\t\t\n", l.SimFirstTokenP50MS, l.SimFirstTokenP95MS)
	fmt.Fprintf(tw, "first token through onejob (create sent → first delta received)\t%.1f\t%.1f\t\t\n", l.OnejobFirstTokenP50MS, l.OnejobFirstTokenP95MS)
	fmt.Fprintf(tw, "create sent → the run's call at the simulator\t%.1f\t%.1f\t\t\n", l.CreateToCallP50MS, l.CreateToCallP95MS)
	fmt.Fprintf(tw, "reconnection (Last-Event-ID) → first replayed byte\t%.1f\t%.1f\tp95 ≤ 200 (max %.1f)\t\n", l.ReconnectP50MS, l.ReconnectP95MS, l.ReconnectMaxMS)
	tw.Flush()
	fmt.Fprintf(w, "deltas repeated or missing across the reconnections: %d\n", l.Repeated)

	section(w, "Jobs' streams: cost per job, streamed beside not streamed (USD per million jobs; the stream function is its reader's connection, held as long)")
	tw = table(w)
	fmt.Fprintln(tw, "scenario\tjobs\toutput tokens\tDDB requests\t(but health)\tRRU\tWRU\t+index WRU\ttransitions\tLambda invocations\tLambda billed ms\tDDB $\tLambda $\tSFN+API $\ttotal $\t×not streamed\t")
	for _, c := range r.Cost {
		var inv, billed []string
		for _, k := range sortedKeys(c.LambdaInvocations) {
			inv = append(inv, fmt.Sprintf("%s %.3g", k, c.LambdaInvocations[k]))
			if ms, ok := c.LambdaBilledMS[k]; ok {
				billed = append(billed, fmt.Sprintf("%s %.0f", k, ms))
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", c.Scenario, c.Jobs, c.OutputTokens,
			c.DynamoRequests, c.RequestsOther, c.ReadUnits, c.WriteUnits, c.IndexWriteUnits, c.StateTransitions, strings.Join(inv, ", "),
			strings.Join(billed, ", "), c.USDDynamoDB, c.USDLambda, c.USDOther, c.USDTotal, c.RatioToPlain)
	}
	tw.Flush()
	for _, c := range r.Cost {
		var ops []string
		for _, k := range sortedKeys(c.DynamoByOp) {
			ops = append(ops, fmt.Sprintf("%s %.4g", strings.Replace(k, "bench-stream-", "", 1), c.DynamoByOp[k]))
		}
		fmt.Fprintf(w, "%s: %s\n", c.Scenario, strings.Join(ops, ", "))
	}
}

// checkStreams fails the run on what contradicts the guarantees (never a
// timing): a delta repeated or missing across a reconnection, a job not
// streamed that pays anything new (one transition, six requests besides
// the provider health's read).
func checkStreams(r *streamsReport) error {
	if r == nil {
		return nil
	}
	var errs []error
	if r.Latency.Repeated > 0 {
		errs = append(errs, fmt.Errorf("streams: %d deltas repeated or missing across reconnections", r.Latency.Repeated))
	}
	for _, c := range r.Cost {
		if c.Scenario == streamRowHappy && (c.StateTransitions != 1 || c.RequestsOther != 6) {
			errs = append(errs, fmt.Errorf("streams: the happy path not streamed took %.2f transitions and %.2f DynamoDB requests besides the health read, want 1 and 6",
				c.StateTransitions, c.RequestsOther))
		}
	}
	return errors.Join(errs...)
}
