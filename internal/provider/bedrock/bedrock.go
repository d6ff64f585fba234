// Package bedrock adapts Amazon Bedrock's Converse API to provider.Provider.
// Structured output is obtained by forcing a single tool whose inputSchema is
// the job type's output schema; the toolUse input is the output.
package bedrock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	if cfg.HTTPClient != nil {
		opts.HTTPClient = cfg.HTTPClient
	}
	return bedrockruntime.New(opts), nil
}

// Config configures one Bedrock provider.
type Config struct {
	Name    string
	ModelID string
	Client  ConverseAPI
	Logger  *slog.Logger
	Now     func() time.Time
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

// Call implements provider.Provider. Converse has no idempotency token, so
// the attempt identity travels in requestMetadata (visible in invocation
// logs) for correlation.
func (a *Adapter) Call(ctx context.Context, req provider.Request) (resp provider.Response, err error) {
	start := a.now()
	defer func() { provider.LogCall(ctx, a.log, a.cfg.Name, req, a.now().Sub(start), resp, err) }()
	if err := provider.CheckRequest(a.cfg.Name, req, true); err != nil {
		return provider.Response{}, err
	}
	var schema any
	if err := json.Unmarshal(req.OutputSchema, &schema); err != nil {
		return provider.Response{}, a.fail(provider.ClassNonRetryable, 0, "", "decode output schema", fmt.Errorf("%w: %w", provider.ErrInvalidRequest, err))
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
	if req.MaxOutputTokens > 0 {
		in.InferenceConfig.MaxTokens = aws.Int32(int32(min(req.MaxOutputTokens, 1<<30)))
	}

	ctx, sent := provider.TrackSent(ctx)
	out, err := a.cfg.Client.Converse(ctx, in)
	if err != nil {
		return provider.Response{}, a.classify(err, sent())
	}
	requestID, _ := awsmiddleware.GetRequestIDMetadata(out.ResultMetadata)
	msg, ok := out.Output.(*types.ConverseOutputMemberMessage)
	if !ok {
		return provider.Response{}, a.fail(provider.ClassRetryable, http.StatusOK, requestID, "no message in converse output", provider.ErrMalformedResponse)
	}
	var text strings.Builder
	for _, block := range msg.Value.Content {
		switch b := block.(type) {
		case *types.ContentBlockMemberToolUse:
			if aws.ToString(b.Value.Name) != toolName || b.Value.Input == nil {
				continue
			}
			raw, err := b.Value.Input.MarshalSmithyDocument()
			if err != nil || !provider.IsJSONObject(raw) {
				return provider.Response{}, a.fail(provider.ClassRetryable, http.StatusOK, requestID, "tool input is not a JSON object", provider.ErrNoStructuredOutput)
			}
			return provider.Response{Output: raw, ProviderRequestID: requestID, Model: a.cfg.ModelID}, nil
		case *types.ContentBlockMemberText:
			text.WriteString(b.Value)
		}
	}
	m := "no " + toolName + " tool use (stopReason " + string(out.StopReason) + ")"
	if text.Len() > 0 {
		m += ": " + provider.Excerpt(text.String())
	}
	return provider.Response{}, a.fail(provider.ClassRetryable, http.StatusOK, requestID, m, provider.ErrNoStructuredOutput)
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
	case errors.As(err, &de):
		// A 2xx body the SDK could not decode: the provider answered.
		ce.Class, ce.Msg = provider.ClassRetryable, "malformed converse response"
		ce.Err = fmt.Errorf("%w: %w", provider.ErrMalformedResponse, err)
	case errors.As(err, &ae):
		ce.Class = classifyCode(ae.ErrorCode(), ce.Status)
		ce.Msg = ae.ErrorCode()
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
		"ModelNotReadyException", "ServiceQuotaExceededException", "ModelErrorException":
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
