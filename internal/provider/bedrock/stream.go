package bedrock

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/onejob/onejob/internal/provider"
)

// ConverseStream (the Bedrock Runtime API reference): Converse's input,
// answered as AWS's binary event stream, which the SDK decodes into
// messageStart, contentBlockStart (a tool use's name), contentBlockDelta
// (a tool use's input as pieces of JSON text), contentBlockStop,
// messageStop (the stopReason) and metadata (the usage). The forced
// tool's input pieces are the sink's; the events gathered are the answer
// Call reads whole, classified by the same code (answer). A stream that
// ends before messageStop and metadata is cut: ambiguous; an exception
// inside it (modelStreamErrorException, throttlingException, …) is
// classified as the same exception answered whole.

// ConverseStreamAPI is the part of *bedrockruntime.Client Stream uses.
type ConverseStreamAPI interface {
	ConverseStream(ctx context.Context, in *bedrockruntime.ConverseStreamInput, optFns ...func(*bedrockruntime.Options)) (*bedrockruntime.ConverseStreamOutput, error)
}

// exceptionStatus is the HTTP status the reference gives each exception a
// stream may carry (ConverseStreamOutput).
var exceptionStatus = map[string]int{
	"InternalServerException":     http.StatusInternalServerError,
	"ModelStreamErrorException":   http.StatusFailedDependency,
	"ValidationException":         http.StatusBadRequest,
	"ThrottlingException":         http.StatusTooManyRequests,
	"ServiceUnavailableException": http.StatusServiceUnavailable,
}

// Stream implements provider.Streamer. A client that cannot stream (a
// test's Converse-only fake) is called as Call calls it, its answer
// handed to sink whole.
func (a *Adapter) Stream(ctx context.Context, req provider.Request, sink provider.Sink) (resp provider.Response, err error) {
	streamer, ok := a.cfg.Client.(ConverseStreamAPI)
	if !ok {
		resp, err = a.Call(ctx, req)
		if err == nil {
			sink(string(resp.Output))
		}
		return resp, err
	}
	start := a.now()
	defer func() { provider.LogCall(ctx, a.log, a.cfg.Name, req, a.now().Sub(start), resp, err) }()
	prep, err := a.Prepare(req)
	if err != nil {
		return provider.Response{}, err
	}
	in := prep.Body.(*bedrockruntime.ConverseInput)
	toolName := aws.ToString(in.ToolConfig.ToolChoice.(*types.ToolChoiceMemberTool).Value.Name)

	ctx, sent := provider.TrackSent(ctx)
	// Bounded as the JSON adapters bound a stream: the whole, and a
	// quarter of it an event-stream message.
	limit := a.cfg.MaxStreamBytes
	if limit <= 0 {
		limit = provider.DefaultMaxResponseBytes
	}
	body := &boundedBody{max: limit, maxEvent: limit / 4}
	out, err := streamer.ConverseStream(ctx, streamInput(in), func(o *bedrockruntime.Options) {
		o.APIOptions = append(o.APIOptions, body.install)
	})
	if err != nil {
		return provider.Response{}, a.classify(err, sent())
	}
	requestID, _ := awsmiddleware.GetRequestIDMetadata(out.ResultMetadata)
	stream := out.GetStream()
	defer stream.Close()
	ans, err := a.gather(stream, requestID, toolName, sink)
	if err != nil {
		if tooLarge := body.exceeded(); tooLarge != nil {
			return provider.Response{}, a.fail(provider.ClassRetryable, http.StatusOK, requestID, tooLarge.Error(),
				fmt.Errorf("%w: %w", provider.ErrMalformedResponse, tooLarge))
		}
		if body.whole() {
			// A 200 that is no event stream: a body the SDK cannot
			// decode, as Call's malformed answer.
			return provider.Response{}, a.fail(provider.ClassRetryable, http.StatusOK, requestID, "malformed converse response",
				fmt.Errorf("%w: %w", provider.ErrMalformedResponse, stream.Err()))
		}
		return provider.Response{}, err
	}
	return a.answer(ans, toolName)
}

// gather reads the events to the stream's end into the answer they make,
// handing each piece of the forced tool's input to sink.
func (a *Adapter) gather(stream *bedrockruntime.ConverseStreamEventStream, requestID, toolName string, sink provider.Sink) (converseAnswer, error) {
	ans := converseAnswer{requestID: requestID}
	var inputs []*strings.Builder
	stopped, metadata := false, false
	block := func(i int32) (*answerBlock, *strings.Builder) {
		for int(i) >= len(ans.blocks) {
			ans.blocks = append(ans.blocks, answerBlock{})
			inputs = append(inputs, &strings.Builder{})
		}
		return &ans.blocks[i], inputs[i]
	}
	for ev := range stream.Events() {
		switch e := ev.(type) {
		case *types.ConverseStreamOutputMemberMessageStart:
			ans.message = true
		case *types.ConverseStreamOutputMemberContentBlockStart:
			if tu, ok := e.Value.Start.(*types.ContentBlockStartMemberToolUse); ok {
				b, _ := block(aws.ToInt32(e.Value.ContentBlockIndex))
				b.tool, b.name = true, aws.ToString(tu.Value.Name)
			}
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			b, input := block(aws.ToInt32(e.Value.ContentBlockIndex))
			switch d := e.Value.Delta.(type) {
			case *types.ContentBlockDeltaMemberToolUse:
				piece := aws.ToString(d.Value.Input)
				input.WriteString(piece)
				if b.tool && b.name == toolName && piece != "" {
					sink(piece)
				}
			case *types.ContentBlockDeltaMemberText:
				b.text += d.Value
			}
		case *types.ConverseStreamOutputMemberMessageStop:
			ans.stopReason, stopped = e.Value.StopReason, true
		case *types.ConverseStreamOutputMemberMetadata:
			ans.usage, metadata = e.Value.Usage, true
		}
	}
	at := provider.HTTPResponse{Status: http.StatusOK, RequestID: requestID}
	if err := stream.Err(); err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) {
			if status, ok := exceptionStatus[ae.ErrorCode()]; ok {
				// The stream's own status: the model ran (StreamError).
				ce := a.fail(classifyCode(ae.ErrorCode(), status), http.StatusOK, requestID, ae.ErrorCode(), fmt.Errorf("%w: %w", provider.ErrHTTPStatus, err))
				ce.Detail = provider.APIError{Type: ae.ErrorCode(), Message: ae.ErrorMessage()}
				return converseAnswer{}, ce.Billed(usageOf(ans.usage))
			}
		}
		return converseAnswer{}, a.cut(at, "read stream", fmt.Errorf("%w: %w", provider.ErrTransport, err)).Billed(usageOf(ans.usage))
	}
	if !stopped || !metadata {
		return converseAnswer{}, a.cut(at, "the stream ended before its messageStop and metadata", nil).Billed(usageOf(ans.usage))
	}
	for i := range ans.blocks {
		if ans.blocks[i].tool && inputs[i].Len() > 0 {
			ans.blocks[i].input = canonical(inputs[i].String())
		}
	}
	return ans, nil
}

func (a *Adapter) cut(at provider.HTTPResponse, msg string, cause error) *provider.CallError {
	c := provider.JSONClient{Provider: a.cfg.Name}
	return c.Cut(at, msg, cause)
}

func usageOf(u *types.TokenUsage) *provider.Usage {
	if u == nil {
		return nil
	}
	return &provider.Usage{InputTokens: int(aws.ToInt32(u.InputTokens)), OutputTokens: int(aws.ToInt32(u.OutputTokens))}
}

// canonical is a tool input's JSON text as Call reads it: the SDK decodes
// Converse's document and the adapter marshals it again
// (MarshalSmithyDocument: encoding/json of the decoded value, numbers
// kept as written), so the streamed pieces are read the same way. Text
// that is no JSON is left as it is (answer refuses it).
func canonical(text string) []byte {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return []byte(text)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return []byte(text)
	}
	return out
}

// streamInput is Converse's input as ConverseStream takes it: the same
// members (ConverseStreamInput has every member of ConverseInput; only
// its guardrail configuration has a type of its own, and the adapter
// sends none).
func streamInput(in *bedrockruntime.ConverseInput) *bedrockruntime.ConverseStreamInput {
	return &bedrockruntime.ConverseStreamInput{
		ModelId:                           in.ModelId,
		AdditionalModelRequestFields:      in.AdditionalModelRequestFields,
		AdditionalModelResponseFieldPaths: in.AdditionalModelResponseFieldPaths,
		InferenceConfig:                   in.InferenceConfig,
		Messages:                          in.Messages,
		OutputConfig:                      in.OutputConfig,
		PerformanceConfig:                 in.PerformanceConfig,
		PromptVariables:                   in.PromptVariables,
		RequestMetadata:                   in.RequestMetadata,
		ServiceTier:                       in.ServiceTier,
		System:                            in.System,
		ToolConfig:                        in.ToolConfig,
	}
}

// boundedBody bounds the answer's body the SDK decodes: its bytes in all,
// and each event-stream message by the total length its prelude declares
// (a message's first 4 bytes, big-endian).
type boundedBody struct {
	io.ReadCloser
	max, maxEvent int64

	mu sync.Mutex
	// events: the answer is an event stream, whose messages are bounded;
	// notStream: a 200 that is not one.
	events, notStream bool
	read              int64
	prelude           [4]byte
	have              int
	left              int64
	err               error
}

// install wraps the HTTP answer's body before the SDK's deserializers
// see it (a deserialize middleware last in the step: the first to see
// the raw response).
func (b *boundedBody) install(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("OnejobBoundedBody",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleDeserialize(ctx, in)
			if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && resp.Body != nil {
				b.mu.Lock()
				b.ReadCloser = resp.Body
				ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
				b.events = resp.StatusCode == http.StatusOK && strings.TrimSpace(ct) == "application/vnd.amazon.eventstream"
				b.notStream = resp.StatusCode == http.StatusOK && !b.events
				b.mu.Unlock()
				resp.Body = b
			}
			return out, md, err
		}), middleware.After)
}

func (b *boundedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if b.read > b.max {
		b.err = fmt.Errorf("%w: more than %d bytes", provider.ErrStreamTooLarge, b.max)
		return 0, b.err
	}
	for rest := p[:n]; b.events && len(rest) > 0; {
		if b.have < len(b.prelude) {
			k := copy(b.prelude[b.have:], rest)
			b.have, rest = b.have+k, rest[k:]
			if b.have == len(b.prelude) {
				total := int64(binary.BigEndian.Uint32(b.prelude[:]))
				if total > b.maxEvent {
					b.err = fmt.Errorf("%w: a message of %d bytes, more than %d", provider.ErrEventTooLarge, total, b.maxEvent)
					return 0, b.err
				}
				b.left = total - int64(len(b.prelude))
			}
			continue
		}
		k := min(b.left, int64(len(rest)))
		b.left, rest = b.left-k, rest[k:]
		if b.left <= 0 {
			b.have = 0
		}
	}
	return n, err
}

// exceeded is the bound the body broke, if any.
func (b *boundedBody) exceeded() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if errors.Is(b.err, provider.ErrStreamTooLarge) || errors.Is(b.err, provider.ErrEventTooLarge) {
		return b.err
	}
	return nil
}

// whole reports a 200 answer that was no event stream.
func (b *boundedBody) whole() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.notStream
}
