package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
)

// waitRow is what it costs a client to learn about a job over one 20-second
// window: by one held request (Prefer: wait=20 on a job that does not
// change, the worst case: the request is held the whole time), or by
// polling.
type waitRow struct {
	Mode string `json:"mode"`
	// Per 20-second window.
	APIRequests     float64 `json:"api_requests"`
	LambdaBilledMS  float64 `json:"lambda_billed_ms"`
	DynamoReads     float64 `json:"dynamodb_reads"`
	ReadUnits       float64 `json:"read_request_units"`
	CostPerMillion  costRow `json:"cost_per_million_windows_usd"`
	RatioToHeld     float64 `json:"cost_ratio_to_held_wait"`
	LatencyAtMostMS float64 `json:"change_seen_at_most_ms_after"`
}

// waitWindow is the longest wait the API grants; apigwDefaultPoll how
// often a held request re-reads the job.
const (
	waitWindow       = apigw.MaxWait
	apigwDefaultPoll = apigw.DefaultWaitPoll
)

// measureWaits measures, on the counting stack, one 20-second held GET and
// the GETs of polling every 2 s (and every 500 ms, the held request's own
// latency) over the same window, and prices them.
func measureWaits(ctx context.Context, s *stack.Stack, proxy *ddbProxy, user *apiClient, pr map[string]price) ([]waitRow, error) {
	slog.Info("measuring", "scenario", "waiting for a job: one 20 s Prefer: wait vs polling")
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(s.JWTSecret())})
	if err != nil {
		return nil, err
	}
	token, err := tokens.Mint(apigwlocal.Grant{Subject: "bench-cost", TTL: time.Hour})
	if err != nil {
		return nil, err
	}
	id, _, err := user.create(ctx, fmt.Sprintf("wait-%d", time.Now().UnixNano()), map[string]any{"type": "demo", "input": map[string]any{"prompt": "bench wait"}})
	if err != nil {
		return nil, err
	}
	// A finished job never changes again: every wait on it runs its course.
	var etag string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, h, body, err := get(ctx, s.APIURL, token, id, "", "")
		if err != nil || code != http.StatusOK {
			return nil, fmt.Errorf("get %s: %d %v %s", id, code, err, body)
		}
		if st := job.Status(jsonStatus(body)); st.Terminal() {
			etag = h.Get("ETag")
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("job %s not finished after 30 s", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.Lambda.Wait(ctx); err != nil {
		return nil, err
	}

	measure := func(mode string, requests int, prefer string, latency time.Duration) (waitRow, error) {
		before := proxy.snapshot()
		var ms float64
		for range requests {
			t0 := time.Now()
			code, h, body, err := get(ctx, s.APIURL, token, id, etag, prefer)
			if err != nil || code != http.StatusNotModified {
				return waitRow{}, fmt.Errorf("%s: %d %v %s", mode, code, err, body)
			}
			if prefer != "" && h.Get("Preference-Applied") != prefer {
				return waitRow{}, fmt.Errorf("%s: Preference-Applied %q", mode, h.Get("Preference-Applied"))
			}
			// The API function is billed for as long as it holds the request.
			ms += float64(time.Since(t0).Milliseconds() + 1)
		}
		tot, _ := deltaOf(before, proxy.snapshot()).totals()
		r := waitRow{Mode: mode, APIRequests: float64(requests), LambdaBilledMS: round2(ms), DynamoReads: float64(tot.Requests),
			ReadUnits: round2(tot.ReadUnits), LatencyAtMostMS: float64(latency.Milliseconds())}
		c := costOf(perJob{Scenario: mode, ReadUnits: tot.ReadUnits, APIRequests: float64(requests),
			LambdaInvocations: map[string]float64{"api": float64(requests)}, LambdaBilledMS: map[string]float64{"api": ms}}, pr)
		c.DynamoDB, c.LambdaReq, c.LambdaGBs, c.APIGateway, c.Total = round2(c.DynamoDB), round2(c.LambdaReq), round2(c.LambdaGBs),
			round2(c.APIGateway), round2(c.Total)
		r.CostPerMillion = c
		return r, nil
	}
	var rows []waitRow
	for _, m := range waitModes() {
		r, err := measure(m.name, m.requests, m.prefer, m.latency)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	held := rows[0]
	for i := range rows {
		rows[i].RatioToHeld = ratio(rows[i].CostPerMillion.Total, held.CostPerMillion.Total)
	}
	return rows, nil
}

// waitMode is a row of the waiting table: requests over the window, each
// held (prefer) or not, and how soon a change is seen.
type waitMode struct {
	name     string
	requests int
	prefer   string
	latency  time.Duration
}

// waitModes are the waiting table's rows: the held GET first (the others'
// baseline), then the polls, which cost the same whenever they are sent
// (the bench sends them back to back).
func waitModes() []waitMode {
	return []waitMode{
		{"one held GET, Prefer: wait=20", 1, fmt.Sprintf("wait=%d", int(waitWindow.Seconds())), apigw.DefaultWaitPoll},
		{"poll every 2 s (If-None-Match)", int(waitWindow / (2 * time.Second)), "", 2 * time.Second},
		{"poll every 500 ms (the held GET's latency)", int(waitWindow / apigw.DefaultWaitPoll), "", apigw.DefaultWaitPoll},
	}
}

func get(ctx context.Context, base, token, id, etag, prefer string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/jobs/"+id, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// jsonStatus reads a job representation's status.
func jsonStatus(body []byte) string {
	var j struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(body, &j)
	return j.Status
}
