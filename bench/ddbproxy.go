package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/onejob/onejob/internal/dynamo"
)

// ddbProxy sits between the stack and dynalite and counts every DynamoDB
// request by operation and table. It asks dynalite for the consumed capacity
// of each request (ReturnConsumedCapacity=TOTAL, added when the caller did
// not ask) so read and write units reflect real item sizes; the caller's
// response is otherwise passed through byte for byte. dynalite does not
// verify signatures, so changing the body is harmless here.
type ddbProxy struct {
	target string
	client *http.Client
	// jobsTables get the global-secondary-index write model (see indexWrites).
	jobsTables []string

	mu    sync.Mutex
	stats map[string]*opStats // "Operation table"
}

// opStats counts one operation on one table.
type opStats struct {
	Requests   int     `json:"requests"`
	CondFailed int     `json:"conditional_check_failed"`
	Errors     int     `json:"errors"`
	ReadUnits  float64 `json:"read_units"`
	WriteUnits float64 `json:"write_units"`
	// IndexWriteUnits are modelled, not measured: dynalite does not charge
	// index writes. See indexWrites.
	IndexWriteUnits float64 `json:"index_write_units"`
}

func (s *opStats) add(o *opStats) {
	s.Requests += o.Requests
	s.CondFailed += o.CondFailed
	s.Errors += o.Errors
	s.ReadUnits += o.ReadUnits
	s.WriteUnits += o.WriteUnits
	s.IndexWriteUnits += o.IndexWriteUnits
}

func (s *opStats) sub(o *opStats) {
	s.Requests -= o.Requests
	s.CondFailed -= o.CondFailed
	s.Errors -= o.Errors
	s.ReadUnits -= o.ReadUnits
	s.WriteUnits -= o.WriteUnits
	s.IndexWriteUnits -= o.IndexWriteUnits
}

func newDDBProxy(target string, jobsTables ...string) *ddbProxy {
	return &ddbProxy{
		target:     strings.TrimRight(target, "/"),
		client:     &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}},
		jobsTables: jobsTables,
		stats:      map[string]*opStats{},
	}
}

// capacityOps accept ReturnConsumedCapacity.
var capacityOps = map[string]bool{
	"GetItem": true, "PutItem": true, "UpdateItem": true, "DeleteItem": true, "Query": true, "Scan": true,
	"BatchGetItem": true, "BatchWriteItem": true, "TransactGetItems": true, "TransactWriteItems": true,
}

var writeOps = map[string]bool{"PutItem": true, "UpdateItem": true, "DeleteItem": true, "BatchWriteItem": true, "TransactWriteItems": true}

func (p *ddbProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	var req map[string]json.RawMessage
	_ = json.Unmarshal(body, &req)
	var table string
	_ = json.Unmarshal(req["TableName"], &table)
	if capacityOps[op] && req != nil {
		if _, asked := req["ReturnConsumedCapacity"]; !asked {
			req["ReturnConsumedCapacity"] = json.RawMessage(`"TOTAL"`)
			if b, err := json.Marshal(req); err == nil {
				body = b
			}
		}
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for k, v := range r.Header {
		if !strings.EqualFold(k, "Content-Length") {
			out.Header[k] = v
		}
	}
	resp, err := p.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
	p.record(op, table, req, resp.StatusCode, respBody)
}

func (p *ddbProxy) record(op, table string, req map[string]json.RawMessage, status int, body []byte) {
	st := &opStats{Requests: 1}
	if status != http.StatusOK {
		var e struct {
			Type string `json:"__type"`
		}
		_ = json.Unmarshal(body, &e)
		if strings.HasSuffix(e.Type, "ConditionalCheckFailedException") {
			st.CondFailed = 1
			// A failed condition still consumes write capacity on AWS;
			// dynalite reports none. Count the minimum, one unit.
			st.WriteUnits = 1
		} else {
			st.Errors = 1
		}
	} else {
		units := consumed(body)
		if writeOps[op] {
			st.WriteUnits = units
			if slices.Contains(p.jobsTables, table) {
				st.IndexWriteUnits = indexWriteUnits(op, req, body, units)
			}
		} else {
			st.ReadUnits = units
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := op + " " + table
	if p.stats[k] == nil {
		p.stats[k] = &opStats{}
	}
	p.stats[k].add(st)
}

// consumed sums ConsumedCapacity, which is an object or (batch) an array.
func consumed(body []byte) float64 {
	var one struct {
		ConsumedCapacity json.RawMessage
	}
	if json.Unmarshal(body, &one) != nil || len(one.ConsumedCapacity) == 0 {
		return 0
	}
	type cc struct{ CapacityUnits float64 }
	var c cc
	if json.Unmarshal(one.ConsumedCapacity, &c) == nil {
		return c.CapacityUnits
	}
	var many []cc
	_ = json.Unmarshal(one.ConsumedCapacity, &many)
	sum := 0.0
	for _, c := range many {
		sum += c.CapacityUnits
	}
	return sum
}

// indexWriteUnits models the global-secondary-index writes of a successful
// write to the jobs table, per DynamoDB's documented rules (an index entry is
// written when an attribute it projects changes, deleted when its key goes):
//   - by_owner projects ALL: every job carries owner, so every write of the
//     item rewrites its entry, about as large as the item (units);
//   - by_open projects KEYS_ONLY: its entry is written once, when the job is
//     created carrying open_shard, and deleted once, by the outcome write that
//     removes it; an entry is far under 1 KB, one unit each.
func indexWriteUnits(op string, req map[string]json.RawMessage, resp []byte, units float64) float64 {
	n := units // by_owner
	switch op {
	case "PutItem":
		if bytes.Contains(req["Item"], []byte(`"`+dynamo.AttrOpenShard+`"`)) {
			n++
		}
	case "UpdateItem":
		if bytes.Contains(req["ExpressionAttributeNames"], []byte(`"`+dynamo.AttrOpenShard+`"`)) {
			n++ // the outcome's REMOVE of open_shard
		}
	}
	return n
}

// snapshot copies the counters.
func (p *ddbProxy) snapshot() map[string]opStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]opStats, len(p.stats))
	for k, v := range p.stats {
		out[k] = *v
	}
	return out
}

// ddbDelta is what happened between two snapshots.
type ddbDelta map[string]opStats

func deltaOf(before, after map[string]opStats) ddbDelta {
	out := ddbDelta{}
	for k, a := range after {
		b := before[k]
		a.sub(&b)
		if a.Requests != 0 {
			out[k] = a
		}
	}
	return out
}

// totals sums the delta; byOp groups requests by operation name.
func (d ddbDelta) totals() (t opStats, byOp map[string]int) {
	byOp = map[string]int{}
	for k, s := range d {
		t.add(&s)
		op, _, _ := strings.Cut(k, " ")
		byOp[op] += s.Requests
	}
	return t, byOp
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
