package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/sfnlocal"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

func TestLambdaMemoryIsDeployed(t *testing.T) {
	t.Parallel()
	for _, f := range deploy.Functions() {
		// The stream function has memory of its own, which the streams
		// section prices (streams.go).
		want := lambdaMemoryGB
		if f.Name == deploy.FnStream {
			want = streamFunctionGB
		}
		if got := float64(f.MemoryMB) / 1024; got != want {
			t.Errorf("%s: %d MB deployed, the bench prices %v GB", f.Name, f.MemoryMB, want)
		}
	}
}

func TestASLLoop(t *testing.T) {
	t.Parallel()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	real, err := os.ReadFile(filepath.Join(root, sfnlocal.DefaultDefinitionPath))
	if err != nil {
		t.Fatal(err)
	}
	const loop = `{"States":{
		"Run":{"Type":"Task","End":true,"Catch":[{"ErrorEquals":["RunNext"],"Next":"Run"},{"ErrorEquals":["States.ALL"],"Next":"Hold"}]},
		"Hold":{"Type":"Task","Next":"Wait"},"Wait":{"Type":"Wait","Next":"Run"}}}`
	tests := []struct {
		name       string
		def        string
		err        string
		want       []string
		beforeWait int
		wantErr    bool
	}{
		{"RealWaitOpen", string(real), string(job.SignalWaitOpen), []string{"Hold", "Wait", "Run"}, 2, false},
		{"RealTimeout", string(real), "States.Timeout", []string{"Hold", "Wait", "Run"}, 2, false},
		{"StatesAllCatches", loop, "WaitOpen", []string{"Hold", "Wait", "Run"}, 2, false},
		{"FirstMatchingCatch", loop, "RunNext", nil, 0, true}, // back at Run without a wait
		{"NoCatch", `{"States":{"Run":{"Type":"Task","End":true}}}`, "WaitOpen", nil, 0, true},
		{"RunDoesNotEnd", `{"States":{"Run":{"Type":"Task","Next":"Run","Catch":[{"ErrorEquals":["WaitOpen"],"Next":"Run"}]}}}`,
			"WaitOpen", nil, 0, true},
		{"EndsElsewhere", `{"States":{"Run":{"Type":"Task","End":true,"Catch":[{"ErrorEquals":["WaitOpen"],"Next":"F"}]},"F":{"Type":"Fail"}}}`,
			"WaitOpen", nil, 0, true},
		{"MissingState", `{"States":{"Run":{"Type":"Task","End":true,"Catch":[{"ErrorEquals":["WaitOpen"],"Next":"X"}]}}}`,
			"WaitOpen", nil, 0, true},
		{"NotJSON", `{`, "WaitOpen", nil, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, before, err := aslLoop([]byte(tc.def), "Run", tc.err)
			if (err != nil) != tc.wantErr {
				t.Fatalf("aslLoop error = %v, want error %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) || before != tc.beforeWait {
				t.Fatalf("aslLoop = %v, %d, want %v, %d", got, before, tc.want, tc.beforeWait)
			}
		})
	}
}

func TestPollTimes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		tier  job.Tier
		until time.Duration
		pass  time.Duration
		want  []float64 // seconds after the submit
	}{
		// Due at 30 s, made by the pass at 60 s.
		{"BeforeTheFirstPoll", job.TierNow, 2 * time.Second, time.Minute, []float64{60}},
		{"OnAPoll", job.TierNow, time.Minute, time.Minute, []float64{60}},
		// Then at the work's age from the last poll: the wait doubles.
		{"Doubling", job.TierNow, 100 * time.Second, time.Minute, []float64{60, 120}},
		{"TenMinutes", job.TierNow, 10 * time.Minute, time.Minute, []float64{60, 120, 240, 480, 960}},
		// Past 30 min of age the wait is the 30-min cap.
		{"AnHour", job.TierNow, time.Hour, time.Minute, []float64{60, 120, 240, 480, 960, 1920, 3720}},
		// An 8-h window's cap is a quarter of it: 2 h.
		{"Flex8hCap", job.TierFlex8h, 3 * time.Hour, time.Minute, []float64{60, 120, 240, 480, 960, 1920, 3840, 7680, 14880}},
		// A pass every second makes the schedule's own times.
		{"AFinePass", job.TierNow, 100 * time.Second, time.Second, []float64{30, 60, 120}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := seconds(pollTimes(job.DefaultPollSchedule(), tc.tier, tc.until, tc.pass)); !slices.Equal(got, tc.want) {
				t.Fatalf("pollTimes = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTierFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		latency time.Duration
		want    job.Tier
	}{{2 * time.Second, job.TierNow}, {10 * time.Minute, job.TierNow}, {time.Hour, job.TierFlex2h}, {8 * time.Hour, job.TierFlex8h}} {
		if got := tierFor(tc.latency); got != tc.want {
			t.Errorf("tierFor(%s) = %s, want %s", tc.latency, got, tc.want)
		}
	}
}

func TestCheckTimes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		until time.Duration
		want  []time.Duration
	}{
		{"BeforeTheFirst", 30 * time.Second, []time.Duration{time.Minute}},
		{"SixMinutes", 6 * time.Minute, []time.Duration{time.Minute, 16 * time.Minute}},
		{"FirstHourAfterTheTimeout", 56 * time.Minute, []time.Duration{time.Minute, 16 * time.Minute, 136 * time.Minute}},
		{"ThenEveryEightHours", 11 * time.Hour, []time.Duration{time.Minute, 16 * time.Minute, 136 * time.Minute, 616 * time.Minute,
			1096 * time.Minute}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := checkTimes(job.DefaultWait(), tc.until); !slices.Equal(got, tc.want) {
				t.Fatalf("checkTimes = %v, want %v", got, tc.want)
			}
		})
	}
}

// longJobFixture is a measured run in small numbers: the happy path (two
// reads of 1 RRU, four writes of 2 WRU with the index) and a hold of 10 ms.
func longJobFixture(t *testing.T) longJobInputs {
	t.Helper()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	def, err := os.ReadFile(filepath.Join(root, sfnlocal.DefaultDefinitionPath))
	if err != nil {
		t.Fatal(err)
	}
	rows := []perJob{
		{Scenario: "happy path", DynamoRequests: 6, DynamoByOp: map[string]float64{"GetItem": 2, "PutItem": 1, "UpdateItem": 3},
			ReadUnits: 2, WriteUnits: 4, IndexWriteUnits: 4, StateTransitions: 1,
			LambdaInvocations: map[string]float64{"api": 1, "run": 1}, LambdaBilledMS: map[string]float64{"api": 40, "run": 100},
			APIRequests: 1},
		{Scenario: "unknown then resolved", LambdaInvocations: map[string]float64{"hold": 2, "run": 2},
			LambdaBilledMS: map[string]float64{"hold": 20, "run": 5000}},
	}
	in, err := longJobInputsFrom(rows, def)
	if err != nil {
		t.Fatal(err)
	}
	// Tokens at $1 in and $2 out per million, half off a day's window: a
	// job of 1,000 in and 500 out costs $2,000 per million jobs, $1,000
	// in a batch.
	in.Tokens = tokenInputs{TokensIn: 1000, TokensOut: 500, Price: job.Price{Version: "v", Input: job.NanosPerUSD, Output: 2 * job.NanosPerUSD,
		Kind: provider.KindOpenAI, Discount: job.Discount{Batch24h: 50}}}
	// The prices of TestCostOf: each service's line is easy to follow.
	in.Prices = map[string]price{
		priceDynamoRead: {USD: 1}, priceDynamoWrite: {USD: 2}, priceTransition: {USD: 3},
		priceLambdaReq: {USD: 4}, priceLambdaGBs: {USD: 5}, priceHTTPAPI: {USD: 6},
	}
	return in
}

func TestLongJobInputs(t *testing.T) {
	t.Parallel()
	in := longJobFixture(t)
	if in.RunMS != 100 || in.APIMS != 40 || in.HoldMS != 10 || in.HoldFrom != "unknown then resolved" ||
		in.RRUPerRead != 1 || in.WRUPerWrite != 2 || in.CallTimeoutS != 240 || in.BeforeWait != 2 ||
		!slices.Equal(in.Loop, []string{"Hold", "Wait", "Run"}) || in.PollFirstS != 30 || in.PollLastS != 1800 ||
		in.PassEveryS != 60 || in.DeadlineS != 1200 || in.MemoryMB["run"] != 256 || in.MemoryMB["events"] != 256 ||
		!slices.Equal(in.WaitStepsS, []float64{60, 900, 7200, 28800}) {
		t.Fatalf("inputs = %+v", in)
	}
	if _, err := longJobInputsFrom(nil, []byte(`{}`)); err == nil {
		t.Fatal("inputs without a state machine: no error")
	}
}

func TestLongJobRows(t *testing.T) {
	t.Parallel()
	in := longJobFixture(t)
	rows, gaps, err := longJobRows(in)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]longJobRow{}
	for _, r := range rows {
		byName[r.Mode+"/"+dur(r.LatencyS)+"/"+r.Case] = r
	}
	type want struct {
		turns                     int
		held, ends                float64
		inv                       map[string]float64
		ms                        map[string]float64
		transitions, reads, write float64
		api                       float64
		cost                      costRow
	}
	tests := []struct {
		name string
		want want
	}{
		// One run holds the call 2 s: the happy path's counts, 2,000 ms
		// more of run. GB-s (40+2,100)/1000·0.25 = 0.535.
		{"sync/2s/answered", want{0, 2, 2, map[string]float64{"api": 1, "run": 1}, map[string]float64{"api": 40, "run": 2100}, 1, 2, 4, 1,
			costRow{DynamoDB: 2 + 8*2, StepFunctions: 3, LambdaReq: 8, LambdaGBs: 2.68, APIGateway: 6, Total: 37.67}}},
		// The run submits and parks: the happy path's one transition and
		// run, the id's write. The webhook ends the job at 2 s: an API
		// request and an events invocation (40 ms), a read, the delivery
		// taken by its id (1 WRU). No poll was due. GB-s
		// (40+100+40)/1000·0.25 = 0.045.
		{"background/2s/webhook arrives", want{0, 0, 2, map[string]float64{"api": 1, "run": 1, "events": 1},
			map[string]float64{"api": 40, "run": 100, "events": 40}, 1, 3, 6, 2,
			costRow{DynamoDB: 3 + (8+1*2+1)*2, StepFunctions: 3, LambdaReq: 12, LambdaGBs: 0.22, APIGateway: 12, Total: 52.23}}},
		// Polling only: the pass's poll at 60 s (due at 30 s) reads the
		// entry and the job (2 reads) and writes the outcome (the happy
		// path's write), billed as a run (100 ms of the events function;
		// its invocation is the deployment's, no job's).
		{"background/2s/webhook lost (polling only)", want{1, 0, 60, map[string]float64{"api": 1, "run": 1},
			map[string]float64{"api": 40, "run": 100, "events": 100}, 1, 4, 5, 1,
			costRow{DynamoDB: 4 + (8+1*2)*2, StepFunctions: 3, LambdaReq: 8, LambdaGBs: 0.3, APIGateway: 6, Total: 41.3}}},
		// The first poll, at 60 s, finds the work ended at 30 s.
		{"background/30s/webhook lost (polling only)", want{1, 0, 60, map[string]float64{"api": 1, "run": 1},
			map[string]float64{"api": 40, "run": 100, "events": 100}, 1, 4, 5, 1,
			costRow{DynamoDB: 4 + (8+1*2)*2, StepFunctions: 3, LambdaReq: 8, LambdaGBs: 0.3, APIGateway: 6, Total: 41.3}}},
		// Past the call timeout: held 4 min, unknown, checked 1 and 16 min
		// later; the second check finds the answer (ends at 20 min).
		{"sync/10m0s/answered", want{2, 240, 1200, map[string]float64{"api": 1, "run": 3, "hold": 2},
			map[string]float64{"api": 40, "run": 240300, "hold": 20}, 7, 6, 5, 1,
			costRow{DynamoDB: 6 + 10*2, StepFunctions: 21, LambdaReq: 24, LambdaGBs: 300.45, APIGateway: 6, Total: 377.45}}},
		// Polls at 1, 2, 4 and 8 min hear it running (2 reads and a write
		// each); the one at 16 min ends it. Still one transition.
		{"background/10m0s/webhook lost (polling only)", want{5, 0, 960, map[string]float64{"api": 1, "run": 1},
			map[string]float64{"api": 40, "run": 100, "events": 500}, 1, 12, 9, 1,
			costRow{DynamoDB: 12 + (8+5*2)*2, StepFunctions: 3, LambdaReq: 8, LambdaGBs: 0.8, APIGateway: 6, Total: 65.8}}},
		// The 4 polls before 10 min, then the webhook.
		{"background/10m0s/webhook arrives", want{4, 0, 600, map[string]float64{"api": 1, "run": 1, "events": 1},
			map[string]float64{"api": 40, "run": 100, "events": 440}, 1, 11, 10, 2,
			costRow{DynamoDB: 11 + (8+5*2+1)*2, StepFunctions: 3, LambdaReq: 12, LambdaGBs: 0.73, APIGateway: 12, Total: 76.72}}},
		// The work fails at 10 min (its webhook): the failure written,
		// the job woken: one more run (100 ms, a read) and transition,
		// the fallback launched and recorded (2 writes), its answer the
		// happy path's outcome write.
		{"background/10m0s/work failed, synchronous fallback", want{4, 0, 600, map[string]float64{"api": 1, "run": 2, "events": 1},
			map[string]float64{"api": 40, "run": 200, "events": 440}, 2, 12, 13, 2,
			costRow{DynamoDB: 12 + (8+8*2+1)*2, StepFunctions: 6, LambdaReq: 16, LambdaGBs: 0.85, APIGateway: 12, Total: 96.85}}},
		// 8 hours: tier 8h (its deadline 8 h 20 min), polled at 1, 2, 4,
		// 8, 16, 32, 64, 128 min, then every 2 h (a quarter of the
		// window): 10 polls before 8 h, the 11th ends it. One transition.
		{"background/8h0m0s/webhook lost (polling only)", want{11, 0, 29280, map[string]float64{"api": 1, "run": 1},
			map[string]float64{"api": 40, "run": 100, "events": 1100}, 1, 24, 15, 1,
			costRow{DynamoDB: 24 + (8+11*2)*2, StepFunctions: 3, LambdaReq: 8, LambdaGBs: 1.55, APIGateway: 6, Total: 102.55}}},
		// Held 4 min, checked at 1 and 16 min after it, then held, waiting
		// (2 h) when the hour ends: 2 turns and a hold and wait.
		{"sync/0/provider silent, first hour", want{2, 240, 0, map[string]float64{"api": 1, "run": 3, "hold": 3},
			map[string]float64{"api": 40, "run": 240300, "hold": 30}, 9, 7, 4, 1,
			costRow{DynamoDB: 7 + 8*2, StepFunctions: 27, LambdaReq: 28, LambdaGBs: 300.46, APIGateway: 6, Total: 384.46}}},
		// Never ends: polled at 1, 2, 4, 8 and 16 min; at its deadline,
		// 20 min, the pass asks to cancel (2 reads) and gives it up (2
		// writes: the cancel asked, the attempt failed), and wakes the
		// job: one more run and transition, which fails it (the happy
		// path's outcome write). It ends at 20 min, not waiting for ever.
		{"background/0/provider silent, first hour", want{5, 0, 1200, map[string]float64{"api": 1, "run": 2},
			map[string]float64{"api": 40, "run": 200, "events": 600}, 2, 15, 12, 1,
			costRow{DynamoDB: 15 + (8+8*2)*2, StepFunctions: 6, LambdaReq: 12, LambdaGBs: 1.05, APIGateway: 6, Total: 88.05}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, ok := byName[tc.name]
			if !ok {
				t.Fatalf("no row %s in %v", tc.name, sortedKeys(byName))
			}
			w := tc.want
			c := r.CostPerMillion
			c.Scenario = ""
			if r.Turns != w.turns || r.HeldS != w.held || round2(r.EndsAtS) != w.ends || len(r.TimesS) < r.Turns {
				t.Errorf("turns %d held %v ends %v (times %v), want %d %v %v", r.Turns, r.HeldS, r.EndsAtS, r.TimesS, w.turns, w.held, w.ends)
			}
			if !mapsEqual(r.LambdaInvocations, w.inv) || !mapsEqual(r.LambdaBilledMS, w.ms) {
				t.Errorf("Lambda %v %v, want %v %v", r.LambdaInvocations, r.LambdaBilledMS, w.inv, w.ms)
			}
			if r.StateTransitions != w.transitions || r.DynamoReads != w.reads || r.DynamoWrites != w.write || r.APIRequests != w.api {
				t.Errorf("transitions %v reads %v writes %v API %v, want %v %v %v %v", r.StateTransitions, r.DynamoReads, r.DynamoWrites,
					r.APIRequests, w.transitions, w.reads, w.write, w.api)
			}
			if c != w.cost {
				t.Errorf("cost %+v, want %+v", c, w.cost)
			}
		})
	}
	// Every async row is set against the sync row at its latency.
	for i, r := range rows {
		var sync longJobRow
		for _, s := range rows[:i+1] {
			if s.Mode == modeSync && s.LatencyS == r.LatencyS && (s.Case == caseSilent) == (r.Case == caseSilent) {
				sync = s
			}
		}
		if want := ratio(r.CostPerMillion.Total, sync.CostPerMillion.Total); r.RatioToSync != want {
			t.Errorf("%s %s %s: ×sync %v, want %v", r.Mode, dur(r.LatencyS), r.Case, r.RatioToSync, want)
		}
	}
	// Each latency: sync; background webhook and polling (not at 24 h),
	// and the fallback at 10 min; flex answered and paused (within the
	// call timeout: 2 s and 30 s); batch full and alone. Then the silent.
	if want := len(longJobLatencies) + 2*(len(longJobLatencies)-1) + 1 + 2*2 + 2*len(longJobLatencies) + 2; len(rows) != want {
		t.Errorf("%d rows, want %d", len(rows), want)
	}
	if len(gaps) != 1+3 {
		t.Errorf("cannot: %+v", gaps)
	}
	// Issue 40: an asynchronous job's orchestration is at most 3 state
	// transitions whatever its provider's latency: 1 parked, 2 with a
	// woken run.
	for _, r := range rows {
		if (r.Mode == modeAsync || r.Mode == modeBatch) && r.StateTransitions > 3 {
			t.Errorf("%s: %v state transitions", r.Name, r.StateTransitions)
		}
	}
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestLongJobModes (issue 40): the flex and batch rows, from the fixture's
// happy path and the code's counts, their tokens at the tier each mode's
// provider runs the job's window at, and the modes that cannot take a
// latency.
func TestLongJobModes(t *testing.T) {
	t.Parallel()
	in := longJobFixture(t)
	// A batch's item: a lone line's is under 1 KB (1 WRU a write, 1 RRU a
	// read); a full batch's 99 to 100 KB (100 WRU, 25 RRU).
	if in.Batch.MaxLines != 1000 || in.Batch.GatherS != 300 || in.Batch.GatherPasses != 5 ||
		in.Batch.ItemBytes[1] > 1024 || in.Batch.ItemBytes[1000] <= 99*1024 || in.Batch.ItemBytes[1000] > 100*1024 {
		t.Fatalf("batch inputs %+v", in.Batch)
	}
	rows, gaps, err := longJobRows(in)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]longJobRow{}
	for _, r := range rows {
		byName[r.Name] = r
	}
	tests := []struct {
		name                 string
		turns                int
		ends                 float64
		inv, ms              map[string]float64
		transitions, reads   float64
		writes               float64
		cost                 costRow
		tokenTier            job.Tier
		tokens               float64
		tokenModelled        bool
		transitionsAtMostBy3 bool
	}{
		// The sync row at 2 s, at the flex tier: its tokens half price (a
		// rate cdk.json gives no flex provider: modelled).
		{"flex, 2 s, answered", 0, 2, map[string]float64{"api": 1, "run": 1}, map[string]float64{"api": 40, "run": 2100}, 1, 2, 4,
			costRow{DynamoDB: 2 + 8*2, StepFunctions: 3, LambdaReq: 8, LambdaGBs: 2.68, APIGateway: 6, Total: 37.67}, job.TierFlex2h, 1000, true, false},
		// A 429 first: the attempt failed, the provider paused, the wait
		// recorded, the next attempt launched (4 writes); a turn of the
		// loop (3 transitions, a hold and a run, 2 reads) for the 5-s
		// pause; then the call. GB-s (40+2,200+10)/1000·0.25 = 0.5625.
		{"flex, 2 s, 429 Resource Unavailable, paused once", 1, 7, map[string]float64{"api": 1, "run": 2, "hold": 1},
			map[string]float64{"api": 40, "run": 2200, "hold": 10}, 4, 4, 8,
			costRow{DynamoDB: 4 + (8+4*2)*2, StepFunctions: 12, LambdaReq: 16, LambdaGBs: 2.81, APIGateway: 6, Total: 72.81}, job.TierFlex2h, 1000, true, false},
		// A lone line whose batch takes 24 h: gathered 5 min (5 passes
		// list it), the batch asked about 53 times (the last at 86,520 s),
		// read by its 1,442 passes (1 RRU each), written 4 + 53 times
		// (1 WRU each); the line's queue and claim writes and its apply's
		// read; the events function's time: the submit, 53 polls, the
		// apply (55 × 100 ms). One transition.
		{"batch, 24 h, a batch of 1 line", 53, 86820, map[string]float64{"api": 1, "run": 1}, map[string]float64{"api": 40, "run": 100, "events": 5500},
			1, 2 + 5 + 1 + 1442, 4 + 2 + 57,
			costRow{DynamoDB: (2 + 6 + 1442) + (8+2*2+57)*2, StepFunctions: 3, LambdaReq: 8, LambdaGBs: 1.41 * 5, APIGateway: 6, Total: 1612.05},
			job.TierBatch24h, 1000, false, true},
		// The same in a full batch: the batch's 1,442 reads of 25 RRU and
		// 57 writes of 100 WRU, and 5,400 ms, shared by 1,000 lines.
		{"batch, 24 h, a batch of 1,000 lines", 53, 86820, map[string]float64{"api": 1, "run": 1}, map[string]float64{"api": 40, "run": 100, "events": 105.4},
			1, 9.44, 6.06,
			costRow{DynamoDB: 79.45, StepFunctions: 3, LambdaReq: 8, LambdaGBs: 0.31, APIGateway: 6, Total: 96.76}, job.TierBatch24h, 1000, false, true},
		// A batch that ends at once is asked about once, at 60 s.
		{"batch, 2 s, a batch of 1 line", 1, 360, map[string]float64{"api": 1, "run": 1}, map[string]float64{"api": 40, "run": 100, "events": 300},
			1, 2 + 5 + 1 + 1, 4 + 2 + 5,
			costRow{DynamoDB: 9 + (8+2*2+5)*2, StepFunctions: 3, LambdaReq: 8, LambdaGBs: 0.55, APIGateway: 6, Total: 60.55}, job.TierBatch24h, 1000, false, true},
		// Synchronous at 24 h: cut at 4 min, checked 6 times (the loop:
		// 18 transitions more), its tokens at the full price.
		{"sync, 24 h, answered", 6, 94800, map[string]float64{"api": 1, "run": 7, "hold": 6}, map[string]float64{"api": 40, "run": 240700, "hold": 60},
			19, 14, 5, costRow{DynamoDB: 34, StepFunctions: 57, LambdaReq: 56, LambdaGBs: 301, APIGateway: 6, Total: 454}, job.TierNow, 2000, false, false},
		// Background work at 8 h bills the 8-h tier, which the fixture's
		// price gives no discount.
		{"background, 8 h, webhook lost (polling only)", 11, 29280, map[string]float64{"api": 1, "run": 1},
			map[string]float64{"api": 40, "run": 100, "events": 1100}, 1, 24, 15,
			costRow{DynamoDB: 24 + (8+11*2)*2, StepFunctions: 3, LambdaReq: 8, LambdaGBs: 1.55, APIGateway: 6, Total: 102.55}, job.TierFlex8h, 2000, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, ok := byName[tc.name]
			if !ok {
				t.Fatalf("no row %q in %v", tc.name, sortedKeys(byName))
			}
			c := r.CostPerMillion
			c.Scenario = ""
			tc.cost.LambdaGBs, tc.cost.DynamoDB = round2(tc.cost.LambdaGBs), round2(tc.cost.DynamoDB)
			if r.Turns != tc.turns || round2(r.EndsAtS) != tc.ends || len(r.TimesS) != r.Turns {
				t.Errorf("turns %d ends %v (times %v), want %d %v", r.Turns, r.EndsAtS, r.TimesS, tc.turns, tc.ends)
			}
			if !mapsEqual(r.LambdaInvocations, tc.inv) || !mapsEqual(r.LambdaBilledMS, tc.ms) {
				t.Errorf("Lambda %v %v, want %v %v", r.LambdaInvocations, r.LambdaBilledMS, tc.inv, tc.ms)
			}
			if r.StateTransitions != tc.transitions || r.DynamoReads != tc.reads || r.DynamoWrites != tc.writes {
				t.Errorf("transitions %v reads %v writes %v, want %v %v %v", r.StateTransitions, r.DynamoReads, r.DynamoWrites, tc.transitions, tc.reads, tc.writes)
			}
			if c != tc.cost {
				t.Errorf("cost %+v, want %+v", c, tc.cost)
			}
			if r.TokenTier != tc.tokenTier || r.TokenUSD != tc.tokens || r.TokenModelled != tc.tokenModelled {
				t.Errorf("tokens %s %v (modelled %v), want %s %v (%v)", r.TokenTier, r.TokenUSD, r.TokenModelled, tc.tokenTier, tc.tokens, tc.tokenModelled)
			}
			if isWaiting(r.Mode) != tc.transitionsAtMostBy3 {
				t.Errorf("%s: waiting %v", r.Mode, isWaiting(r.Mode))
			}
		})
	}
	// A flex call is held by the run up to the call timeout: it cannot
	// take 10 min, 8 h or 24 h; background work is given up at 8 h 20
	// min, before 24 h. The batch takes each.
	var cannot []string
	for _, g := range gaps {
		cannot = append(cannot, g.Mode+" "+latencyLabel(time.Duration(g.LatencyS*float64(time.Second))))
	}
	if want := []string{"flex 10 min", "flex 8 h", "background 24 h", "flex 24 h"}; !slices.Equal(cannot, want) {
		t.Errorf("cannot %v, want %v", cannot, want)
	}
	// Every mode at every latency of issue 40 is a row or says why not.
	for _, l := range []time.Duration{2 * time.Second, 10 * time.Minute, 8 * time.Hour, 24 * time.Hour} {
		for _, m := range []string{modeSync, modeAsync, modeFlex, modeBatch} {
			row := slices.ContainsFunc(rows, func(r longJobRow) bool { return r.Mode == m && r.LatencyS == l.Seconds() })
			gap := slices.ContainsFunc(gaps, func(g longJobGap) bool { return g.Mode == m && g.LatencyS == l.Seconds() })
			if row == gap {
				t.Errorf("%s at %s: a row %v, cannot %v", m, l, row, gap)
			}
		}
	}
}

// TestCheckLongJobs: the report fails when a waiting mode's row is more
// than 3 state transitions, and not for a synchronous one's loop.
func TestCheckLongJobs(t *testing.T) {
	t.Parallel()
	in := longJobFixture(t)
	rows, _, err := longJobRows(in)
	if err != nil {
		t.Fatal(err)
	}
	l := &longJobs{Inputs: in, Rows: rows}
	if err := checkLongJobs(l); err != nil {
		t.Fatalf("the rows as computed: %v", err)
	}
	if err := checkLongJobs(nil); err != nil {
		t.Fatalf("no section: %v", err)
	}
	for _, mode := range []string{modeAsync, modeBatch} {
		bad := &longJobs{Rows: append(slices.Clone(rows), longJobRow{Name: "looping", Mode: mode, StateTransitions: 4})}
		if err := checkLongJobs(bad); err == nil {
			t.Errorf("a %s row of 4 transitions passes", mode)
		}
	}
}

// TestTokenPrice: the rows' tokens are billed at cdk.json's price as the
// deployment reads it: openai-primary, kind openai, a batch discount for
// 24 h; the batch mode bills it, the flex mode's rate is modelled at it.
func TestTokenPrice(t *testing.T) {
	t.Parallel()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	tk, err := tokenPriceFrom(root)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Kind != provider.KindOpenAI || tk.DiscountPercent["24h"] <= 0 || tk.Price.Input <= 0 || tk.Price.Output <= 0 {
		t.Fatalf("tokens %+v", tk)
	}
	full := float64(tk.Price.Cost(tokensIn, tokensOut)) / float64(job.NanosPerUSD) * 1e6
	for _, tc := range []struct {
		kind, mode string
		tier       job.Tier
		want       job.Tier
		off        int
		modelled   bool
	}{
		{kindSync, modeSync, job.TierNow, job.TierNow, 0, false},
		{kindBatch, modeBatch, job.TierBatch24h, job.TierBatch24h, tk.DiscountPercent["24h"], false},
		{kindFlex, modeFlex, job.TierFlex2h, job.TierFlex2h, tk.DiscountPercent["24h"], true},
		{kindBackground, modeAsync, job.TierFlex8h, job.TierFlex8h, 0, false},
	} {
		run, usd, modelled, err := tokenBill(tk, tc.kind, tc.mode, tc.tier)
		if err != nil {
			t.Fatal(err)
		}
		want := round2(full * float64(100-tc.off) / 100)
		if run != tc.want || math.Abs(usd-want) > 0.01 || modelled != tc.modelled {
			t.Errorf("%s %s: %s $%v (modelled %v), want %s $%v (%v)", tc.kind, tc.tier, run, usd, modelled, tc.want, want, tc.modelled)
		}
	}
	// A mode the kind does not run the tier in is refused.
	if _, _, _, err := tokenBill(tk, kindBatch, modeBatch, job.TierFlex8h); err == nil {
		t.Error("openai at 8h billed as a batch")
	}
}

func TestLatencyLabel(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{2 * time.Second: "2 s", 30 * time.Second: "30 s", 10 * time.Minute: "10 min",
		8 * time.Hour: "8 h", 24 * time.Hour: "24 h", 90 * time.Second: "90 s"} {
		if got := latencyLabel(d); got != want {
			t.Errorf("latencyLabel(%s) = %q, want %q", d, got, want)
		}
	}
}
