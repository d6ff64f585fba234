package provider

import (
	"context"
	"errors"
	"iter"
	"slices"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// Batcher is a provider with a batch API (OpenAI Batch, Anthropic Message
// Batches): it takes many attempts as the lines of one batch, works on them
// for up to a day while nothing of onejob runs, at half price, and hands
// back each line's result under the line's custom_id, in any order. The
// submit is its only call whose answer can be lost: neither API takes an
// idempotency key, so a lost one is found again among the provider's
// batches by onejob's ID for it (FindBatch). Each line's result is read
// back as the attempt's answer or failure, as Call's would be.
type Batcher interface {
	Provider
	// LineID is the custom_id of the line of the attempt whose key
	// (Request.IdempotencyKey) is key: the key itself, or the key in the
	// provider's alphabet (unique for unique keys).
	LineID(key string) string
	// SubmitBatch sends lines as one batch under meta (the provider keeps
	// meta.ID with it where it keeps anything). Its errors are Call's: an
	// ambiguous one means the batch may exist (FindBatch).
	SubmitBatch(ctx context.Context, lines []BatchLine, meta BatchMeta) (BatchWork, error)
	// RetrieveBatch reads a batch by the provider's id.
	RetrieveBatch(ctx context.Context, id string) (BatchWork, error)
	// CancelBatch asks the provider to cancel a batch (safe to repeat):
	// the lines it did not run end canceled.
	CancelBatch(ctx context.Context, id string) (BatchWork, error)
	// FindBatch looks among the provider's batches for the one meta names,
	// created no earlier than meta.SentAt less CreatedSkew: found false
	// when none is (the submit never reached it). Batches meta.Taken names
	// (onejob's others) are never it.
	FindBatch(ctx context.Context, meta BatchMeta) (w BatchWork, found bool, err error)
	// BatchResults reads an ended batch's results, each line once, in any
	// order; an error ends the sequence (read them again: applying a
	// result twice changes nothing).
	BatchResults(ctx context.Context, w BatchWork) iter.Seq2[LineResult, error]
}

// BatchLine is one attempt's line: its custom_id (Batcher.LineID of its
// request's key) and its request.
type BatchLine struct {
	CustomID string
	Request  Request
}

// BatchMeta is what onejob knows of a batch it sends: its own ID for it,
// which the provider keeps (OpenAI's metadata), when its submit was sent,
// how many lines it has, and the provider's ids of onejob's other batches,
// which a lost submit is never taken for.
type BatchMeta struct {
	ID     string
	SentAt time.Time
	Lines  int
	Taken  []string
}

// MetadataBatchKey is the metadata key a batch carries onejob's ID under,
// where the provider keeps metadata (OpenAI).
const MetadataBatchKey = "onejob_batch"

// BatchWork is a provider's account of a batch: its id, its status in the
// provider's words, whether it ended, onejob's ID it keeps with it (empty
// where it keeps none), when it was created, and its line counts.
type BatchWork struct {
	ID, Status string
	Meta       string
	Ended      bool
	CreatedAt  time.Time
	// Lines is how many lines it took; Done how many it has ended.
	Lines, Done int
	// Results locate the results of an ended batch for the adapter that
	// made it (OpenAI's output and error files, Anthropic's results_url);
	// onejob only keeps them with the batch.
	Results []string
}

// LineResult is one line of an ended batch: the line's custom_id, its
// status in the provider's words (succeeded, errored, canceled, expired,
// ...), and its outcome for the attempt's request.
type LineResult struct {
	CustomID string
	Status   string
	// Usage is what the provider billed for the line (nil: nothing, or not
	// reported).
	Usage   *Usage
	outcome func(Request) (Response, error)
}

// NewLineResult is a line's result as an adapter reads it; outcome maps it
// to the attempt's answer or failure (a *CallError) for the line's request.
func NewLineResult(customID, status string, usage *Usage, outcome func(Request) (Response, error)) LineResult {
	return LineResult{CustomID: customID, Status: status, Usage: usage, outcome: outcome}
}

// ErrNoOutcome is Outcome's answer for a result built without one.
var ErrNoOutcome = errors.New("the line has no outcome")

// Outcome is the line's answer for req, checked as Call's would be, or its
// failure: a *CallError carrying what the line was billed.
func (r LineResult) Outcome(req Request) (Response, error) {
	if r.outcome == nil {
		return Response{}, ErrNoOutcome
	}
	return r.outcome(req)
}

// CreatedSkew is how much earlier than its submit was sent a provider may
// say a batch was created (clocks apart): FindBatch looks that much
// further back.
const CreatedSkew = 5 * time.Minute

// Mode is how a provider runs an attempt of a tier.
type Mode string

// Modes.
const (
	// ModeSync: one call, answered in the request (Provider.Call).
	ModeSync Mode = "sync"
	// ModeBackground: work of its own, submitted and finished later
	// (Async), in the tier's completion window.
	ModeBackground Mode = "background"
	// ModeFlex: one call at the provider's flex service tier (batch rates,
	// slower, sometimes unavailable: a 429 pauses it).
	ModeFlex Mode = "flex"
	// ModeBatch: a line of a provider batch (Batcher).
	ModeBatch Mode = "batch"
)

// Discounted reports whether work in the mode is always billed below the
// provider's standard price (batch and flex rates): its price must say
// what it costs, or a job is billed at another tier's price.
func (m Mode) Discounted() bool { return m == ModeFlex || m == ModeBatch }

// Kinded is implemented by every adapter: its configured kind, which says
// how it runs each tier (RunTier).
type Kinded interface {
	Kind() string
}

// modes is, per kind, the tiers it runs other than now and the mode of
// each: the one list RunTier, RunsTier and the price checks read.
var modes = map[string]map[job.Tier]Mode{
	KindOpenAI:           {job.TierBatch24h: ModeBatch},
	KindAnthropic:        {job.TierBatch24h: ModeBatch},
	KindOpenAIFlex:       {job.TierFlex2h: ModeFlex, job.TierFlex8h: ModeFlex, job.TierBatch24h: ModeFlex},
	KindBedrockFlex:      {job.TierFlex2h: ModeFlex, job.TierFlex8h: ModeFlex, job.TierBatch24h: ModeFlex},
	KindOpenAIBackground: {job.TierFlex2h: ModeBackground, job.TierFlex8h: ModeBackground},
	KindWebhookAsync:     {job.TierFlex2h: ModeBackground, job.TierFlex8h: ModeBackground},
}

// nowMode is how a kind runs TierNow.
func nowMode(kind string) Mode {
	if kind == KindOpenAIBackground || kind == KindWebhookAsync {
		return ModeBackground
	}
	return ModeSync
}

// RunTier is the tier at which a provider of kind runs a job that may wait
// t, and the mode it runs it in: the longest tier it runs that does not
// wait longer than t (a job may be answered sooner than it allows, never
// later), TierNow when it runs no other. An attempt is priced at that tier
// (the price it bills), never at the job's.
func RunTier(kind string, t job.Tier) (job.Tier, Mode) {
	run, mode := job.TierNow, nowMode(kind)
	for _, cand := range job.Tiers() {
		if m, ok := modes[kind][cand]; ok && cand.Within(t.OrNow()) {
			run, mode = cand, m
		}
	}
	return run, mode
}

// ModeFor is RunTier for provider p: by its kind when it says (Kinded),
// else by what it implements (an Async runs every tier in the background,
// a Batcher runs a day's window as a batch line, any other synchronously).
func ModeFor(p Provider, t job.Tier) (job.Tier, Mode) {
	if k, ok := p.(Kinded); ok && slices.Contains(Kinds(), k.Kind()) {
		return RunTier(k.Kind(), t)
	}
	if _, ok := p.(Async); ok {
		return t.OrNow(), ModeBackground
	}
	if _, ok := p.(Batcher); ok && t == job.TierBatch24h {
		return t, ModeBatch
	}
	return job.TierNow, ModeSync
}
