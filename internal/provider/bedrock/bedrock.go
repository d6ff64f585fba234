// Package bedrock adapts Amazon Bedrock's Converse API to provider.Provider.
// Structured output is obtained by forcing a single tool whose inputSchema is
// the job type's output schema; the toolUse input is the output.
//
// The adapter is no provider.Settler: Converse takes no idempotency token
// (ConverseRequest has no clientRequestToken member) and there is no way to
// look a Converse request up afterwards; requestMetadata only reaches the
// invocation logs. Bedrock's tokens (StartAsyncInvoke,
// CreateModelInvocationJob) belong to other APIs, and StartAsyncInvoke is for
// Nova Reel video only (../shared/notes/provider-reconciliation.md, §1
// "Amazon Bedrock" and §2). An unknown attempt on a Bedrock provider waits
// for its job type's deadline rule or an operator.
package bedrock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/onejob/onejob/internal/provider"
)

// ErrInvalidConfig is wrapped by validation errors of New and NewClient.
var ErrInvalidConfig = errors.New("invalid bedrock config")

// ConverseAPI is the part of *bedrockruntime.Client the adapter uses.
type ConverseAPI interface {
	Converse(ctx context.Context, in *bedrockruntime.ConverseInput, optFns ...func(*bedrockruntime.Options)) (*bedrockruntime.ConverseOutput, error)
}

// ClientConfig builds a Converse client without config.LoadDefaultConfig, so
// a custom HTTP client works even where AWS_CA_BUNDLE is set.
type ClientConfig struct {
	Region string
	// BaseEndpoint overrides the regional endpoint (VPC endpoint, simulator).
	BaseEndpoint string
	Credentials  aws.CredentialsProvider
	HTTPClient   *http.Client
	// APIOptions are added to the client's middleware stack (the local
	// stack records the run function's AWS calls with one).
	APIOptions []func(*middleware.Stack) error
}

// NewClient returns a Converse client that makes exactly one HTTP attempt:
// retries, failover and back-off are decided by job.Next, and an SDK
// retry would hide ambiguity (a timed-out attempt silently resent).
func NewClient(cfg ClientConfig) (*bedrockruntime.Client, error) {
	var problems []string
	if cfg.Region == "" {
		problems = append(problems, "region is required")
	}
	if cfg.Credentials == nil {
		problems = append(problems, "credentials are required")
	}
	if cfg.BaseEndpoint != "" {
		if err := provider.ValidateBaseURL(cfg.BaseEndpoint); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	opts := bedrockruntime.Options{
		Region:      cfg.Region,
		Credentials: cfg.Credentials,
		Retryer:     retry.AddWithMaxAttempts(retry.NewStandard(), 1),
	}
	if cfg.BaseEndpoint != "" {
		opts.BaseEndpoint = aws.String(cfg.BaseEndpoint)
	}
	// Never the SDK's default client as it is: it follows 307 and 308,
	// sending the prompt wherever they point.
	httpClient := cfg.HTTPClient
	if httpClient == nil {
		httpClient = &http.Client{Transport: awshttp.NewBuildableClient().GetTransport()}
	}
	opts.HTTPClient = plainBodies{provider.NoRedirects(httpClient)}
	opts.APIOptions = append(opts.APIOptions, cfg.APIOptions...)
	return bedrockruntime.New(opts), nil
}

// Config configures one Bedrock provider.
type Config struct {
	Name    string
	ModelID string
	Client  ConverseAPI
	// MaxStreamBytes bounds what Stream reads of an answer, a quarter of
	// it an event (0: provider.DefaultMaxResponseBytes).
	MaxStreamBytes int64
	// Flex (kind bedrock-flex) sends the attempts that may wait (a request
	// whose Tier is a window) at the flex service tier.
	Flex   bool
	Logger *slog.Logger
	Now    func() time.Time
}

// Adapter calls Converse.
type Adapter struct {
	cfg Config
	log *slog.Logger
	now func() time.Time
}

// New validates cfg and returns the adapter.
func New(cfg Config) (*Adapter, error) {
	var problems []string
	if cfg.Name == "" {
		problems = append(problems, "name is required")
	}
	if cfg.ModelID == "" {
		problems = append(problems, "model id is required")
	}
	if cfg.Client == nil {
		problems = append(problems, "client is required")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	a := &Adapter{cfg: cfg, log: cfg.Logger, now: cfg.Now}
	if a.log == nil {
		a.log = provider.DiscardLogger()
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

// Name implements provider.Provider.
func (a *Adapter) Name() string { return a.cfg.Name }

// metadataInvalid matches characters Converse's requestMetadata rejects.
var metadataInvalid = regexp.MustCompile(`[^a-zA-Z0-9\s:_@$#=/+,\-.]`)

func metadataValue(s string) string {
	s = metadataInvalid.ReplaceAllString(s, "_")
	if len(s) > 256 {
		s = s[:256]
	}
	return s
}

// Model is the configured model id.
func (a *Adapter) Model() string { return a.cfg.ModelID }

// forcedToolFamilies are the model families Bedrock documents as accepting
// toolConfig.toolChoice.tool (Anthropic Claude 3 and later, Amazon Nova,
// Mistral Large 2); others answer "This model doesn't support the
// toolConfig.toolChoice.tool field".
// Every Claude on Bedrock but Claude 2 (anthropic.claude-v2…) and Claude
// Instant is Claude 3 or later.
var forcedToolFamilies = []string{"anthropic.claude-", "amazon.nova-", "mistral.mistral-large-2"}

var forcedToolExceptions = []string{"anthropic.claude-v", "anthropic.claude-instant"}

// ForcesTool reports whether modelID (a base model id, optionally with a
// cross-region inference profile prefix such as "us.") accepts a forced tool.
func ForcesTool(modelID string) bool {
	id := modelID
	if i := strings.LastIndex(id, "/"); i >= 0 { // an ARN
		id = id[i+1:]
	}
	for _, geo := range []string{"us.", "eu.", "apac.", "jp.", "au.", "ca.", "us-gov.", "global."} {
		id = strings.TrimPrefix(id, geo)
	}
	for _, f := range forcedToolExceptions {
		if strings.HasPrefix(id, f) {
			return false
		}
	}
	for _, f := range forcedToolFamilies {
		if strings.HasPrefix(id, f) {
			return true
		}
	}
	return false
}

// Prepare implements provider.Preparer: the Converse input Call sends.
// Converse has no idempotency token, so the attempt identity travels in
// requestMetadata (visible in invocation logs) for correlation.
func (a *Adapter) Prepare(req provider.Request) (provider.Prepared, error) {
	if err := provider.CheckRequest(a.cfg.Name, req, true); err != nil {
		return provider.Prepared{}, err
	}
	if !ForcesTool(a.cfg.ModelID) {
		return provider.Prepared{}, provider.ModelRuleError(a.cfg.Name, a.cfg.ModelID,
			"the adapter forces its tool (toolConfig.toolChoice.tool), which Bedrock accepts only for Anthropic Claude 3 and later, Amazon Nova and Mistral Large 2")
	}
	// A Claude model that takes strict tool use gets the schema in
	// Claude's strict subset and strict: true (Bedrock's structured outputs
	// for Claude 4.5 and later); another model gets it as written, as
	// guidance. onejob's output check enforces the whole contract either way.
	raw, strict := req.OutputSchema, false
	var notes []string
	if provider.ClaudeStrictTools(a.cfg.ModelID) {
		if s, err := provider.ClaudeStrict.Strict(req.OutputSchema); err != nil {
			notes = append(notes, "tool sent without strict: "+err.Error())
		} else {
			raw, strict = s.Schema, true
			if d := s.Describe(provider.ClaudeStrict); d != "" {
				notes = append(notes, d)
			}
		}
	}
	var schema any
	if err := json.Unmarshal(raw, &schema); err != nil {
		return provider.Prepared{}, a.fail(provider.ClassNonRetryable, 0, "", "decode output schema", fmt.Errorf("%w: %w", provider.ErrInvalidRequest, err))
	}
	toolName := provider.ToolName(req.JobType)
	in := &bedrockruntime.ConverseInput{
		ModelId: aws.String(a.cfg.ModelID),
		Messages: []types.Message{{
			Role:    types.ConversationRoleUser,
			Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: req.Prompt}},
		}},
		InferenceConfig: &types.InferenceConfiguration{Temperature: aws.Float32(float32(req.Temperature))},
		ToolConfig: &types.ToolConfiguration{
			Tools: []types.Tool{&types.ToolMemberToolSpec{Value: types.ToolSpecification{
				Name:        aws.String(toolName),
				Description: aws.String("Record the " + req.JobType + " result. Always call this tool with the complete result."),
				InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(schema)},
			}}},
			ToolChoice: &types.ToolChoiceMemberTool{Value: types.SpecificToolChoice{Name: aws.String(toolName)}},
		},
		RequestMetadata: map[string]string{
			"idempotency_key": metadataValue(req.IdempotencyKey),
			"job_id":          metadataValue(req.JobID),
			"attempt":         strconv.Itoa(req.Attempt),
		},
	}
	if req.System != "" {
		in.System = []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: req.System}}
	}
	if strict {
		spec := in.ToolConfig.Tools[0].(*types.ToolMemberToolSpec)
		spec.Value.Strict = aws.Bool(true)
	}
	if req.MaxOutputTokens > 0 {
		in.InferenceConfig.MaxTokens = aws.Int32(int32(min(req.MaxOutputTokens, 1<<30)))
	}
	if a.cfg.Flex && req.Tier != "" && req.Tier != "now" {
		if !FlexModel(a.cfg.ModelID) {
			return provider.Prepared{}, provider.ModelRuleError(a.cfg.Name, a.cfg.ModelID,
				"Bedrock offers no flex service tier for Anthropic's models (a batch is their half price)")
		}
		in.ServiceTier = &types.ServiceTier{Type: types.ServiceTierTypeFlex}
	}
	return provider.Prepared{Model: a.cfg.ModelID, Body: in, Notes: notes}, nil
}

// Call implements provider.Provider.
func (a *Adapter) Call(ctx context.Context, req provider.Request) (resp provider.Response, err error) {
	start := a.now()
	defer func() { provider.LogCall(ctx, a.log, a.cfg.Name, req, a.now().Sub(start), resp, err) }()
	prep, err := a.Prepare(req)
	if err != nil {
		return provider.Response{}, err
	}
	in := prep.Body.(*bedrockruntime.ConverseInput)
	toolName := aws.ToString(in.ToolConfig.ToolChoice.(*types.ToolChoiceMemberTool).Value.Name)

	ctx, sent := provider.TrackSent(ctx)
	out, err := a.cfg.Client.Converse(ctx, in)
	if err != nil {
		return provider.Response{}, a.classify(err, sent())
	}
	requestID, _ := awsmiddleware.GetRequestIDMetadata(out.ResultMetadata)
	return a.answer(answerOf(out, requestID), toolName)
}

// converseAnswer is a Converse answer, the members onejob reads: read
// whole (Call) or gathered from ConverseStream's events (Stream).
type converseAnswer struct {
	requestID  string
	stopReason types.StopReason
	usage      *types.TokenUsage
	// message: the output is a message, whose content is blocks.
	message bool
	blocks  []answerBlock
}

// answerBlock is one content block: a tool use (name, its input as JSON
// text, nil when it has none, inputErr when it cannot be read) or text.
type answerBlock struct {
	tool     bool
	name     string
	input    []byte
	inputErr error
	text     string
}

// answerOf reads Converse's output.
func answerOf(out *bedrockruntime.ConverseOutput, requestID string) converseAnswer {
	ans := converseAnswer{requestID: requestID, stopReason: out.StopReason, usage: out.Usage}
	msg, ok := out.Output.(*types.ConverseOutputMemberMessage)
	if !ok {
		return ans
	}
	ans.message = true
	for _, block := range msg.Value.Content {
		switch b := block.(type) {
		case *types.ContentBlockMemberToolUse:
			ab := answerBlock{tool: true, name: aws.ToString(b.Value.Name)}
			if b.Value.Input != nil {
				ab.input, ab.inputErr = b.Value.Input.MarshalSmithyDocument()
			}
			ans.blocks = append(ans.blocks, ab)
		case *types.ContentBlockMemberText:
			ans.blocks = append(ans.blocks, answerBlock{text: b.Value})
		}
	}
	return ans
}

// answer is the answer a Converse answer gives: the forced tool's input.
func (a *Adapter) answer(out converseAnswer, toolName string) (resp provider.Response, err error) {
	requestID := out.requestID
	// An answer onejob cannot use keeps its usage: it is billed all the same.
	usage := usageOf(out.usage)
	switch out.stopReason {
	case types.StopReasonContentFiltered, types.StopReasonGuardrailIntervened:
		return provider.Response{}, a.fail(provider.ClassRetryable, http.StatusOK, requestID,
			"the content filter stopped the answer (stopReason "+string(out.stopReason)+")",
			fmt.Errorf("%w: %w", provider.ErrNoStructuredOutput, provider.ErrContentFiltered)).Billed(usage)
	case types.StopReasonMaxTokens, types.StopReasonModelContextWindowExceeded:
		// A tool use cut at the limit may still parse as an object, with
		// members missing: never an answer.
		return provider.Response{}, a.fail(provider.ClassRetryable, http.StatusOK, requestID,
			"output truncated at the token limit (stopReason "+string(out.stopReason)+")", provider.ErrNoStructuredOutput).Billed(usage)
	}
	if !out.message {
		return provider.Response{}, a.fail(provider.ClassRetryable, http.StatusOK, requestID, "no message in converse output", provider.ErrMalformedResponse).Billed(usage)
	}
	var text strings.Builder
	for _, b := range out.blocks {
		switch {
		case b.tool:
			if b.name != toolName || (b.input == nil && b.inputErr == nil) {
				continue
			}
			if b.inputErr != nil || !provider.IsJSONObject(b.input) {
				return provider.Response{}, a.fail(provider.ClassRetryable, http.StatusOK, requestID, "tool input is not a JSON object", provider.ErrNoStructuredOutput).Billed(usage)
			}
			return provider.Response{Output: b.input, ProviderRequestID: requestID, Model: a.cfg.ModelID, Usage: usage}, nil
		default:
			text.WriteString(b.text)
		}
	}
	m := "no " + toolName + " tool use (stopReason " + string(out.stopReason) + ")"
	if text.Len() > 0 {
		m += ": " + provider.Excerpt(text.String())
	}
	return provider.Response{}, a.fail(provider.ClassRetryable, http.StatusOK, requestID, m, provider.ErrNoStructuredOutput).Billed(usage)
}

func (a *Adapter) fail(class provider.Class, status int, requestID, msg string, err error) *provider.CallError {
	return &provider.CallError{Provider: a.cfg.Name, Class: class, Status: status, ProviderRequestID: requestID, Msg: msg, Err: err}
}

// classify maps SDK errors. Modelled exceptions decide first; unmodelled
// HTTP errors fall back to the status; errors without a response depend on
// whether the request had been written.
func (a *Adapter) classify(err error, sent bool) *provider.CallError {
	ce := a.fail("", 0, "", "", err)
	var re *awshttp.ResponseError
	// The SDK also wraps send failures in a ResponseError with status 0.
	if errors.As(err, &re) && re.HTTPStatusCode() != 0 {
		ce.Status = re.HTTPStatusCode()
		ce.ProviderRequestID = re.ServiceRequestID()
		if re.Response != nil && re.Response.Response != nil {
			ce.RetryAfter = provider.ParseRetryAfter(re.Response.Header, a.now())
		}
	}
	var de *smithy.DeserializationError
	var ae smithy.APIError
	switch {
	case provider.Redirected(ce.Status):
		ce.Class, ce.Msg = provider.ClassNonRetryable, provider.RedirectMessage
		ce.Err = fmt.Errorf("%w: %w", provider.ErrHTTPStatus, err)
	case errors.As(err, &de):
		// A 2xx body the SDK could not decode: the provider answered.
		ce.Class, ce.Msg = provider.ClassRetryable, "malformed converse response"
		ce.Err = fmt.Errorf("%w: %w", provider.ErrMalformedResponse, err)
	case errors.As(err, &ae):
		ce.Class = classifyCode(ae.ErrorCode(), ce.Status)
		ce.Detail = provider.APIError{Type: ae.ErrorCode(), Message: ae.ErrorMessage()}
		ce.Msg = ae.ErrorCode() // the SDK error below carries the message
		ce.Err = fmt.Errorf("%w: %w", provider.ErrHTTPStatus, err)
	case ce.Status != 0:
		ce.Class = provider.ClassifyStatus(ce.Status)
		ce.Err = fmt.Errorf("%w: %w", provider.ErrHTTPStatus, err)
	default:
		ce.Class = provider.ClassifyTransport(err, sent)
		ce.Msg = "send request"
		ce.Err = fmt.Errorf("%w: %w", provider.ErrTransport, err)
	}
	return ce
}

func classifyCode(code string, status int) provider.Class {
	switch code {
	case "ThrottlingException", "ServiceUnavailableException", "InternalServerException",
		"ModelNotReadyException", "ServiceQuotaExceededException", "ModelErrorException",
		// Inside a ConverseStream: "A streaming error occurred. Retry your request."
		"ModelStreamErrorException":
		return provider.ClassRetryable
	case "ModelTimeoutException":
		// The model may have run to completion server-side; we cannot tell.
		return provider.ClassAmbiguous
	case "ValidationException", "AccessDeniedException", "ResourceNotFoundException",
		"UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException":
		return provider.ClassNonRetryable
	}
	if status == 0 {
		return provider.ClassAmbiguous
	}
	if c := provider.ClassifyStatus(status); c != "" {
		return c
	}
	return provider.ClassAmbiguous
}

// plainBodies sends each request's body as a plain reader. The SDK wraps
// a body in smithy-go's safe closer and closes it as soon as the answer's
// headers are in; closed, its WriteTo returns io.EOF, which net/http's
// writer (still reading the body to its end) takes for a failed write and
// closes the connection under the event stream being read: "use of closed
// network connection" mid-answer, 1 in 30 streams under -race here
// (TestConformance/StreamRepeat). A plain reader's Read after close
// returns (0, io.EOF), a clean end.
type plainBodies struct{ c *http.Client }

func (p plainBodies) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = plainBody{req.Body}
	}
	return p.c.Do(req)
}

type plainBody struct{ rc io.ReadCloser }

func (b plainBody) Read(p []byte) (int, error) { return b.rc.Read(p) }
func (b plainBody) Close() error               { return b.rc.Close() }
