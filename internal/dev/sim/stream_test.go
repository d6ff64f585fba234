package sim_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/smithy-go/eventstream"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
)

// streamPost posts body with header and returns the open answer.
func streamPost(t *testing.T, url string, header map[string]string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := ownClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// sseEvents reads a whole server-sent event stream.
func sseEvents(t *testing.T, resp *http.Response) []provider.SSEEvent {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("answer %d %s: %s", resp.StatusCode, ct, b)
	}
	r := provider.NewSSEReader(resp.Body, 1<<20, 1<<20)
	var out []provider.SSEEvent
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

func decodeData(t *testing.T, ev provider.SSEEvent) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &v); err != nil {
		t.Fatalf("event %q: data %s: %v", ev.Type, ev.Data, err)
	}
	return v
}

const streamedOutput = `{"text":"hi"}`

// TestOpenAIStreamsChunks reads a streamed chat completion as the API
// reference describes it, with and without include_usage.
func TestOpenAIStreamsChunks(t *testing.T) {
	t.Parallel()
	for _, usage := range []bool{true, false} {
		t.Run(map[bool]string{true: "IncludeUsage", false: "NoUsage"}[usage], func(t *testing.T) {
			t.Parallel()
			s, url := serveSim(t, sim.Options{}, (*sim.Simulator).OpenAI)
			body := edit(t, openAIBase, func(m map[string]any) {
				m["stream"] = true
				if usage {
					m["stream_options"] = map[string]any{"include_usage": true}
				}
			})
			raw, _ := json.Marshal(body)
			events := sseEvents(t, streamPost(t, url+"/v1/chat/completions", nil, string(raw)))
			last := events[len(events)-1]
			if last.Type != "" || last.Data != "[DONE]" {
				t.Fatalf("the stream ends with %+v, not data: [DONE]", last)
			}
			var content strings.Builder
			ids := map[any]bool{}
			finish := ""
			for i, ev := range events[:len(events)-1] {
				c := decodeData(t, ev)
				if ev.Type != "" || c["object"] != "chat.completion.chunk" {
					t.Fatalf("event %d: %q %v", i, ev.Type, c)
				}
				ids[c["id"]] = true
				_, hasUsage := c["usage"]
				if hasUsage != usage {
					t.Errorf("chunk %d has usage %v, include_usage %v", i, hasUsage, usage)
				}
				choices := arr(c["choices"])
				if usage && i == len(events)-2 {
					u := obj(c["usage"])
					if len(choices) != 0 || u["prompt_tokens"] != float64(s.Calls()[0].InputTokens) || u["completion_tokens"] == float64(0) {
						t.Errorf("the usage chunk: %v", c)
					}
					continue
				}
				if c["usage"] != nil {
					t.Errorf("chunk %d: usage %v before the last", i, c["usage"])
				}
				choice := obj(choices[0])
				if d, ok := obj(choice["delta"])["content"].(string); ok {
					content.WriteString(d)
				}
				if f, ok := choice["finish_reason"].(string); ok {
					finish = f
				}
			}
			if len(ids) != 1 || content.String() != streamedOutput || finish != "stop" {
				t.Errorf("ids %v, content %q, finish_reason %q", ids, content.String(), finish)
			}
			if c := s.Calls()[0]; !c.Stream || c.StreamUsage != usage || c.Events != len(events) {
				t.Errorf("recorded %+v, want a stream of %d events", c, len(events))
			}
		})
	}
}

// TestAnthropicStreamsEvents reads a streamed message as the streaming
// guide describes it.
func TestAnthropicStreamsEvents(t *testing.T) {
	t.Parallel()
	s, url := serveSim(t, sim.Options{}, (*sim.Simulator).Anthropic)
	body := edit(t, anthropicBase, func(m map[string]any) { m["stream"] = true })
	raw, _ := json.Marshal(body)
	events := sseEvents(t, streamPost(t, url+"/v1/messages", anthropicHeaders, string(raw)))
	var kinds []string
	var input strings.Builder
	for _, ev := range events {
		d := decodeData(t, ev)
		if d["type"] != ev.Type {
			t.Fatalf("event %q carries type %v", ev.Type, d["type"])
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != ev.Type {
			kinds = append(kinds, ev.Type)
		}
		switch ev.Type {
		case "message_start":
			m := obj(d["message"])
			if m["stop_reason"] != nil || len(arr(m["content"])) != 0 || obj(m["usage"])["input_tokens"] != float64(s.Calls()[0].InputTokens) {
				t.Errorf("message_start: %v", m)
			}
		case "content_block_start":
			if b := obj(d["content_block"]); b["type"] != "tool_use" || b["name"] != "demo" {
				t.Errorf("content_block_start: %v", b)
			}
		case "content_block_delta":
			delta := obj(d["delta"])
			if delta["type"] != "input_json_delta" {
				t.Errorf("delta: %v", delta)
			}
			input.WriteString(delta["partial_json"].(string))
		case "message_delta":
			if obj(d["delta"])["stop_reason"] != "tool_use" || obj(d["usage"])["output_tokens"] != float64(s.Calls()[0].OutputTokens) {
				t.Errorf("message_delta: %v", d)
			}
		}
	}
	want := []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if !slices.Equal(kinds, want) || input.String() != streamedOutput {
		t.Errorf("events %v (want %v), input %q", kinds, want, input.String())
	}
}

// TestBedrockStreamsEventStream decodes ConverseStream's answer with the
// event-stream decoder the SDK uses.
func TestBedrockStreamsEventStream(t *testing.T) {
	t.Parallel()
	s, url := serveSim(t, sim.Options{}, (*sim.Simulator).Bedrock)
	resp := streamPost(t, url+"/model/"+claudeOnBedrock+"/converse-stream", nil, bedrockBase)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/vnd.amazon.eventstream" || resp.Header.Get("x-amzn-RequestId") == "" {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	dec := eventstream.NewDecoder()
	var kinds []string
	var input strings.Builder
	n := 0
	for {
		msg, err := dec.Decode(resp.Body, nil)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		typ := msg.Headers.Get(eventstream.EventTypeHeader).String()
		if msg.Headers.Get(eventstream.MessageTypeHeader).String() != "event" || msg.Headers.Get(eventstream.ContentTypeHeader).String() != "application/json" {
			t.Fatalf("message headers %v", msg.Headers)
		}
		var p map[string]any
		if err := json.Unmarshal(msg.Payload, &p); err != nil || p["p"] == nil {
			t.Fatalf("payload %s (padding is the service's): %v", msg.Payload, err)
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != typ {
			kinds = append(kinds, typ)
		}
		switch typ {
		case "contentBlockDelta":
			input.WriteString(obj(obj(p["delta"])["toolUse"])["input"].(string))
		case "messageStop":
			if p["stopReason"] != "tool_use" {
				t.Errorf("messageStop %v", p)
			}
		case "metadata":
			if obj(p["usage"])["inputTokens"] != float64(s.Calls()[0].InputTokens) {
				t.Errorf("metadata %v", p)
			}
		}
	}
	want := []string{"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}
	if !slices.Equal(kinds, want) || input.String() != streamedOutput || s.Calls()[0].Events != n {
		t.Errorf("events %v (want %v), input %q, recorded %+v", kinds, want, input.String(), s.Calls()[0])
	}
}

// TestWebhookStreamKeepsTheContract: a receiver's streamed answer is the
// contract's delta and answer events, its answer event the body a whole
// answer has; a client that leaves mid-stream does not stop the work,
// whose answer a repeat of the key gets whole, marked as a replay.
func TestWebhookStreamKeepsTheContract(t *testing.T) {
	t.Parallel()
	s, url := serveSim(t, sim.Options{}, (*sim.Simulator).Webhook)
	accept := map[string]string{"Idempotency-Key": "j/1", "Accept": "text/event-stream, application/json"}
	events := sseEvents(t, streamPost(t, url+"/hook", accept, webhookBase))
	var text strings.Builder
	for _, ev := range events[:len(events)-1] {
		if ev.Type != "delta" {
			t.Fatalf("event %q before the answer", ev.Type)
		}
		text.WriteString(decodeData(t, ev)["text"].(string))
	}
	answer := events[len(events)-1]
	a := decodeData(t, answer)
	out, _ := json.Marshal(a["output"])
	if answer.Type != "answer" || text.String() != streamedOutput || string(out) != streamedOutput || a["usage"] == nil {
		t.Fatalf("deltas %q, %q event %v", text.String(), answer.Type, a)
	}
	replay := streamPost(t, url+"/hook", accept, webhookBase)
	whole, _ := io.ReadAll(replay.Body)
	if replay.Header.Get(provider.HeaderIdempotentReplayed) != "true" || !strings.HasPrefix(replay.Header.Get("Content-Type"), "application/json") ||
		string(bytes.TrimSpace(whole)) != answer.Data {
		t.Errorf("a repeat got %v %s, want the answer event's body whole, replayed", replay.Header, whole)
	}

	// A client that leaves after the first delta: the work goes on.
	s.SetStream(sim.StreamOptions{TokenRate: 200})
	key := map[string]string{"Idempotency-Key": "j/2", "Accept": "text/event-stream"}
	body := strings.Replace(webhookBase, `"j/1"`, `"j/2"`, 1)
	resp := streamPost(t, url+"/hook", key, body)
	r := provider.NewSSEReader(resp.Body, 1<<20, 1<<20)
	if ev, err := r.Next(); err != nil || ev.Type != "delta" {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	_ = resp.Body.Close()
	await(t, s.Finished("j/2"), "the work of a stream its client left")
	if got := s.Executions("j/2"); got != 1 {
		t.Errorf("executed %d times", got)
	}
	replay = streamPost(t, url+"/hook", key, body)
	whole, _ = io.ReadAll(replay.Body)
	if replay.StatusCode != http.StatusOK || replay.Header.Get(provider.HeaderIdempotentReplayed) != "true" || !strings.Contains(string(whole), `"output":{"text":"hi"}`) {
		t.Errorf("a repeat after the client left got %d %s", replay.StatusCode, whole)
	}
}

// TestStreamPace: the first delta waits FirstToken, the next ones
// 1/TokenRate each (lower bounds: a busy machine only adds to them).
func TestStreamPace(t *testing.T) {
	t.Parallel()
	s, url := serveSim(t, sim.Options{}, (*sim.Simulator).OpenAI)
	const first, rate = 80 * time.Millisecond, 100.0
	s.SetStream(sim.StreamOptions{FirstToken: first, TokenRate: rate})
	raw, _ := json.Marshal(edit(t, openAIBase, func(m map[string]any) { m["stream"] = true }))
	start := time.Now()
	resp := streamPost(t, url+"/v1/chat/completions", nil, string(raw))
	r := provider.NewSSEReader(resp.Body, 1<<20, 1<<20)
	var at []time.Duration
	for {
		ev, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Data == "[DONE]" {
			break
		}
		if d, ok := obj(arr(decodeData(t, ev)["choices"])[0])["delta"].(map[string]any)["content"].(string); ok && d != "" {
			at = append(at, time.Since(start))
		}
	}
	if len(at) < 3 {
		t.Fatalf("%d deltas", len(at))
	}
	if at[0] < first {
		t.Errorf("the first delta came after %v, before the first token's %v", at[0], first)
	}
	if least := time.Duration(float64(len(at)-1) / rate * float64(time.Second)); at[len(at)-1]-at[0] < least {
		t.Errorf("%d deltas in %v, faster than %v a second", len(at), at[len(at)-1]-at[0], rate)
	}
}

// TestDemoStreams: the demo simulator streams as a webhook receiver does,
// paced by onejob run's flags, a job's own script or a provider-wide
// script, broken by the latter, and counts its streams.
func TestDemoStreams(t *testing.T) {
	t.Parallel()
	demo, srv, err := sim.StartDemo()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	body := `{"job_id":"j","attempt":1,"idempotency_key":"j/1","job_type":"demo","input":{"prompt":"a few words more"},"prompt":"a few words more"}`
	accept := map[string]string{"Idempotency-Key": "j/1", "Accept": "text/event-stream, application/json"}
	// onejob run's --demo-first-token: every provider's pace.
	demo.SetStream(sim.StreamOptions{FirstToken: 40 * time.Millisecond})
	began := time.Now()
	events := sseEvents(t, streamPost(t, srv.URL()+"/sim-primary", accept, body))
	if took := time.Since(began); took < 40*time.Millisecond {
		t.Errorf("a stream paced to its first token after 40ms took %v", took)
	}
	var text strings.Builder
	for _, ev := range events[:len(events)-1] {
		text.WriteString(decodeData(t, ev)["text"].(string))
	}
	out, _ := json.Marshal(decodeData(t, events[len(events)-1])["output"])
	if text.String() != string(out) || !strings.Contains(text.String(), "a few words more") || demo.Stats()[sim.DemoPrimary].Streamed != 1 {
		t.Errorf("deltas %q, output %s, stats %+v", text.String(), out, demo.Stats()[sim.DemoPrimary])
	}

	// A job's own script paces its stream (demo-stream's input allows
	// it), over the simulator's pace.
	own := `{"job_id":"j","attempt":1,"idempotency_key":"j/3","job_type":"demo-stream","input":{"prompt":"paced by its job",` +
		`"simulate":{"sim-primary":{"first_token_ms":150}}},"prompt":"paced by its job"}`
	accept["Idempotency-Key"] = "j/3"
	began = time.Now()
	paced := sseEvents(t, streamPost(t, srv.URL()+"/sim-primary", accept, own))
	if took := time.Since(began); took < 150*time.Millisecond || len(paced) < 2 {
		t.Errorf("a stream its job paced to its first token after 150ms took %v (%d events)", took, len(paced))
	}

	for _, bad := range []string{`{"cut":{"at":1,"kind":"explode"}}`, `{"first_token_ms":-1}`, `{"tokens_per_second":-2}`} {
		if status, _, _ := send(t, http.MethodPut, srv.URL()+"/control/sim-fallback", nil, bad); status != http.StatusBadRequest {
			t.Errorf("PUT %s: %d, want 400", bad, status)
		}
	}
	if status, _, out := send(t, http.MethodPut, srv.URL()+"/control/sim-fallback", nil, `{"first_token_ms":50,"cut":{"at":2,"kind":"end"}}`); status != http.StatusOK {
		t.Fatalf("PUT: %d %v", status, out)
	}
	start := time.Now()
	accept["Idempotency-Key"] = "j/2"
	cut := sseEvents(t, streamPost(t, srv.URL()+"/sim-fallback", accept, strings.ReplaceAll(body, "j/1", "j/2")))
	if len(cut) != 2 || time.Since(start) < 50*time.Millisecond {
		t.Errorf("a stream cut at its third event had %d events, after %v", len(cut), time.Since(start))
	}
}
