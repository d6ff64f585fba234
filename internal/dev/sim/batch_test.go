package sim_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
)

const batchKey = "sk-batch"

var batchOutput = json.RawMessage(`{"category":"billing","priority":3,"summary":"Refund.","needs_human":false}`)

func batchLines() *sim.Simulator {
	return sim.New(sim.Options{Oracle: sim.Fixed{GoodOutput: batchOutput}, APIKey: batchKey})
}

// do sends one request and decodes a JSON answer (nil for none).
func do(t *testing.T, method, url, contentType string, body []byte, header map[string]string) (int, map[string]any, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := ownClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, raw
}

var bearer = map[string]string{"Authorization": "Bearer " + batchKey}

func upload(t *testing.T, url, purpose, name string, content []byte) (int, map[string]any) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if purpose != "" {
		_ = mw.WriteField("purpose", purpose)
	}
	part, _ := mw.CreateFormFile("file", name)
	_, _ = part.Write(content)
	_ = mw.Close()
	status, out, _ := do(t, http.MethodPost, url+"/v1/files", mw.FormDataContentType(), body.Bytes(), bearer)
	return status, out
}

func chatLine(id, url string) string {
	return `{"custom_id":"` + id + `","method":"POST","url":"` + url + `","body":{"model":"gpt-test","messages":[{"role":"user","content":"hi"}],` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"t","schema":{"type":"object"}}}}}`
}

// TestOpenAIBatchIsStrict: what the Batch API refuses at the create, and
// an input file that breaks its rules fails the batch's validation with
// its lines never run.
func TestOpenAIBatchIsStrict(t *testing.T) {
	t.Parallel()
	lines := batchLines()
	s, err := sim.NewOpenAIBatch(sim.BatchOptions{Lines: lines, APIKey: batchKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	good := []byte(chatLine("a", "/v1/chat/completions") + "\n" + chatLine("b", "/v1/chat/completions") + "\n")
	status, file := upload(t, srv.URL, "batch", "in.jsonl", good)
	if status != 200 || file["object"] != "file" || file["purpose"] != "batch" {
		t.Fatalf("upload: %d %v", status, file)
	}
	create := func(body string) (int, map[string]any) {
		status, out, _ := do(t, http.MethodPost, srv.URL+"/v1/batches", "application/json", []byte(body), bearer)
		return status, out
	}
	fid := file["id"].(string)
	for name, body := range map[string]string{
		"AnotherWindow":     `{"input_file_id":"` + fid + `","endpoint":"/v1/chat/completions","completion_window":"48h"}`,
		"NoWindow":          `{"input_file_id":"` + fid + `","endpoint":"/v1/chat/completions"}`,
		"AnUnknownMember":   `{"input_file_id":"` + fid + `","endpoint":"/v1/chat/completions","completion_window":"24h","priority":1}`,
		"NoSuchFile":        `{"input_file_id":"file-nope","endpoint":"/v1/chat/completions","completion_window":"24h"}`,
		"AnUnknownEndpoint": `{"input_file_id":"` + fid + `","endpoint":"/v1/chat","completion_window":"24h"}`,
		"SeventeenPairs": `{"input_file_id":"` + fid + `","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":{` +
			strings.Repeat(`"k":"v",`, 0) + `"a1":"v","a2":"v","a3":"v","a4":"v","a5":"v","a6":"v","a7":"v","a8":"v","a9":"v","b1":"v","b2":"v","b3":"v","b4":"v","b5":"v","b6":"v","b7":"v","b8":"v"}}`,
	} {
		if status, out := create(body); status != http.StatusBadRequest || out["error"] == nil {
			t.Errorf("%s: %d %v, want the API's 400", name, status, out)
		}
	}
	if status, _, _ := do(t, http.MethodPost, srv.URL+"/v1/batches", "application/json",
		[]byte(`{"input_file_id":"`+fid+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`), nil); status != http.StatusUnauthorized {
		t.Errorf("no key: %d", status)
	}
	if status, _ := upload(t, srv.URL, "", "in.jsonl", good); status != http.StatusBadRequest {
		t.Errorf("an upload without purpose: %d", status)
	}
	// A file with a repeated custom_id, a line to another endpoint, and
	// two models: the batch is created, then fails its validation.
	bad := []byte(chatLine("a", "/v1/chat/completions") + "\n" + chatLine("a", "/v1/chat/completions") + "\n" +
		chatLine("c", "/v1/embeddings") + "\n" + strings.Replace(chatLine("d", "/v1/chat/completions"), "gpt-test", "gpt-other", 1) + "\n")
	_, badFile := upload(t, srv.URL, "batch", "bad.jsonl", bad)
	status, b := create(`{"input_file_id":"` + badFile["id"].(string) + `","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":{"onejob_batch":"bat_1"}}`)
	if status != 200 || b["status"] != "validating" {
		t.Fatalf("created: %d %v", status, b)
	}
	s.Advance(time.Second)
	_, b, _ = do(t, http.MethodGet, srv.URL+"/v1/batches/"+b["id"].(string), "", nil, bearer)
	errs, _ := b["errors"].(map[string]any)
	data, _ := errs["data"].([]any)
	if b["status"] != "failed" || len(data) != 3 {
		t.Fatalf("a bad file: %v, errors %v", b["status"], data)
	}
	for _, d := range data {
		if code := d.(map[string]any)["code"]; code != "duplicate_custom_id" && code != "mismatched_url" && code != "model_mismatch" {
			t.Errorf("error %v", d)
		}
	}
	if lines.Executions("a") != 0 || b["output_file_id"] != nil {
		t.Fatal("a batch that failed its validation ran a line")
	}
}

// TestOpenAIBatchLivesOnItsClock: validating, in_progress, completed once
// its processing time has passed; its output in an order of its own, each
// line once; a batch.completed webhook, signed; a read counted per batch.
func TestOpenAIBatchLivesOnItsClock(t *testing.T) {
	t.Parallel()
	got := make(chan *http.Request, 4)
	bodies := make(chan []byte, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
	}))
	t.Cleanup(hook.Close)
	lines := batchLines()
	s, err := sim.NewOpenAIBatch(sim.BatchOptions{Lines: lines, APIKey: batchKey, ProcessingTime: time.Hour,
		WebhookURL: hook.URL, WebhookSecret: "whsec_RdvaYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c="})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	var in strings.Builder
	ids := []string{"l1", "l2", "l3", "l4", "l5"}
	for _, id := range ids {
		in.WriteString(chatLine(id, "/v1/chat/completions") + "\n")
	}
	_, file := upload(t, srv.URL, "batch", "in.jsonl", []byte(in.String()))
	_, b, _ := do(t, http.MethodPost, srv.URL+"/v1/batches", "application/json",
		[]byte(`{"input_file_id":"`+file["id"].(string)+`","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":{"onejob_batch":"bat_x"}}`), bearer)
	id := b["id"].(string)
	read := func() map[string]any {
		_, out, _ := do(t, http.MethodGet, srv.URL+"/v1/batches/"+id, "", nil, bearer)
		return out
	}
	s.Advance(time.Minute)
	if out := read(); out["status"] != "in_progress" {
		t.Fatalf("after a minute: %v", out["status"])
	}
	s.Advance(time.Hour)
	out := read()
	counts := out["request_counts"].(map[string]any)
	if out["status"] != "completed" || counts["completed"] != 5.0 || out["output_file_id"] == nil {
		t.Fatalf("after an hour: %v %v", out["status"], counts)
	}
	_, _, content := do(t, http.MethodGet, srv.URL+"/v1/files/"+out["output_file_id"].(string)+"/content", "", nil, bearer)
	var order []string
	for _, l := range strings.Split(strings.TrimSpace(string(content)), "\n") {
		var line struct {
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int             `json:"status_code"`
				Body       json.RawMessage `json:"body"`
			} `json:"response"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil || line.Response.StatusCode != 200 {
			t.Fatalf("output line %s: %v", l, err)
		}
		order = append(order, line.CustomID)
		if lines.Executions(line.CustomID) != 1 {
			t.Fatalf("line %s ran %d times", line.CustomID, lines.Executions(line.CustomID))
		}
	}
	if len(order) != 5 || strings.Join(order, ",") == strings.Join(ids, ",") {
		t.Fatalf("output order %v: every line, and not the input's order", order)
	}
	rec, _ := s.Batch(id)
	if rec.Reads != 2 || rec.Metadata["onejob_batch"] != "bat_x" {
		t.Fatalf("record %+v", rec)
	}
	r := <-got
	body := <-bodies
	// Signed on the receiver's clock as the simulator's moved it.
	if err := provider.VerifySigned(s.WebhookSecret(), r.Header, body, time.Now().Add(time.Hour+time.Minute)); err != nil {
		t.Fatalf("webhook: %v", err)
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.Type != "batch.completed" || ev.Data.ID != id {
		t.Fatalf("event %s: %v", body, err)
	}
}

// TestMessageBatchesIsStrict: what the Message Batches API refuses at the
// create; params are held to the Messages API's rules when the request
// runs (errored), never at the create; results only once it ended.
func TestMessageBatchesIsStrict(t *testing.T) {
	t.Parallel()
	lines := batchLines()
	s, err := sim.NewMessageBatches(sim.BatchOptions{Lines: lines, APIKey: batchKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	hdr := map[string]string{"x-api-key": batchKey, "anthropic-version": "2023-06-01"}
	params := `{"model":"claude-test","max_tokens":64,"messages":[{"role":"user","content":"hi"}],` +
		`"tools":[{"name":"t","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"t"}}`
	for name, body := range map[string]string{
		"NoRequests":      `{"requests":[]}`,
		"ABadCustomID":    `{"requests":[{"custom_id":"a/1","params":` + params + `}]}`,
		"ALongCustomID":   `{"requests":[{"custom_id":"` + strings.Repeat("a", 65) + `","params":` + params + `}]}`,
		"ARepeatedID":     `{"requests":[{"custom_id":"a","params":` + params + `},{"custom_id":"a","params":` + params + `}]}`,
		"AnUnknownMember": `{"requests":[{"custom_id":"a","params":` + params + `}],"metadata":{}}`,
		"NoParams":        `{"requests":[{"custom_id":"a"}]}`,
	} {
		if status, out, _ := do(t, http.MethodPost, srv.URL+"/v1/messages/batches", "application/json", []byte(body), hdr); status != 400 || out["type"] != "error" {
			t.Errorf("%s: %d %v", name, status, out)
		}
	}
	if status, _, _ := do(t, http.MethodPost, srv.URL+"/v1/messages/batches", "application/json",
		[]byte(`{"requests":[{"custom_id":"a","params":`+params+`}]}`), map[string]string{"x-api-key": batchKey}); status != 400 {
		t.Errorf("no anthropic-version: %d", status)
	}
	// A request whose params break the Messages API's rules is taken, and
	// ends errored.
	bad := strings.Replace(params, `"max_tokens":64`, `"max_tokens":0`, 1)
	status, b, _ := do(t, http.MethodPost, srv.URL+"/v1/messages/batches", "application/json",
		[]byte(`{"requests":[{"custom_id":"ok","params":`+params+`},{"custom_id":"bad","params":`+bad+`}]}`), hdr)
	if status != 200 || b["processing_status"] != "in_progress" || b["results_url"] != nil {
		t.Fatalf("created: %d %v", status, b)
	}
	id := b["id"].(string)
	if status, _, _ := do(t, http.MethodGet, srv.URL+"/v1/messages/batches/"+id+"/results", "", nil, hdr); status != 400 {
		t.Fatalf("results before its end: %d", status)
	}
	if err := s.Complete(id); err != nil {
		t.Fatal(err)
	}
	_, b, _ = do(t, http.MethodGet, srv.URL+"/v1/messages/batches/"+id, "", nil, hdr)
	counts := b["request_counts"].(map[string]any)
	if b["processing_status"] != "ended" || counts["succeeded"] != 1.0 || counts["errored"] != 1.0 || b["results_url"] != srv.URL+"/v1/messages/batches/"+id+"/results" {
		t.Fatalf("ended: %v", b)
	}
	_, _, raw := do(t, http.MethodGet, b["results_url"].(string), "", nil, hdr)
	results := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r struct {
			CustomID string `json:"custom_id"`
			Result   struct {
				Type  string `json:"type"`
				Error struct {
					Error struct {
						Type string `json:"type"`
					} `json:"error"`
				} `json:"error"`
			} `json:"result"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		results[r.CustomID] = r.Result.Type + "/" + r.Result.Error.Error.Type
	}
	if results["ok"] != "succeeded/" || results["bad"] != "errored/invalid_request_error" {
		t.Fatalf("results %v", results)
	}
}
