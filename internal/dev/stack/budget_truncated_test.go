package stack_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
)

const (
	// truncatingName is an OpenAI provider whose every answer is cut at
	// the token limit (finish_reason length), billed in full.
	truncatingName = "sim-truncating"
	// longType runs on it alone, once, allowing 100,000 output tokens
	// (jobtype's cap).
	longType      = "demo-long"
	longMaxTokens = 100_000
)

// truncatingPrice is gpt-4o-mini's list price ($0.15 and $0.60 per
// million tokens): a demo-long job's worst case is about $0.06, so a
// $0.10 budget affords one at a time.
var truncatingPrice = job.Price{Version: "trunc-2026-12", Input: job.NanosPerUSD * 15 / 100, Output: job.NanosPerUSD * 60 / 100}

type truncatingSim struct {
	*sim.Simulator
	url string
}

// startTruncating serves the OpenAI simulator answering finish_reason
// length to every request.
func startTruncating(t *testing.T) truncatingSim {
	t.Helper()
	s := sim.New(sim.Options{Mode: sim.ModeTruncated, Model: "gpt-4o-mini",
		Oracle: sim.Fixed{GoodOutput: json.RawMessage(`{"text":"an answer from sim-truncating","provider":"sim-truncating"}`)}})
	srv, err := sim.Start(s.OpenAI())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return truncatingSim{Simulator: s, url: srv.URL()}
}

// withLongType is the embedded job types (read from the repository) and
// demo-long: the demo type on sim-truncating alone, one attempt, 100,000
// output tokens allowed.
func withLongType(t *testing.T) *jobtype.Catalog {
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
	spec["name"], spec["providers"], spec["max_attempts"], spec["max_output_tokens"] = longType, []string{truncatingName}, 1, longMaxTokens
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	files["types/"+longType+".json"] = &fstest.MapFile{Data: b}
	files["cases/"+longType+"/echo.json"] = files["cases/demo/echo.json"]
	cat, err := jobtype.LoadFS(files)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// truncatedAnswersArePaid is review N-H1's drill on the whole stack: with
// $0.10 each, two owners' first job is answered finish_reason: length,
// all 100,000 output tokens billed (about $0.06); each owner's usage
// shows that cost, and its second create is refused 429 budget-exceeded
// before any provider call. A third owner sends 20 creates at once: it
// never spends more than its budget plus one job's worst case.
func truncatedAnswersArePaid(t *testing.T, s *stack.Stack, trunc truncatingSim, b job.Budget) {
	worst, ok := b.WorstCase([]string{truncatingName}, costBasis(t, s, "e2e budget-trunc"), job.TierNow)
	if !ok {
		t.Fatal("sim-truncating has no price")
	}
	calls := func(ids map[string]bool) []sim.Call {
		var out []sim.Call
		for _, c := range trunc.Calls() {
			id, _, _ := strings.Cut(c.IdempotencyKey[strings.LastIndex(c.IdempotencyKey, ":")+1:], "/")
			if ids[id] {
				out = append(out, c)
			}
		}
		return out
	}
	var wg sync.WaitGroup
	for _, owner := range []string{"budget-trunc-frank", "budget-trunc-grace"} {
		wg.Go(func() {
			c := newClient(t, s, owner)
			j := c.submit(longType, owner+"-1", nil)
			c.await(j.ID, 60*time.Second, "failed", func(j apiclient.Job) bool { return j.Status == "failed" })
			paid := calls(map[string]bool{j.ID: true})
			if len(paid) != 1 || paid[0].OutputTokens != longMaxTokens {
				t.Errorf("%s: the provider saw %+v, want one call charged %d output tokens", owner, paid, longMaxTokens)
				return
			}
			cost := truncatingPrice.Cost(paid[0].InputTokens, paid[0].OutputTokens)
			if spend := attemptSpend(t, c, j.ID); spend.CostUSD != cost.USD() || spend.Source != string(job.SpendReported) {
				t.Errorf("%s: the truncated attempt's spend %+v, want %s USD as reported", owner, spend, cost.USD())
			}
			second := job.NewID(owner, owner+"-2")
			code, _, body := c.do(http.MethodPost, "/v1/jobs", owner+"-2",
				map[string]any{"type": longType, "input": map[string]any{"prompt": "e2e " + owner + "-2"}})
			if code != http.StatusTooManyRequests || !strings.Contains(string(body), apigw.CodeBudgetExceeded.Type()) {
				t.Errorf("%s: the second create: %d %s", owner, code, body)
			}
			u := usage(t, c)
			if n := len(calls(map[string]bool{second: true})); u.Budget == nil || u.Budget.SpentUSD != cost.USD() || u.Budget.ReservedUSD != "0" || n != 0 {
				t.Errorf("%s: usage %+v after one truncated answer of %s USD; the refused create reached the provider %d times", owner, u.Budget, cost.USD(), n)
			}
			t.Logf("%s: one answer cut at %d tokens paid %s USD of 0.10, the second create refused", owner, longMaxTokens, u.Budget.SpentUSD)
		})
	}
	wg.Wait()

	owner := "budget-trunc-heidi"
	c := newClient(t, s, owner)
	var mu sync.Mutex
	accepted := map[string]bool{}
	refused := 0
	for i := range 20 {
		wg.Go(func() {
			key := fmt.Sprintf("%s-%d", owner, i)
			code, _, body, err := c.api.Do(t.Context(), http.MethodPost, "/v1/jobs", key,
				map[string]any{"type": longType, "input": map[string]any{"prompt": "e2e " + key}})
			mu.Lock()
			defer mu.Unlock()
			var j apiclient.Job
			switch {
			case err != nil:
				t.Errorf("%s: %v", key, err)
			case code == http.StatusCreated && json.Unmarshal(body, &j) == nil:
				accepted[j.ID] = true
			case code == http.StatusTooManyRequests && strings.Contains(string(body), apigw.CodeBudgetExceeded.Type()):
				refused++
			default:
				t.Errorf("%s: %d %s", key, code, body)
			}
		})
	}
	wg.Wait()
	for id := range accepted {
		c.await(id, 60*time.Second, "failed", func(j apiclient.Job) bool { return j.Status == "failed" })
	}
	var want job.Money
	for _, call := range calls(accepted) {
		want += truncatingPrice.Cost(call.InputTokens, call.OutputTokens)
	}
	spent, err := job.ParseUSD(usage(t, c).Budget.SpentUSD)
	if err != nil {
		t.Fatal(err)
	}
	if len(accepted)+refused != 20 || len(accepted) == 0 || spent != want || spent > b.Amount+worst || len(calls(accepted)) != len(accepted) {
		t.Errorf("%s: %d accepted, %d refused, %d provider calls, spent %s USD (their usage: %s), bound %s",
			owner, len(accepted), refused, len(calls(accepted)), spent.USD(), want.USD(), (b.Amount + worst).USD())
	}
	t.Logf("%s: 20 creates at once, %d accepted, %d refused, spent %s USD of 0.10 (worst case %s a job)", owner, len(accepted), refused, spent.USD(), worst.USD())
}

// costBasis is what a demo-long job of this prompt is priced on.
func costBasis(t *testing.T, s *stack.Stack, prompt string) job.CostBasis {
	t.Helper()
	jt, ok := s.Catalog.Get(longType)
	if !ok {
		t.Fatal("no demo-long type")
	}
	req, err := jt.Request(json.RawMessage(fmt.Sprintf(`{"prompt":%q}`, prompt)))
	if err != nil {
		t.Fatal(err)
	}
	return lifecycle.CostBasisOf(req)
}

type spendView struct {
	CostUSD string `json:"cost_usd"`
	Source  string `json:"source"`
}

// attemptSpend is the first attempt's spend as its owner sees it.
func attemptSpend(t *testing.T, c *client, id string) spendView {
	t.Helper()
	code, _, body := c.do(http.MethodGet, "/v1/jobs/"+id+"/attempts", "", nil)
	var page struct {
		Attempts []struct {
			Spend *spendView `json:"spend"`
		} `json:"attempts"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Attempts) == 0 || page.Attempts[0].Spend == nil {
		t.Fatalf("attempts of %s: %d %s", id, code, body)
	}
	return *page.Attempts[0].Spend
}
