// Package tokencount measures a certification's requests the way each
// provider counts them: OpenAI-compatible models with their tiktoken
// encoding (offline, from the encodings embedded by tiktoken-go-loader),
// Anthropic with POST /v1/messages/count_tokens, Bedrock with the Bedrock
// Runtime CountTokens API (or a plainly reported estimate for models it does
// not support), webhooks by the bytes of their request against the limit
// they declare. Every count is of the request the adapter's own Prepare
// builds.
//
// It is used where certification runs (the onejob contract CLI) and must
// link into no function: internal/deploy's guard test forbids it and the
// tokenizer module in ./functions/....
package tokencount

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/anthropic"
	"github.com/onejob/onejob/internal/provider/bedrock"
	"github.com/onejob/onejob/internal/provider/openai"
	"github.com/onejob/onejob/internal/provider/webhook"
)

// tiktoken-go loads encodings through a process-wide loader that downloads
// them by default; the offline loader reads the copies embedded in
// tiktoken-go-loader, so nothing is fetched at run time. Set once, before
// any encoding is asked for.
func init() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) }

// encodings builds each encoding once (parsing its ranks takes a while);
// the map itself is never written.
var encodings = map[string]func() (*tiktoken.Tiktoken, error){
	"o200k_base":  sync.OnceValues(func() (*tiktoken.Tiktoken, error) { return tiktoken.GetEncoding("o200k_base") }),
	"cl100k_base": sync.OnceValues(func() (*tiktoken.Tiktoken, error) { return tiktoken.GetEncoding("cl100k_base") }),
}

// Encoding returns the named tiktoken encoding (o200k_base, cl100k_base).
func Encoding(name string) (*tiktoken.Tiktoken, error) {
	get, ok := encodings[name]
	if !ok {
		return nil, fmt.Errorf("tokencount: unknown encoding %q (want %s)", name, strings.Join(provider.Encodings, " or "))
	}
	return get()
}

// modelEncodings maps OpenAI model name prefixes to their encoding, as
// tiktoken's own model table does; the first match wins.
var modelEncodings = []struct{ prefix, encoding string }{
	{"gpt-4o", "o200k_base"}, {"chatgpt-4o", "o200k_base"}, {"gpt-4.1", "o200k_base"}, {"gpt-4.5", "o200k_base"},
	{"gpt-5", "o200k_base"}, {"o1", "o200k_base"}, {"o3", "o200k_base"}, {"o4", "o200k_base"},
	{"gpt-4", "cl100k_base"}, {"gpt-3.5-turbo", "cl100k_base"}, {"gpt-35-turbo", "cl100k_base"},
}

// EncodingForModel names the encoding of an OpenAI model; ok is false for
// a model it does not know (a vLLM or Ollama model: set encoding in the
// provider configuration, knowing it is then an approximation of that
// model's own tokenizer).
func EncodingForModel(model string) (string, bool) {
	for _, m := range modelEncodings {
		if model == m.prefix || strings.HasPrefix(model, m.prefix+"-") {
			return m.encoding, true
		}
	}
	return "", false
}

// ChatMessage is one message of a chat request.
type ChatMessage struct{ Role, Name, Content string }

// ChatTokens counts the prompt tokens of chat messages by the format OpenAI
// publishes for its chat models ("How to count tokens with tiktoken", the
// OpenAI Cookbook): 3 tokens a message, 1 more for a name, 3 to prime the
// reply.
func ChatTokens(enc *tiktoken.Tiktoken, messages []ChatMessage) int {
	n := 3
	for _, m := range messages {
		n += 3 + len(enc.EncodeOrdinary(m.Role)) + len(enc.EncodeOrdinary(m.Content))
		if m.Name != "" {
			n += 1 + len(enc.EncodeOrdinary(m.Name))
		}
	}
	return n
}

// Options are what budgets need beyond the adapter.
type Options struct {
	// AWSCredentials sign Bedrock CountTokens calls.
	AWSCredentials aws.CredentialsProvider
	HTTPClient     *http.Client
}

// ErrNoCounter: the provider is of no kind this package counts for.
var ErrNoCounter = errors.New("tokencount: no token counter for this provider")

// For returns the budget of p, an adapter built from pc (by
// internal/provider/adapters), with the limits pc declares.
func For(pc provider.ProviderConfig, p provider.Provider, opts Options) (jobtype.Budget, error) {
	limits := jobtype.Limits{ContextWindow: pc.ContextWindow, MaxOutputTokens: pc.MaxOutputTokens, MaxRequestBytes: pc.MaxRequestBytes}
	if l, ok := p.(*openai.Lookup); ok {
		p = l.Adapter // a provider with lookup sends the same messages
	}
	switch a := p.(type) {
	case *openai.Adapter:
		name := pc.Encoding
		if name == "" {
			var ok bool
			if name, ok = EncodingForModel(a.Model()); !ok {
				return nil, fmt.Errorf("%s: no tiktoken encoding is known for model %q; set \"encoding\" (%s) in the provider configuration",
					p.Name(), a.Model(), strings.Join(provider.Encodings, " or "))
			}
		}
		enc, err := Encoding(name)
		if err != nil {
			return nil, err
		}
		return openAIBudget{a: a, enc: enc, name: name, limits: limits}, nil
	case *anthropic.Adapter:
		return anthropicBudget{a: a, limits: limits}, nil
	case *bedrock.Adapter:
		if opts.AWSCredentials == nil {
			return nil, fmt.Errorf("%s: counting Bedrock tokens needs AWS credentials", p.Name())
		}
		client, err := bedrock.NewClient(bedrock.ClientConfig{Region: pc.Region, BaseEndpoint: pc.BaseURL, Credentials: opts.AWSCredentials, HTTPClient: opts.HTTPClient})
		if err != nil {
			return nil, err
		}
		return bedrockBudget{a: a, client: client, limits: limits}, nil
	case *webhook.Adapter:
		return webhookBudget{a: a, limits: limits}, nil
	}
	return nil, fmt.Errorf("%w: %s is a %T", ErrNoCounter, p.Name(), p)
}

type openAIBudget struct {
	a      *openai.Adapter
	enc    *tiktoken.Tiktoken
	name   string
	limits jobtype.Limits
}

func (b openAIBudget) Limits() jobtype.Limits { return b.limits }

func (b openAIBudget) Measure(_ context.Context, req provider.Request) (jobtype.Measure, error) {
	prep, err := b.a.Prepare(req)
	if err != nil {
		return jobtype.Measure{}, err
	}
	body := prep.Body.(*openai.ChatRequest)
	msgs := make([]ChatMessage, len(body.Messages))
	for i, m := range body.Messages {
		msgs[i] = ChatMessage{Role: m.Role, Content: m.Content}
	}
	n := ChatTokens(b.enc, msgs)
	// OpenAI publishes no formula for what a response_format schema adds;
	// its name and compact JSON text are counted.
	js := body.ResponseFormat.JSONSchema
	schema, _ := compact(js.Schema)
	n += len(b.enc.EncodeOrdinary(js.Name)) + len(b.enc.EncodeOrdinary(schema))
	return jobtype.Measure{Input: n, Unit: jobtype.UnitTokens,
		Method: "tiktoken " + b.name + " (messages in OpenAI's published chat format; response_format schema as its JSON text)"}, nil
}

type anthropicBudget struct {
	a      *anthropic.Adapter
	limits jobtype.Limits
}

func (b anthropicBudget) Limits() jobtype.Limits { return b.limits }

func (b anthropicBudget) Measure(ctx context.Context, req provider.Request) (jobtype.Measure, error) {
	n, err := b.a.CountTokens(ctx, req)
	if err != nil {
		return jobtype.Measure{}, err
	}
	return jobtype.Measure{Input: n, Unit: jobtype.UnitTokens, Method: "Anthropic count_tokens (POST /v1/messages/count_tokens)"}, nil
}

// CountTokensAPI is the part of *bedrockruntime.Client a Bedrock budget uses.
type CountTokensAPI interface {
	CountTokens(ctx context.Context, in *bedrockruntime.CountTokensInput, optFns ...func(*bedrockruntime.Options)) (*bedrockruntime.CountTokensOutput, error)
}

type bedrockBudget struct {
	a      *bedrock.Adapter
	client CountTokensAPI
	limits jobtype.Limits
}

func (b bedrockBudget) Limits() jobtype.Limits { return b.limits }

// estimateBytesPerToken is the estimate's rate: fewer bytes a token than
// English text averages (about four), so the estimate errs on the large side.
const estimateBytesPerToken = 3

func (b bedrockBudget) Measure(ctx context.Context, req provider.Request) (jobtype.Measure, error) {
	prep, err := b.a.Prepare(req)
	if err != nil {
		return jobtype.Measure{}, err
	}
	in := prep.Body.(*bedrockruntime.ConverseInput)
	out, err := b.client.CountTokens(ctx, &bedrockruntime.CountTokensInput{
		ModelId: in.ModelId,
		Input: &types.CountTokensInputMemberConverse{Value: types.ConverseTokensRequest{
			Messages: in.Messages, System: in.System, ToolConfig: in.ToolConfig,
		}},
	})
	if err == nil {
		return jobtype.Measure{Input: int(aws.ToInt32(out.InputTokens)), Unit: jobtype.UnitTokens, Method: "Bedrock CountTokens"}, nil
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ValidationException" || !strings.Contains(strings.ToLower(ae.ErrorMessage()), "count") {
		return jobtype.Measure{}, err
	}
	// The model does not support CountTokens: estimate, and say so.
	n := (converseBytes(in) + estimateBytesPerToken - 1) / estimateBytesPerToken
	return jobtype.Measure{Input: n, Unit: jobtype.UnitTokens, Estimate: true, Method: fmt.Sprintf(
		"estimate, CountTokens does not support %s: 1 token per %d UTF-8 bytes of the system prompt, messages and tool definition",
		aws.ToString(in.ModelId), estimateBytesPerToken)}, nil
}

// converseBytes is the UTF-8 size of the text a Converse input carries.
func converseBytes(in *bedrockruntime.ConverseInput) int {
	n := 0
	for _, s := range in.System {
		if t, ok := s.(*types.SystemContentBlockMemberText); ok {
			n += len(t.Value)
		}
	}
	for _, m := range in.Messages {
		for _, c := range m.Content {
			if t, ok := c.(*types.ContentBlockMemberText); ok {
				n += len(t.Value)
			}
		}
	}
	if in.ToolConfig != nil {
		for _, t := range in.ToolConfig.Tools {
			spec, ok := t.(*types.ToolMemberToolSpec)
			if !ok {
				continue
			}
			n += len(aws.ToString(spec.Value.Name)) + len(aws.ToString(spec.Value.Description))
			if js, ok := spec.Value.InputSchema.(*types.ToolInputSchemaMemberJson); ok {
				if raw, err := js.Value.MarshalSmithyDocument(); err == nil {
					n += len(raw)
				}
			}
		}
	}
	return n
}

type webhookBudget struct {
	a      *webhook.Adapter
	limits jobtype.Limits
}

func (b webhookBudget) Limits() jobtype.Limits { return b.limits }

func (b webhookBudget) Measure(_ context.Context, req provider.Request) (jobtype.Measure, error) {
	prep, err := b.a.Prepare(req)
	if err != nil {
		return jobtype.Measure{}, err
	}
	raw, err := json.Marshal(prep.Body)
	if err != nil {
		return jobtype.Measure{}, err
	}
	return jobtype.Measure{Input: len(raw), Unit: jobtype.UnitBytes,
		Method: "the request body's UTF-8 bytes (a webhook has no tokenizer; its limit is its own declaration)"}, nil
}

// compact is the schema as sent, without insignificant space.
func compact(raw json.RawMessage) (string, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw), err
	}
	return b.String(), nil
}
