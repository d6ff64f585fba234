package sim

import (
	"encoding/json"
	"fmt"
)

// Chat Completions streaming, as the API reference describes it
// (CreateChatCompletionRequest.stream and stream_options,
// CreateChatCompletionStreamResponse): "data:"-only server-sent events,
// each a chat.completion.chunk carrying the completion's id, created,
// model, system_fingerprint and service_tier; the first chunk's delta
// names the role, the next carry the content (or the refusal) in pieces,
// the last choice chunk has an empty delta and the finish_reason; with
// stream_options.include_usage "an additional chunk will be streamed
// before the data: [DONE] message. The usage field on this chunk shows
// the token usage statistics for the entire request, and the choices
// field will always be an empty array. All other chunks will also
// include a usage field, but with a null value." Then data: [DONE].
// stream_options without stream is refused: "The 'stream_options'
// parameter is only allowed when 'stream' is enabled." (param
// stream_options, code null: the API's 400 as quoted in BerriAI/litellm
// issue 5803).

// openAIStreamOptions are stream_options' members (ChatCompletionStreamOptions).
var openAIStreamOptions = []string{"include_usage", "include_obfuscation"}

// validateOpenAIStream checks stream and stream_options.
func validateOpenAIStream(o object) (stream, usage bool, e *apiError) {
	if o.has("stream") {
		if jsonKind(o["stream"]) != "boolean" {
			return false, false, oaiType("stream", "a boolean", o["stream"])
		}
		_ = json.Unmarshal(o["stream"], &stream)
	}
	if !o.has("stream_options") {
		return stream, false, nil
	}
	if !stream {
		return false, false, oaiInvalid("stream_options", "", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
	}
	so, ok := o.child("stream_options")
	if !ok {
		return false, false, oaiType("stream_options", "an object", o["stream_options"])
	}
	if extra := so.unknown(openAIStreamOptions...); len(extra) > 0 {
		at := "stream_options." + extra[0]
		return false, false, oaiInvalid(at, "unknown_parameter", fmt.Sprintf("Unknown parameter: '%s'.", at))
	}
	for _, k := range openAIStreamOptions {
		if so.has(k) && jsonKind(so[k]) != "boolean" {
			return false, false, oaiType("stream_options."+k, "a boolean", so[k])
		}
	}
	if so.has("include_usage") {
		_ = json.Unmarshal(so["include_usage"], &usage)
	}
	return stream, usage, nil
}

// openAIStream cuts a chat completion into its chunks.
func openAIStream(c Call, a answer) *streamed {
	v, ok := jsonAnswer(a)
	if !ok {
		return nil
	}
	choices, _ := v["choices"].([]any)
	if len(choices) != 1 {
		return nil
	}
	choice, _ := choices[0].(map[string]any)
	msg, _ := choice["message"].(map[string]any)
	chunk := func(delta map[string]any, finish any) map[string]any {
		ch := map[string]any{
			"id": v["id"], "object": "chat.completion.chunk", "created": v["created"], "model": v["model"],
			"service_tier": v["service_tier"], "system_fingerprint": v["system_fingerprint"],
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
		if c.StreamUsage {
			ch["usage"] = nil
		}
		return ch
	}
	events := []streamEvent{sse("", chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil))}
	for _, member := range []string{"content", "refusal"} {
		text, _ := msg[member].(string)
		for _, piece := range textPieces(text) {
			events = append(events, deltaOf(sse("", chunk(map[string]any{member: piece}, nil))))
		}
	}
	events = append(events, sse("", chunk(map[string]any{}, choice["finish_reason"])))
	if c.StreamUsage {
		last := chunk(nil, nil)
		last["choices"], last["usage"] = []any{}, v["usage"]
		events = append(events, sse("", last))
	}
	done := sse("", "[DONE]")
	done.bad = []byte("data: [DON\n\n")
	events = append(events, done)
	return &streamed{contentType: "text/event-stream; charset=utf-8", events: events,
		fail: sse("", map[string]any{"error": map[string]any{"message": "The server had an error while processing your request. Sorry about that!",
			"type": "server_error", "param": nil, "code": nil}})}
}
