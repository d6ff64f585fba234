package sim

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/aws/smithy-go/eventstream"
)

// ConverseStream, as the Bedrock Runtime API reference describes it
// (ConverseStream, ConverseStreamOutput and its events): POST
// /model/{modelId}/converse-stream with Converse's members, answered as
// application/vnd.amazon.eventstream, AWS's binary event-stream framing
// (each message its prelude, headers and JSON payload, with CRC32
// checksums), one message per event, named by its :event-type header:
// messageStart {role}, per content block contentBlockStart (a tool use's
// toolUseId and name), contentBlockDelta (text, or a tool use's input as
// a string of JSON pieces) and contentBlockStop, then messageStop
// {stopReason} and metadata {usage, metrics}. Each payload carries a
// member p of padding, as the service pads its events so that their
// sizes do not reveal the tokens. An error after the stream started is
// a message of :message-type exception naming it (:exception-type
// modelStreamErrorException, throttlingException, …), {"message"}.

// bedrockStream cuts a Converse answer into ConverseStream's messages.
func bedrockStream(c Call, a answer) *streamed {
	v, ok := jsonAnswer(a)
	if !ok {
		return nil
	}
	out, _ := v["output"].(map[string]any)
	msg, _ := out["message"].(map[string]any)
	if msg == nil {
		return nil
	}
	events := []streamEvent{bedrockEvent("messageStart", map[string]any{"role": msg["role"]})}
	blocks, _ := msg["content"].([]any)
	for i, b := range blocks {
		block, _ := b.(map[string]any)
		var pieces []string
		kind := "text"
		if tu, ok := block["toolUse"].(map[string]any); ok {
			kind = "toolUse"
			events = append(events, bedrockEvent("contentBlockStart", map[string]any{"contentBlockIndex": i,
				"start": map[string]any{"toolUse": map[string]any{"toolUseId": tu["toolUseId"], "name": tu["name"]}}}))
			input, _ := json.Marshal(tu["input"])
			pieces = textPieces(string(input))
		} else {
			text, _ := block["text"].(string)
			pieces = textPieces(text)
		}
		for _, p := range pieces {
			delta := map[string]any{"text": p}
			if kind == "toolUse" {
				delta = map[string]any{"toolUse": map[string]any{"input": p}}
			}
			events = append(events, deltaOf(bedrockEvent("contentBlockDelta", map[string]any{"contentBlockIndex": i, "delta": delta})))
		}
		events = append(events, bedrockEvent("contentBlockStop", map[string]any{"contentBlockIndex": i}))
	}
	events = append(events,
		bedrockEvent("messageStop", map[string]any{"stopReason": v["stopReason"]}),
		bedrockEvent("metadata", map[string]any{"usage": v["usage"], "metrics": v["metrics"]}))
	return &streamed{contentType: "application/vnd.amazon.eventstream", events: events,
		fail: bedrockMessage(eventstream.Headers{
			{Name: eventstream.MessageTypeHeader, Value: eventstream.StringValue(eventstream.ExceptionMessageType)},
			{Name: eventstream.ExceptionTypeHeader, Value: eventstream.StringValue("modelStreamErrorException")},
			{Name: eventstream.ContentTypeHeader, Value: eventstream.StringValue("application/json")},
		}, map[string]any{"message": "An error occurred while streaming the response. Retry your request.", "originalStatusCode": 500})}
}

// bedrockEvent is one event message, its payload padded.
func bedrockEvent(typ string, payload map[string]any) streamEvent {
	payload["p"] = strings.Repeat("abcdefghijklmnopqrstuvwxyz", 2)[:len(typ)%26+4]
	return bedrockMessage(eventstream.Headers{
		{Name: eventstream.EventTypeHeader, Value: eventstream.StringValue(typ)},
		{Name: eventstream.ContentTypeHeader, Value: eventstream.StringValue("application/json")},
		{Name: eventstream.MessageTypeHeader, Value: eventstream.StringValue(eventstream.EventMessageType)},
	}, payload)
}

// bedrockMessage encodes one message; its garbled form fails the
// message's checksum.
func bedrockMessage(h eventstream.Headers, payload map[string]any) streamEvent {
	raw, _ := json.Marshal(payload)
	var b bytes.Buffer
	_ = eventstream.NewEncoder().Encode(&b, eventstream.Message{Headers: h, Payload: raw})
	data := b.Bytes()
	bad := bytes.Clone(data)
	bad[len(bad)-1] ^= 0xff
	return streamEvent{data: data, bad: bad}
}
