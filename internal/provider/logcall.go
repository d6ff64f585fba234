package provider

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"time"
)

// LogCall writes the one log line per provider call with the shared keys.
// Credentials never reach it: adapters pass only the request, the response
// and the *CallError, none of which carry secrets.
func LogCall(ctx context.Context, log *slog.Logger, providerName string, req Request, elapsed time.Duration, resp Response, err error) {
	if log == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("job_id", req.JobID),
		slog.Int("attempt", req.Attempt),
		slog.String("provider", providerName),
		slog.String("job_type", req.JobType),
		slog.String("idempotency_key", req.IdempotencyKey),
		slog.Int64("duration_ms", elapsed.Milliseconds()),
	}
	if err == nil {
		attrs = append(attrs, slog.String("provider_request_id", resp.ProviderRequestID), slog.String("model", resp.Model))
		if resp.Usage != nil {
			attrs = append(attrs, slog.Int("input_tokens", resp.Usage.InputTokens), slog.Int("output_tokens", resp.Usage.OutputTokens))
		}
		log.LogAttrs(ctx, slog.LevelInfo, "provider call succeeded", attrs...)
		return
	}
	attrs = append(attrs, slog.String("class", string(Classify(err))), slog.String("error", err.Error()))
	var ce *CallError
	if errors.As(err, &ce) {
		attrs = append(attrs, slog.String("provider_request_id", ce.ProviderRequestID), slog.Int("status", ce.Status))
		if ce.RetryAfter > 0 {
			attrs = append(attrs, slog.Int64("retry_after_ms", ce.RetryAfter.Milliseconds()))
		}
	}
	log.LogAttrs(ctx, slog.LevelWarn, "provider call failed", attrs...)
}

// LogWork writes the one line an asynchronous provider's call (op:
// submit, retrieve, cancel) logs, with the shared keys: the attempt's
// (for a submit), and the work's id and status, or the failure's class.
func LogWork(ctx context.Context, log *slog.Logger, providerName, op string, req Request, elapsed time.Duration, workID, status, requestID string, err error) {
	if log == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("provider", providerName),
		slog.String("op", op),
		slog.Int64("duration_ms", elapsed.Milliseconds()),
	}
	if req.JobID != "" {
		attrs = append(attrs, slog.String("job_id", req.JobID), slog.Int("attempt", req.Attempt), slog.String("idempotency_key", req.IdempotencyKey))
	}
	if err != nil {
		attrs = append(attrs, slog.String("class", string(Classify(err))), slog.String("error", err.Error()))
		log.LogAttrs(ctx, slog.LevelWarn, "provider async call failed", attrs...)
		return
	}
	attrs = append(attrs, slog.String("provider_work_id", workID), slog.String("status", status))
	if requestID != "" {
		attrs = append(attrs, slog.String("provider_request_id", requestID))
	}
	log.LogAttrs(ctx, slog.LevelInfo, "provider async call", attrs...)
}

// LogSettle writes the one log line per question about an earlier attempt
// (Settler.Settle): the evidence and its detail, or why there was none.
func LogSettle(ctx context.Context, log *slog.Logger, providerName string, req Request, elapsed time.Duration, s Settlement, err error) {
	if log == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("job_id", req.JobID),
		slog.Int("attempt", req.Attempt),
		slog.String("provider", providerName),
		slog.String("idempotency_key", req.IdempotencyKey),
		slog.Int64("duration_ms", elapsed.Milliseconds()),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
		log.LogAttrs(ctx, slog.LevelWarn, "provider settle got no answer", attrs...)
		return
	}
	attrs = append(attrs, slog.String("evidence", string(s.Evidence)), slog.String("detail", s.Detail))
	if s.Evidence == EvidenceAnswered {
		attrs = append(attrs, slog.String("provider_request_id", s.Response.ProviderRequestID))
	}
	log.LogAttrs(ctx, slog.LevelInfo, "provider settle", attrs...)
}

// DiscardLogger is the logger adapters use when none is configured.
func DiscardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

var toolNameInvalid = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// ToolName derives the schema/tool name sent to model APIs from the job type.
// OpenAI, Anthropic and Bedrock all accept ^[a-zA-Z0-9_-]{1,64}$.
func ToolName(jobType string) string {
	n := toolNameInvalid.ReplaceAllString(jobType, "_")
	if n == "" {
		return "output"
	}
	if len(n) > 64 {
		n = n[:64]
	}
	return n
}

// CheckRequest rejects requests an adapter cannot send: it is a programming
// or catalog error, so the class is non_retryable.
func CheckRequest(providerName string, req Request, needSchema bool) error {
	var missing []string
	if req.JobID == "" {
		missing = append(missing, "job_id")
	}
	if req.IdempotencyKey == "" {
		missing = append(missing, "idempotency_key")
	}
	if needSchema && len(req.OutputSchema) == 0 {
		missing = append(missing, "output_schema")
	}
	if len(missing) == 0 {
		return nil
	}
	return &CallError{
		Provider: providerName,
		Class:    ClassNonRetryable,
		Msg:      "missing " + strings.Join(missing, ", "),
		Err:      ErrInvalidRequest,
	}
}

// ModelRuleError is the error for a request the configured model would
// refuse: it is not sent, and sending it again fails the same way.
func ModelRuleError(providerName, model, why string) *CallError {
	return &CallError{
		Provider: providerName,
		Class:    ClassNonRetryable,
		Msg:      "model " + model + " would refuse the request: " + why,
		Err:      ErrModelRule,
	}
}

// IsJSONObject reports whether raw is a single JSON object.
func IsJSONObject(raw []byte) bool {
	s := strings.TrimSpace(string(raw))
	return strings.HasPrefix(s, "{") && json.Valid([]byte(s))
}
