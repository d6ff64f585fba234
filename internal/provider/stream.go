package provider

import "context"

// Streamer is implemented by adapters that can read a provider's answer as
// it forms (OpenAI and Anthropic server-sent events, Bedrock's
// ConverseStream, a webhook receiver's text/event-stream answer). Stream
// is Call, whose answer arrives in pieces: it sends the same request, with
// the same identity and rules, hands each piece of the output text to
// sink as it arrives, in order, on the calling goroutine, and returns the
// whole answer exactly as Call would (the same Response, the same
// CallError classes: a stream cut before its end is ambiguous, as any
// answer lost after sending). An answer replayed whole (a receiver's
// Idempotent-Replayed) reaches sink as one piece.
type Streamer interface {
	Stream(ctx context.Context, req Request, sink Sink) (Response, error)
}

// Sink takes the next piece of an answer's output text: the provider's
// own fragments of the JSON it is writing (a structured answer is JSON
// text), never re-cut. It must not block for long: the provider's stream
// waits on it.
type Sink func(text string)
