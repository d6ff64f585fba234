package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/sfnlocal"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
)

func TestLambdaMemoryIsDeployed(t *testing.T) {
	t.Parallel()
	for _, f := range deploy.Functions() {
		if got := float64(f.MemoryMB) / 1024; got != lambdaMemoryGB {
			t.Errorf("%s: %d MB deployed, the bench prices %v GB", f.Name, f.MemoryMB, lambdaMemoryGB)
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
		want  []float64 // seconds after the submit
	}{
		{"BeforeTheFirstPoll", job.TierNow, 2 * time.Second, []float64{30}},
		{"OnAPoll", job.TierNow, time.Minute, []float64{30, 60}},
		// 30 s at first, then the work's age: the wait doubles.
		{"Doubling", job.TierNow, 100 * time.Second, []float64{30, 60, 120}},
		{"TenMinutes", job.TierNow, 10 * time.Minute, []float64{30, 60, 120, 240, 480, 960}},
		// Past 30 min of age the wait is the 30-min cap.
		{"AnHour", job.TierNow, time.Hour, []float64{30, 60, 120, 240, 480, 960, 1920, 3720}},
		// An 8-h window's cap is a quarter of it: 2 h.
		{"Flex8hCap", job.TierFlex8h, 3 * time.Hour, []float64{30, 60, 120, 240, 480, 960, 1920, 3840, 7680, 14880}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := seconds(pollTimes(job.DefaultPollSchedule(), tc.tier, tc.until)); !slices.Equal(got, tc.want) {
				t.Fatalf("pollTimes = %v, want %v", got, tc.want)
			}
		})
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
		in.MemoryMB["run"] != 256 || !slices.Equal(in.WaitStepsS, []float64{60, 900, 7200, 28800}) {
		t.Fatalf("inputs = %+v", in)
	}
	if _, err := longJobInputsFrom(nil, []byte(`{}`)); err == nil {
		t.Fatal("inputs without a state machine: no error")
	}
}

func TestLongJobRows(t *testing.T) {
	t.Parallel()
	in := longJobFixture(t)
	rows := longJobRows(in)
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
		// Submit, a poll at 30 s finding the job done (the webhook ended
		// it at 2 s): one turn (3 transitions, hold and run, 2 reads),
		// the id's write; the webhook's request, invocation, read, and
		// the delivery taken by its id (a write of 1 WRU).
		// GB-s (80+200+10)/1000·0.25 = 0.0725.
		{"async/2s/webhook arrives", want{1, 0, 2, map[string]float64{"api": 2, "run": 2, "hold": 1},
			map[string]float64{"api": 80, "run": 200, "hold": 10}, 4, 5, 6, 2,
			costRow{DynamoDB: 5 + 10*2 + 1*2, StepFunctions: 12, LambdaReq: 20, LambdaGBs: 0.36, APIGateway: 12, Total: 71.36}}},
		{"async/2s/webhook lost (polling only)", want{1, 0, 30, map[string]float64{"api": 1, "run": 2, "hold": 1},
			map[string]float64{"api": 40, "run": 200, "hold": 10}, 4, 4, 5, 1,
			costRow{DynamoDB: 4 + 10*2, StepFunctions: 12, LambdaReq: 16, LambdaGBs: 0.31, APIGateway: 6, Total: 58.31}}},
		// The first poll, at 30 s, finds it ended: the same turn as at 2 s.
		{"async/30s/webhook arrives", want{1, 0, 30, map[string]float64{"api": 2, "run": 2, "hold": 1},
			map[string]float64{"api": 80, "run": 200, "hold": 10}, 4, 5, 6, 2,
			costRow{DynamoDB: 5 + 10*2 + 1*2, StepFunctions: 12, LambdaReq: 20, LambdaGBs: 0.36, APIGateway: 12, Total: 71.36}}},
		{"async/30s/webhook lost (polling only)", want{1, 0, 30, map[string]float64{"api": 1, "run": 2, "hold": 1},
			map[string]float64{"api": 40, "run": 200, "hold": 10}, 4, 4, 5, 1,
			costRow{DynamoDB: 4 + 10*2, StepFunctions: 12, LambdaReq: 16, LambdaGBs: 0.31, APIGateway: 6, Total: 58.31}}},
		// Past the call timeout: held 4 min, unknown, checked 1 and 16 min
		// later; the second check finds the answer (ends at 20 min).
		{"sync/10m0s/answered", want{2, 240, 1200, map[string]float64{"api": 1, "run": 3, "hold": 2},
			map[string]float64{"api": 40, "run": 240300, "hold": 20}, 7, 6, 5, 1,
			costRow{DynamoDB: 6 + 10*2, StepFunctions: 21, LambdaReq: 24, LambdaGBs: 300.45, APIGateway: 6, Total: 377.45}}},
		// Polls at 30 s and 1, 2, 4 and 8 min hear it running; the one at
		// 16 min ends it.
		{"async/10m0s/webhook lost (polling only)", want{6, 0, 960, map[string]float64{"api": 1, "run": 7, "hold": 6},
			map[string]float64{"api": 40, "run": 700, "hold": 60}, 19, 14, 10, 1,
			costRow{DynamoDB: 14 + 20*2, StepFunctions: 57, LambdaReq: 56, LambdaGBs: 1, APIGateway: 6, Total: 174}}},
		// Held 4 min, checked at 1 and 16 min after it, then held, waiting
		// (2 h) when the hour ends: 2 turns and a hold and wait.
		{"sync/0/provider silent, first hour", want{2, 240, 0, map[string]float64{"api": 1, "run": 3, "hold": 3},
			map[string]float64{"api": 40, "run": 240300, "hold": 30}, 9, 7, 4, 1,
			costRow{DynamoDB: 7 + 8*2, StepFunctions: 27, LambdaReq: 28, LambdaGBs: 300.46, APIGateway: 6, Total: 384.46}}},
		// 7 polls in the hour (the 8th at 3,720 s), each a read and a
		// write, with their hold's read; then held, waiting.
		{"async/0/provider silent, first hour", want{7, 0, 0, map[string]float64{"api": 1, "run": 8, "hold": 8},
			map[string]float64{"api": 40, "run": 800, "hold": 80}, 24, 17, 11, 1,
			costRow{DynamoDB: 17 + 22*2, StepFunctions: 72, LambdaReq: 68, LambdaGBs: 1.15, APIGateway: 6, Total: 208.15}}},
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
	if len(rows) != 3*len(longJobLatencies)+2 {
		t.Errorf("%d rows", len(rows))
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
