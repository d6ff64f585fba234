package sim

import "encoding/json"

// Messages streaming, as the streaming guide describes it: named
// server-sent events, each event's data carrying its type too:
// message_start (the message with empty content, stop_reason null, and
// its usage so far: the input, an output token), then per content block
// content_block_start, its deltas (text_delta; a tool call's input as
// input_json_delta partial_json, the first one empty) and
// content_block_stop, a ping among them, then message_delta (the
// stop_reason, and usage whose output_tokens is the total so far), and
// message_stop. An error after the stream started is an error event,
// {"type": "error", "error": {"type", "message"}}.

// anthropicStream cuts a message into its events.
func anthropicStream(c Call, a answer) *streamed {
	v, ok := jsonAnswer(a)
	if !ok || v["type"] != "message" {
		return nil
	}
	usage, _ := v["usage"].(map[string]any)
	startUsage := map[string]any{}
	for k, u := range usage {
		startUsage[k] = u
	}
	if n, _ := usage["output_tokens"].(float64); n > 0 {
		startUsage["output_tokens"] = 1
	}
	start := map[string]any{"id": v["id"], "type": "message", "role": "assistant", "model": v["model"], "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage}
	events := []streamEvent{sse("message_start", map[string]any{"type": "message_start", "message": start})}
	blocks, _ := v["content"].([]any)
	for i, b := range blocks {
		block, _ := b.(map[string]any)
		opened := map[string]any{"type": block["type"]}
		var delta, field string
		var pieces []string
		switch block["type"] {
		case "tool_use":
			opened["id"], opened["name"], opened["input"] = block["id"], block["name"], map[string]any{}
			input, _ := json.Marshal(block["input"])
			delta, field, pieces = "input_json_delta", "partial_json", append([]string{""}, textPieces(string(input))...)
		case "text":
			opened["text"] = ""
			text, _ := block["text"].(string)
			delta, field, pieces = "text_delta", "text", textPieces(text)
		}
		events = append(events, sse("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": opened}))
		if i == 0 {
			events = append(events, sse("ping", map[string]any{"type": "ping"}))
		}
		for _, p := range pieces {
			ev := sse("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": delta, field: p}})
			if p != "" {
				ev = deltaOf(ev)
			}
			events = append(events, ev)
		}
		events = append(events, sse("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}))
	}
	events = append(events,
		sse("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": v["stop_reason"], "stop_sequence": v["stop_sequence"]},
			"usage": map[string]any{"output_tokens": usage["output_tokens"]}}),
		sse("message_stop", map[string]any{"type": "message_stop"}))
	return &streamed{contentType: "text/event-stream; charset=utf-8", events: events,
		fail: sse("error", map[string]any{"type": "error", "error": map[string]any{"type": "overloaded_error", "message": "Overloaded"}})}
}
