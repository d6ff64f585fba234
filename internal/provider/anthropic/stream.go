package anthropic

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/onejob/onejob/internal/provider"
)

// Streaming Messages (the streaming guide): the request Call sends with
// "stream": true, answered by named server-sent events: message_start
// (the message, its content empty, its usage so far: the input), per
// content block content_block_start, its deltas and content_block_stop,
// then message_delta (the stop_reason; usage whose output_tokens is the
// total so far, and on newer models the input counts too) and
// message_stop; ping anywhere; an error event when the API fails after
// the stream started. The forced tool call's input arrives as
// input_json_delta partial_json: those pieces are the sink's. The events
// gathered are the message Call reads whole, classified by the same code
// (answer). A stream that stops before message_stop is cut: ambiguous.

// streamRequest is the body Stream sends: Prepare's, with stream.
type streamRequest struct {
	*MessagesRequest
	Stream bool `json:"stream"`
}

// event is one streamed event, the members onejob reads.
type event struct {
	Type         string            `json:"type"`
	Message      *messagesResponse `json:"message"`
	Index        int               `json:"index"`
	ContentBlock *contentBlock     `json:"content_block"`
	Delta        *struct {
		Type        string  `json:"type"`
		Text        string  `json:"text"`
		PartialJSON string  `json:"partial_json"`
		StopReason  *string `json:"stop_reason"`
	} `json:"delta"`
	Usage *struct {
		InputTokens              *int `json:"input_tokens"`
		OutputTokens             *int `json:"output_tokens"`
		CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	} `json:"usage"`
	Error *provider.APIError `json:"error"`
}

// errorStatus is the HTTP status the API documents for each error type
// (the errors guide): what an error event inside a stream stands for.
var errorStatus = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"billing_error":         http.StatusPaymentRequired,
	"permission_error":      http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"timeout_error":         http.StatusGatewayTimeout,
	"overloaded_error":      529,
}

// Stream implements provider.Streamer.
func (a *Adapter) Stream(ctx context.Context, req provider.Request, sink provider.Sink) (resp provider.Response, err error) {
	start := a.Clock()()
	defer func() { provider.LogCall(ctx, a.Logger(), a.cfg.Name, req, a.Clock()().Sub(start), resp, err) }()
	prep, err := a.Prepare(req)
	if err != nil {
		return provider.Response{}, err
	}
	body := prep.Body.(*MessagesRequest)
	toolName := body.ToolChoice.Name
	header := a.header()
	header.Set("Idempotency-Key", req.IdempotencyKey)
	sresp, err := a.Client().PostStream(ctx, strings.TrimRight(a.cfg.BaseURL, "/")+"/v1/messages", header,
		streamRequest{MessagesRequest: body, Stream: true}, provider.StreamAccept)
	if err != nil {
		return provider.Response{}, billing(err)
	}
	defer sresp.Body.Close()
	if !sresp.EventStream() {
		// Answered whole: Call's answer, in one piece.
		hresp, err := a.Client().ReadWhole(sresp)
		if err != nil {
			return provider.Response{}, err
		}
		m, err := a.decode(hresp)
		if err != nil {
			return provider.Response{}, err
		}
		for _, b := range m.Content {
			if b.Type == "tool_use" && b.Name == toolName && len(b.Input) > 0 {
				sink(string(b.Input))
				break
			}
		}
		return a.answer(hresp, m, toolName)
	}
	m, err := a.gather(sresp, toolName, sink)
	if err != nil {
		return provider.Response{}, err
	}
	return a.answer(sresp.At(), m, toolName)
}

// gather reads the events to message_stop into the message they make,
// handing each piece of the forced tool's input to sink.
func (a *Adapter) gather(sresp provider.StreamResponse, toolName string, sink provider.Sink) (messagesResponse, error) {
	at := sresp.At()
	events := a.Client().Events(sresp)
	var m messagesResponse
	var blocks []*contentBlock
	var inputs []*strings.Builder
	for {
		ev, err := events.Next()
		if err != nil {
			return messagesResponse{}, a.Client().StreamFailure(at, err).Billed(m.Usage.usage())
		}
		var e event
		if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
			return messagesResponse{}, a.Client().Cut(at, "malformed event: "+provider.Excerpt(ev.Data), err).Billed(m.Usage.usage())
		}
		malformed := func(why string) error {
			return a.Client().Cut(at, "malformed "+e.Type+" event: "+why, provider.ErrMalformedResponse).Billed(m.Usage.usage())
		}
		switch e.Type {
		case "message_start":
			if e.Message == nil {
				return messagesResponse{}, malformed("no message")
			}
			m.ID, m.Model, m.Usage = e.Message.ID, e.Message.Model, e.Message.Usage
		case "content_block_start":
			if e.ContentBlock == nil || e.Index != len(blocks) {
				return messagesResponse{}, malformed("not the next block")
			}
			b := *e.ContentBlock
			blocks, inputs = append(blocks, &b), append(inputs, &strings.Builder{})
		case "content_block_delta":
			if e.Delta == nil || e.Index < 0 || e.Index >= len(blocks) {
				return messagesResponse{}, malformed("no block started at its index")
			}
			b := blocks[e.Index]
			switch e.Delta.Type {
			case "input_json_delta":
				inputs[e.Index].WriteString(e.Delta.PartialJSON)
				if b.Type == "tool_use" && b.Name == toolName && e.Delta.PartialJSON != "" {
					sink(e.Delta.PartialJSON)
				}
			case "text_delta":
				b.Text += e.Delta.Text
			}
		case "message_delta":
			if e.Delta != nil && e.Delta.StopReason != nil {
				m.StopReason = *e.Delta.StopReason
			}
			if u := e.Usage; u != nil {
				// Cumulative: each count is the total so far.
				if m.Usage == nil {
					m.Usage = &messageUsage{}
				}
				for _, f := range []struct {
					from *int
					to   *int
				}{{u.InputTokens, &m.Usage.InputTokens}, {u.OutputTokens, &m.Usage.OutputTokens},
					{u.CacheCreationInputTokens, &m.Usage.CacheCreationInputTokens}, {u.CacheReadInputTokens, &m.Usage.CacheReadInputTokens}} {
					if f.from != nil {
						*f.to = *f.from
					}
				}
			}
		case "message_stop":
			for i, b := range blocks {
				// A tool call's input is its pieces joined, or, when none
				// came, the input its start gave ({}).
				if inputs[i].Len() > 0 {
					b.Input = json.RawMessage(inputs[i].String())
				}
				m.Content = append(m.Content, *b)
			}
			return m, nil
		case "error":
			data := []byte(ev.Data)
			status := http.StatusInternalServerError
			if e.Error != nil {
				if s, ok := errorStatus[e.Error.Type]; ok {
					status = s
				}
			}
			return messagesResponse{}, a.Client().StreamError(at, status, data).Billed(m.Usage.usage())
		}
	}
}
