package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
)

// loadResult is one closed-loop measurement.
type loadResult struct {
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"per_second"`
	P50Millis  float64 `json:"p50_ms"`
	P99Millis  float64 `json:"p99_ms"`
	FirstError string  `json:"first_error,omitempty"`
}

// sample is one closed-loop slice: its successful calls' latencies.
type sample struct {
	latencies []time.Duration
	errs      int
	firstErr  string
	elapsed   time.Duration
}

func (s *sample) add(o sample) {
	s.latencies = append(s.latencies, o.latencies...)
	s.errs += o.errs
	if s.firstErr == "" {
		s.firstErr = o.firstErr
	}
	s.elapsed += o.elapsed
}

func (s sample) result() loadResult {
	r := loadResult{Requests: len(s.latencies), Errors: s.errs, Seconds: round2(s.elapsed.Seconds()), FirstError: s.firstErr}
	if s.elapsed > 0 {
		r.PerSecond = round2(float64(len(s.latencies)) / s.elapsed.Seconds())
	}
	r.P50Millis, r.P99Millis = percentile(s.latencies, 0.50), percentile(s.latencies, 0.99)
	return r
}

// closedLoop runs op from conc workers for d, each worker issuing its next
// call as soon as the last returns. seq gives every call a distinct number
// so creates never collide.
func closedLoop(ctx context.Context, conc int, d time.Duration, seq *atomic.Int64, op func(ctx context.Context, n int64) error) sample {
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	var (
		mu  sync.Mutex
		out sample
	)
	stopAt := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			var local sample
			for time.Now().Before(stopAt) && ctx.Err() == nil {
				t0 := time.Now()
				if err := op(ctx, seq.Add(1)); err != nil {
					local.errs++
					if local.firstErr == "" {
						local.firstErr = err.Error()
					}
					continue
				}
				local.latencies = append(local.latencies, time.Since(t0))
			}
			mu.Lock()
			out.add(local)
			mu.Unlock()
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	return out
}

// compare measures a and b at the same concurrency in alternating slices
// (a, b, a, b, …) after a warm-up of each, so drift in what else the machine
// runs lands on both sides alike.
func compare(ctx context.Context, conc, rounds int, warmup, window time.Duration, seq *atomic.Int64,
	a, b func(ctx context.Context, n int64) error) (loadResult, loadResult) {
	closedLoop(ctx, conc, warmup, seq, a)
	closedLoop(ctx, conc, warmup, seq, b)
	var sa, sb sample
	slice := window / time.Duration(rounds)
	for range rounds {
		sa.add(closedLoop(ctx, conc, slice, seq, a))
		sb.add(closedLoop(ctx, conc, slice, seq, b))
	}
	return sa.result(), sb.result()
}

func percentile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := min(len(s)-1, int(float64(len(s))*q))
	return float64(s[i].Microseconds()) / 1000
}

// apiClient posts creates to a local API as one owner.
type apiClient struct{ api *apiclient.Client }

func newAPIClient(base, secret, subject string, scopes ...string) (*apiClient, error) {
	// One connection per concurrent caller, kept alive: the storm opens a
	// thousand at once.
	tr := &http.Transport{MaxIdleConns: 2048, MaxIdleConnsPerHost: 2048, DisableCompression: true}
	c, err := apiclient.New(base, secret, subject, &http.Client{Transport: tr, Timeout: 60 * time.Second}, scopes...)
	if err != nil {
		return nil, err
	}
	return &apiClient{api: c}, nil
}

// do sends one request and returns the status and body.
func (c *apiClient) do(ctx context.Context, method, path, key string, body any) (int, []byte, error) {
	code, _, out, err := c.api.Do(ctx, method, path, key, body)
	return code, out, err
}

// create posts one job and wants 201 (new) or 200 (replayed).
func (c *apiClient) create(ctx context.Context, key string, body any) (string, int, error) {
	code, out, err := c.do(ctx, http.MethodPost, "/v1/jobs", key, body)
	if err != nil {
		return "", 0, err
	}
	if code != http.StatusCreated && code != http.StatusOK {
		return "", code, fmt.Errorf("create %s: %d %s", key, code, out)
	}
	var j struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &j); err != nil {
		return "", code, err
	}
	return j.ID, code, nil
}

// burst fires n requests at once (one goroutine each) and returns the time
// until the last is answered.
func burst(ctx context.Context, n int, op func(ctx context.Context, i int) error) (time.Duration, []error) {
	var wg sync.WaitGroup
	errs := make([]error, n)
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			errs[i] = op(ctx, i)
		})
	}
	start := time.Now()
	close(gate)
	wg.Wait()
	return time.Since(start), slices.DeleteFunc(errs, func(e error) bool { return e == nil })
}
