package main

import (
	"encoding/json"
	"testing"
)

func TestIndexWriteUnits(t *testing.T) {
	t.Parallel()
	// A 3-unit item: by_owner (ALL) costs the item's units on every write;
	// by_open (KEYS_ONLY) one unit when the entry appears or goes.
	tests := []struct {
		name string
		op   string
		req  string
		resp string
		want float64
	}{
		{"CreateOpenJob", "PutItem", `{"Item":{"id":{"S":"j"},"open_shard":{"S":"open#3"}}}`, `{}`, 3 + 1},
		{"PutWithoutOpenShard", "PutItem", `{"Item":{"id":{"S":"j"}}}`, `{}`, 3},
		{"BookkeepingWhileOpen", "UpdateItem", `{"ExpressionAttributeNames":{"#status":"status"}}`,
			`{"Attributes":{"open_shard":{"S":"open#3"}}}`, 3},
		{"OutcomeRemovesOpenShard", "UpdateItem", `{"ExpressionAttributeNames":{"#open":"open_shard"}}`,
			`{"Attributes":{"id":{"S":"j"}}}`, 3 + 1},
		{"WriteAfterClose", "UpdateItem", `{"ExpressionAttributeNames":{"#status":"status"}}`,
			`{"Attributes":{"id":{"S":"j"}}}`, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var req map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tc.req), &req); err != nil {
				t.Fatal(err)
			}
			if got := indexWriteUnits(tc.op, req, []byte(tc.resp), 3); got != tc.want {
				t.Fatalf("indexWriteUnits = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestConsumed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want float64
	}{
		{"Single", `{"ConsumedCapacity":{"CapacityUnits":2,"TableName":"t"}}`, 2},
		{"Batch", `{"ConsumedCapacity":[{"CapacityUnits":1},{"CapacityUnits":0.5}]}`, 1.5},
		{"Absent", `{"Item":{}}`, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := consumed([]byte(tc.body)); got != tc.want {
				t.Fatalf("consumed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCostOf(t *testing.T) {
	t.Parallel()
	p := perJob{
		Scenario: "x", ReadUnits: 8, ReadBacks: 1, WriteUnits: 4, IndexWriteUnits: 4, StateTransitions: 10,
		LambdaInvocations: map[string]float64{"api": 1, "run": 1},
		LambdaBilledMS:    map[string]float64{"api": 1000, "run": 3000},
		APIRequests:       1,
	}
	pr := map[string]price{
		priceDynamoRead: {USD: 1}, priceDynamoWrite: {USD: 2}, priceTransition: {USD: 3},
		priceLambdaReq: {USD: 4}, priceLambdaGBs: {USD: 5}, priceHTTPAPI: {USD: 6},
	}
	c := costOf(p, pr)
	// (8-1)·1 + (4+4)·2; 10·3; 2·4; 4 s · 0.25 GB · 5; 1·6
	want := costRow{Scenario: "x", DynamoDB: 23, StepFunctions: 30, LambdaReq: 8, LambdaGBs: 5, APIGateway: 6, Total: 72}
	if c != want {
		t.Fatalf("costOf = %+v, want %+v", c, want)
	}
}

func TestReports(t *testing.T) {
	t.Parallel()
	out := "x [INFO] (rapid) INIT REPORT(durationMs: 21.247000)\n" +
		"x [INFO] (rapid) INVOKE RTDONE(status: success, produced bytes: 0, duration: 109.774000ms)\n" +
		"REPORT RequestId: r\tInit Duration: 0.02 ms\tDuration: 131.28 ms\n" +
		"x [INFO] (rapid) INVOKE RTDONE(status: error, produced bytes: 12, duration: 1.5ms)\n"
	inits, durations := reports(out)
	if len(inits) != 1 || inits[0] != 21.247 || len(durations) != 2 || durations[0] != 109.774 || durations[1] != 1.5 {
		t.Fatalf("reports = %v, %v", inits, durations)
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 2, 3}, 2.5},
	}
	for _, tc := range tests {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
