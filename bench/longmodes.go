package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// Issue 40: the flex and batch modes beside the synchronous and background
// ones, and the token price each window bills. As the other long-job rows,
// nothing here is measured on its own: each row is the happy path measured
// in the same run plus the counts the code makes (the batcher's gathering
// and poll schedule, the batches table's item, the flex tier's call
// timeout and a 429's pause), priced as the cost table prices a scenario.

// Cases of the flex and batch rows.
const (
	caseFlexPaused = "429 Resource Unavailable, paused once"
	// The kinds each mode's rows run on (provider.RunTier says which mode a
	// kind runs a tier in, and tokenBill checks it is the row's).
	kindSync       = provider.KindOpenAI
	kindBackground = provider.KindOpenAIBackground
	kindFlex       = provider.KindOpenAIFlex
	kindBatch      = provider.KindOpenAI
)

var (
	modeFlex  = string(provider.ModeFlex)
	modeBatch = string(provider.ModeBatch)
)

// batchLinesPriced are the batch sizes a line is priced in: a full batch
// (job.MaxBatchLines, a busy deployment's) and a lone line (a quiet one's:
// the batch's own costs fall on one job).
var batchLinesPriced = []int{job.MaxBatchLines, 1}

func caseBatchOf(lines int) string {
	if lines == 1 {
		return "a batch of 1 line"
	}
	return "a batch of " + thousands(lines) + " lines"
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// tokenJob is the job every row's tokens are priced for: the same tokens
// in every mode, so each window's discount shows.
const (
	tokenPriceName = "openai-primary"
	tokensIn       = 1000
	tokensOut      = 500
)

// tokenInputs is the price the rows' tokens are billed at: cdk.json's
// price of tokenPriceName (its rates and its kind's tier discounts).
type tokenInputs struct {
	Provider  string `json:"provider"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	InputUSD  string `json:"input_usd_per_mtok"`
	OutputUSD string `json:"output_usd_per_mtok"`
	// DiscountPercent is cdk.json's, per tier.
	DiscountPercent map[string]int `json:"tier_discount_percent"`
	TokensIn        int            `json:"tokens_in"`
	TokensOut       int            `json:"tokens_out"`
	Price           job.Price      `json:"-"`
}

// tokenPriceFrom reads cdk.json's price of tokenPriceName (its dev
// environment's budget), as deploy.BudgetConfig reads it for a function.
func tokenPriceFrom(root string) (tokenInputs, error) {
	raw, err := os.ReadFile(filepath.Join(root, "cdk.json"))
	if err != nil {
		return tokenInputs{}, err
	}
	var cdk struct {
		Context struct {
			Environments map[string]struct {
				Budget deploy.BudgetConfig `json:"budget"`
			} `json:"onejob:environments"`
		} `json:"context"`
	}
	if err := json.Unmarshal(raw, &cdk); err != nil {
		return tokenInputs{}, fmt.Errorf("cdk.json: %w", err)
	}
	b, err := cdk.Context.Environments["dev"].Budget.Budget()
	if err != nil {
		return tokenInputs{}, fmt.Errorf("cdk.json's dev budget: %w", err)
	}
	p, ok := b.Prices[tokenPriceName]
	if !ok {
		return tokenInputs{}, fmt.Errorf("cdk.json's dev budget prices no %s", tokenPriceName)
	}
	out := tokenInputs{Provider: tokenPriceName, Version: p.Version, Kind: p.Kind, InputUSD: p.Input.USD(), OutputUSD: p.Output.USD(),
		DiscountPercent: map[string]int{}, TokensIn: tokensIn, TokensOut: tokensOut, Price: p}
	for _, t := range job.Tiers() {
		if d := p.Discount.Of(t); d > 0 {
			out.DiscountPercent[string(t)] = d
		}
	}
	return out, nil
}

// priceOfKind is the token price a provider of kind bills at tokens'
// rates: the discounts cdk.json gives tokens' price for the tiers kind
// runs (provider.RunsTier). A flex kind's discounted tiers that cdk.json
// prices no provider of are modelled at tokens' batch (24h) discount:
// OpenAI prices flex "at Batch API rates".
func priceOfKind(tk tokenInputs, kind string) (p job.Price, modelled bool) {
	base := tk.Price
	p = job.Price{Version: base.Version, Input: base.Input, Output: base.Output, Kind: kind}
	for _, t := range job.Tiers()[1:] {
		if !provider.RunsTier(kind, t) {
			continue
		}
		d := base.Discount.Of(t)
		if _, mode := provider.RunTier(kind, t); mode == provider.ModeFlex && d == 0 {
			d, modelled = base.Discount.Of(job.TierBatch24h), true
		}
		switch t {
		case job.TierFlex2h:
			p.Discount.Flex2h = d
		case job.TierFlex8h:
			p.Discount.Flex8h = d
		case job.TierBatch24h:
			p.Discount.Batch24h = d
		}
	}
	return p, modelled
}

// tokenBill is what the row's job's tokens cost in mode, its job allowed
// to wait tier, on a provider of kind: the tier kind runs it at
// (provider.RunTier), which must be in mode, and that tier's price.
func tokenBill(tk tokenInputs, kind string, mode string, tier job.Tier) (job.Tier, float64, bool, error) {
	run, m := provider.RunTier(kind, tier)
	if string(m) != mode {
		return "", 0, false, fmt.Errorf("a %s provider runs a job that may wait %s as %s work, not %s", kind, tier, m, mode)
	}
	p, modelled := priceOfKind(tk, kind)
	cost := p.At(run).Cost(tk.TokensIn, tk.TokensOut)
	return run, round2(float64(cost) / float64(job.NanosPerUSD) * 1e6), modelled && run != job.TierNow, nil
}

// longJobGap is a mode that cannot take a latency, and why.
type longJobGap struct {
	Mode     string  `json:"mode"`
	LatencyS float64 `json:"provider_latency_s"`
	Why      string  `json:"why"`
}

// flexTier is the shortest window a flex kind runs at its flex tier: a
// flex job must be allowed to wait at least that (a job of tier now runs
// at the provider's default tier).
func flexTier() job.Tier {
	for _, t := range job.Tiers() {
		if _, m := provider.RunTier(kindFlex, t); m == provider.ModeFlex {
			return t
		}
	}
	return job.TierBatch24h
}

// flexCannot says why a flex call cannot take latency: it is one call,
// held by the run function up to the call timeout (the flex tier waits the
// whole of it), with no work id to ask about later.
func flexCannot(in longJobInputs, latency time.Duration) string {
	callTimeout := time.Duration(in.CallTimeoutS * float64(time.Second))
	if latency <= callTimeout {
		return ""
	}
	return fmt.Sprintf("one call held by the run up to the %s call timeout (deploy.CallTimeout, a flex call's too; the run function's own timeout 5 min, "+
		"Lambda's 15 min): past it the call is cut and unknown, and the job is the sync row's (the wait loop)", callTimeout)
}

// backgroundCannot says why background work cannot take latency: the tier
// its kind runs the job's window at gives it up before it ends.
func backgroundCannot(latency time.Duration) string {
	tier := tierFor(latency)
	run, _ := provider.RunTier(kindBackground, tier)
	deadline := (job.RemotePolicy{}).Deadline(time.Time{}, run).Sub(time.Time{})
	if deadline > latency {
		return ""
	}
	return fmt.Sprintf("%s runs a job that may wait %s at %s (provider.RunTier: no background window is longer): its work is given up at %s "+
		"(job.RemotePolicy), before it ends", kindBackground, tier, run, deadline)
}

// batchCannot says why a batch line cannot take latency: the provider
// expires a batch at its window.
func batchCannot(latency time.Duration) string {
	if latency <= job.TierBatch24h.Window() {
		return ""
	}
	return fmt.Sprintf("the provider expires a batch at %s", job.TierBatch24h.Window())
}

// flexAttempt is a synchronous call at the flex tier whose provider
// answers after latency (within the call timeout): one run holds it, as a
// synchronous call. paused: its first answer is 429 Resource Unavailable
// (the flex tier's capacity): the attempt fails rate-limited, not counted
// (a write), the provider is paused for its Retry-After (a write of its
// health), the job records its wait (a write), and the execution waits
// in the loop (one turn: its hold reads the job, the run reads it and
// launches the next attempt, a write) before the call that answers.
func flexAttempt(in longJobInputs, latency time.Duration, paused bool) longJobRow {
	t := newTally(in)
	t.ms[deploy.FnRun] += latency.Seconds() * 1000
	kase, note := caseAnswer, ""
	var times []time.Duration
	if paused {
		kase = caseFlexPaused
		t.loops(1)
		t.writes += 4 // the 429's attempt failed, the provider paused, the job's wait, the next attempt launched
		wait := max(time.Second, job.DefaultPause)
		times = []time.Duration{wait}
		note = fmt.Sprintf("the 429 pauses the provider (job.DefaultPause %s without a Retry-After, at most %s): a turn of the wait loop, not a parked wait",
			job.DefaultPause, job.MaxPause)
	}
	r := t.row(modeFlex, kase, latency)
	r.Turns, r.TimesS, r.HeldS, r.Note = len(times), seconds(times), latency.Seconds(), note
	r.EndsAtS = latency.Seconds()
	if len(times) > 0 {
		r.EndsAtS += times[0].Seconds()
	}
	return r
}

// gatherPasses is how many passes list a queued line while its batch
// gathers, at most: the line is the oldest, queued just after a pass; each
// pass lists it (a read) until job.DecideBatchDue sends it.
func gatherPasses(p job.BatchPolicy, pass time.Duration) (int, time.Duration) {
	var queued time.Time
	for k := 1; ; k++ {
		now := queued.Add(time.Duration(k) * pass)
		if due, _, _ := job.DecideBatchDue(1, queued, p, now); due {
			return k, now.Sub(queued)
		}
	}
}

// batchItemBytes is the size of a batch's item in the batches table with
// lines lines (internal/dynamo/batch.go: its key, revision, state and its
// JSON body, lines included), submitted and asked about: every write puts
// it whole, every pass reads it whole (OpenBatches, consistent).
func batchItemBytes(lines int) (int, error) {
	bl := make([]job.BatchLine, lines)
	for i := range bl {
		id := job.NewID("owner-"+strconv.Itoa(i%100), "key-"+strconv.Itoa(i))
		bl[i] = job.BatchLine{CustomID: job.AttemptKey(id, 1), JobID: id, Attempt: 1}
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	b, err := job.NewBatch(tokenPriceName, job.TierBatch24h, bl, now)
	if err != nil {
		return 0, err
	}
	b.State, b.Revision, b.Submits, b.Polls = job.BatchSubmitted, 9, 1, 5
	b.Work, b.Status = "batch_"+fmt.Sprintf("%032x", 1), "in_progress"
	b.SentAt, b.SubmittedAt, b.HeardAt, b.NextPollAt = now, now, now, now.Add(time.Hour)
	body, err := json.Marshal(b)
	if err != nil {
		return 0, err
	}
	// DynamoDB counts each attribute's name and value; a number about a
	// byte per two digits and one.
	return len(dynamo.AttrProvider) + len(b.Provider) + len(dynamo.AttrBatchID) + len(b.ID) + len("revision") + 2 +
		len("state") + len(b.State) + len("body") + len(body), nil
}

// batchInputs is what the batch rows are computed from.
type batchInputs struct {
	// MaxLines, GatherS and the poll schedule are job.DefaultBatchPolicy's.
	MaxLines     int     `json:"max_lines"`
	GatherS      float64 `json:"gather_s"`
	GatherPasses int     `json:"gather_passes_at_most"`
	// ItemBytes is the batches table's item per batch size priced.
	ItemBytes map[int]int `json:"item_bytes_by_lines"`
}

func batchInputsFrom(in longJobInputs) (batchInputs, error) {
	p := job.DefaultBatchPolicy()
	pass := time.Duration(in.PassEveryS * float64(time.Second))
	passes, wait := gatherPasses(p, pass)
	b := batchInputs{MaxLines: p.MaxLines, GatherS: wait.Seconds(), GatherPasses: passes, ItemBytes: map[int]int{}}
	for _, n := range batchLinesPriced {
		size, err := batchItemBytes(n)
		if err != nil {
			return b, err
		}
		b.ItemBytes[n] = size
	}
	return b, nil
}

// batchLine is a job run as one line of a provider batch of lines lines,
// the batch taking latency at its provider. The line's own: its run is the
// happy path's (it launches the attempt and queues it as a line,
// job.DecideQueued: a write) and ends its execution, its one transition;
// each pass lists it while its batch gathers (a read each, up to
// GatherPasses); the batch claims it (job.DecideBatched, a write); the
// result is applied through its job's compare-and-swap (a read; the
// outcome write is the happy path's), billed as a run of the events
// function. The batch's, shared by its lines: its item written when
// recorded, claimed, submitted, heard at each poll that finds it running,
// ended and deleted (4 + polls writes, each of the whole item), read by
// every pass while it is open (the open batches' query, consistent), and
// the pass's time for its submit and each poll (each billed as a run).
func batchLine(in longJobInputs, bi batchInputs, latency time.Duration, lines int) longJobRow {
	t := newTally(in)
	pass := time.Duration(in.PassEveryS * float64(time.Second))
	p := job.DefaultBatchPolicy()
	polls := pollTimes(p.Poll, job.TierNow, latency, pass)
	ends := polls[len(polls)-1]
	t.writes += 2 // queued, claimed
	t.reads += float64(bi.GatherPasses) + 1
	t.ms[deploy.FnEvents] += in.RunMS
	share := 1 / float64(lines)
	size := float64(bi.ItemBytes[lines])
	writes := float64(4 + len(polls))
	reads := float64(int(math.Ceil(ends.Seconds() / pass.Seconds())))
	t.batchWrites += writes * share
	t.batchWRU += writes * math.Ceil(size/1024) * share
	t.batchReads += reads * share
	t.batchRRU += reads * math.Ceil(size/4096) * share
	t.ms[deploy.FnEvents] += float64(1+len(polls)) * in.RunMS * share
	r := t.row(modeBatch, caseBatchOf(lines), latency)
	r.Turns, r.TimesS, r.EndsAtS = len(polls), seconds(polls), (time.Duration(bi.GatherS*float64(time.Second)) + ends).Seconds()
	r.Note = fmt.Sprintf("gathered up to %s (%d passes list the line), then the batch asked about at %d due times; its item (%s bytes) "+
		"written %g times and read by %g passes, shared by %d line(s)", dur(bi.GatherS), bi.GatherPasses, len(polls), thousands(bi.ItemBytes[lines]),
		writes, reads, lines)
	return r
}

// waitingModes are the modes whose job waits on its provider's work parked
// (no execution): issue 40 holds each of their rows to maxWaitingTransitions.
var waitingModes = []string{modeAsync, modeBatch}

// maxWaitingTransitions is issue 40's bound on a waiting job's
// orchestration: 3 state transitions ($75 per million jobs), whatever its
// provider's latency.
const maxWaitingTransitions = 3

// checkLongJobs fails the report when a waiting row's orchestration is
// more than maxWaitingTransitions.
func checkLongJobs(l *longJobs) error {
	if l == nil {
		return nil
	}
	var errs []error
	for _, r := range l.Rows {
		if isWaiting(r.Mode) && r.StateTransitions > maxWaitingTransitions {
			errs = append(errs, fmt.Errorf("long jobs: %s: %g state transitions, more than %d", r.Name, r.StateTransitions, maxWaitingTransitions))
		}
	}
	return errors.Join(errs...)
}

func isWaiting(mode string) bool {
	for _, m := range waitingModes {
		if m == mode {
			return true
		}
	}
	return false
}
