package openai

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/onejob/onejob/internal/provider"
)

// Streaming Chat Completions (the API reference's
// CreateChatCompletionRequest.stream and stream_options,
// CreateChatCompletionStreamResponse): the request Call sends with
// "stream": true and stream_options.include_usage, answered by
// "data:"-only server-sent events, each a chat.completion.chunk whose
// choices[0].delta carries the next piece of the content (or of the
// refusal) and, on the last choice chunk, the finish_reason; with
// include_usage, one chunk more, choices empty, carries the usage; then
// "data: [DONE]". The chunks gathered are the completion Call reads
// whole, classified by the same code (complete, answer). A stream that
// stops before [DONE] is cut: ambiguous.

// streamRequest is the body Stream sends: Prepare's, with the stream flags.
type streamRequest struct {
	*ChatRequest
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chunk is a chat.completion.chunk, the members onejob reads.
type chunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content *string `json:"content"`
			Refusal *string `json:"refusal"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *counts `json:"usage"`
	// Error is an error the API sends inside a stream that had started
	// (the official SDKs raise it as an API error).
	Error json.RawMessage `json:"error"`
}

// Stream implements provider.Streamer.
func (a *Adapter) Stream(ctx context.Context, req provider.Request, sink provider.Sink) (resp provider.Response, err error) {
	start := a.Clock()()
	defer func() { provider.LogCall(ctx, a.Logger(), a.cfg.Name, req, a.Clock()().Sub(start), resp, err) }()
	prep, err := a.Prepare(req)
	if err != nil {
		return provider.Response{}, err
	}
	header := a.header()
	header.Set("Idempotency-Key", req.IdempotencyKey)
	body := streamRequest{ChatRequest: prep.Body.(*ChatRequest), Stream: true, StreamOptions: streamOptions{IncludeUsage: true}}
	sresp, err := a.Client().PostStream(ctx, a.url(), header, body, provider.StreamAccept)
	if err != nil {
		return provider.Response{}, exhausted(err)
	}
	defer sresp.Body.Close()
	if !sresp.EventStream() {
		// A compatible server that answered whole: Call's answer, in one piece.
		hresp, err := a.Client().ReadWhole(sresp)
		if err != nil {
			return provider.Response{}, err
		}
		c, err := a.decode(hresp)
		if err != nil {
			return provider.Response{}, err
		}
		if len(c.Choices) > 0 && c.Choices[0].Message.Content != nil && *c.Choices[0].Message.Content != "" {
			sink(*c.Choices[0].Message.Content)
		}
		return a.complete(req, hresp, c)
	}
	c, err := a.gather(sresp, sink)
	if err != nil {
		return provider.Response{}, err
	}
	return a.complete(req, sresp.At(), c)
}

// gather reads the chunks to [DONE] into the completion they make,
// handing each piece of content to sink.
func (a *Adapter) gather(sresp provider.StreamResponse, sink provider.Sink) (completion, error) {
	at := sresp.At()
	events := a.Client().Events(sresp)
	var c completion
	var content, refusal strings.Builder
	var sawContent, sawRefusal bool
	finish := ""
	for {
		ev, err := events.Next()
		if err != nil {
			return completion{}, a.Client().StreamFailure(at, err).Billed(usageOf(c.Usage))
		}
		if ev.Data == "[DONE]" {
			break
		}
		var ch chunk
		if err := json.Unmarshal([]byte(ev.Data), &ch); err != nil {
			return completion{}, a.Client().Cut(at, "malformed chunk: "+provider.Excerpt(ev.Data), err).Billed(usageOf(c.Usage))
		}
		if len(ch.Error) > 0 && string(ch.Error) != "null" {
			return completion{}, exhausted(a.Client().StreamError(at, streamErrorStatus(ev.Data), []byte(ev.Data)).Billed(usageOf(c.Usage)))
		}
		if c.ID == "" {
			c.ID = ch.ID
		}
		if c.Model == "" {
			c.Model = ch.Model
		}
		for _, choice := range ch.Choices {
			if choice.Index != 0 {
				continue
			}
			if d := choice.Delta.Content; d != nil {
				sawContent = true
				content.WriteString(*d)
				if *d != "" {
					sink(*d)
				}
			}
			if d := choice.Delta.Refusal; d != nil {
				sawRefusal = true
				refusal.WriteString(*d)
			}
			if choice.FinishReason != nil && *choice.FinishReason != "" {
				finish = *choice.FinishReason
			}
		}
		if ch.Usage != nil {
			c.Usage = ch.Usage
		}
	}
	var whole choice
	whole.FinishReason = finish
	if sawContent {
		s := content.String()
		whole.Message.Content = &s
	}
	if sawRefusal {
		s := refusal.String()
		whole.Message.Refusal = &s
	}
	if sawContent || sawRefusal || finish != "" {
		c.Choices = []choice{whole}
	}
	return c, nil
}

// streamErrorStatus is the status an error sent inside a stream stands
// for: the one the API answers the same error with (a rate limit 429, an
// invalid request 400, a spent quota 429), else 500, the API's own
// failure.
func streamErrorStatus(body string) int {
	e, _ := provider.ParseAPIError([]byte(body))
	switch {
	case e.Code == "insufficient_quota" || e.Type == "insufficient_quota",
		e.Code == "rate_limit_exceeded", e.Type == "requests", e.Type == "tokens":
		return http.StatusTooManyRequests
	case e.Type == "invalid_request_error":
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func usageOf(c *counts) *provider.Usage {
	if c == nil {
		return nil
	}
	return &provider.Usage{InputTokens: c.PromptTokens, OutputTokens: c.CompletionTokens}
}
