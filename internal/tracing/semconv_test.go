package tracing

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// The GenAI client span's attributes as the semantic conventions list
// them (open-telemetry/semantic-conventions docs/gen-ai/gen-ai-spans.md,
// "Inference": Development status; the lists as of that page, copied here
// so a change of ours is checked against them, not against itself).
var (
	specRequired    = []string{"gen_ai.operation.name", "gen_ai.provider.name"}
	specConditional = []string{"error.type", "gen_ai.conversation.id", "gen_ai.output.type", "gen_ai.request.choice.count",
		"gen_ai.request.model", "gen_ai.request.seed", "server.port"}
	specRecommended = []string{"gen_ai.request.frequency_penalty", "gen_ai.request.max_tokens", "gen_ai.request.presence_penalty",
		"gen_ai.request.stop_sequences", "gen_ai.request.temperature", "gen_ai.request.top_k", "gen_ai.request.top_p",
		"gen_ai.response.finish_reasons", "gen_ai.response.id", "gen_ai.response.model", "gen_ai.usage.input_tokens",
		"gen_ai.usage.output_tokens", "server.address"}
	specOptIn = []string{"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions", "gen_ai.tool.definitions"}
)

// recorder is a Tracing exporting to memory, sampling every trace.
func recorder(t *testing.T, content bool) (*Tracing, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr, err := New(context.Background(), Config{Exporter: exp, Ratio: 1, Service: "onejob-test", Content: content})
	if err != nil {
		t.Fatal(err)
	}
	return tr, exp
}

func exported(t *testing.T, tr *Tracing, exp *tracetest.InMemoryExporter) tracetest.SpanStubs {
	t.Helper()
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return exp.GetSpans()
}

var secretRequest = provider.Request{JobID: "job_1", Attempt: 1, System: "SYSTEM-SECRET", Prompt: "PROMPT-SECRET",
	OutputSchema: json.RawMessage(`{"type":"object"}`), Temperature: 0.2, MaxOutputTokens: 512}

func describeAll(kind, model, base string) Describe {
	return func(string) (provider.ProviderConfig, bool) {
		return provider.ProviderConfig{Name: "p", Kind: kind, Model: model, BaseURL: base, Region: "eu-west-1"}, true
	}
}

// TestProviderSpansFollowTheGenAIConventions: every kind's call span is a
// CLIENT span named "{operation} {model}", with every required attribute,
// the conditionally required ones whose condition holds, and the
// recommended ones onejob knows; every GenAI or server attribute it sets
// is one the conventions list; the recommended ones it leaves out are
// named, each with why (semconv.NotSent, NotReported).
func TestProviderSpansFollowTheGenAIConventions(t *testing.T) {
	t.Parallel()
	listed := slices.Concat(specRequired, specConditional, specRecommended, specOptIn)
	cases := []struct {
		kind, model, base, op, system, name string
		err                                 error
		want                                []string
	}{
		{provider.KindOpenAI, "gpt-4o-2024-08-06", "", "chat", "openai", "chat gpt-4o-2024-08-06", nil,
			[]string{"gen_ai.request.model", "gen_ai.response.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "server.address", "server.port", "gen_ai.output.type"}},
		{provider.KindAnthropic, "claude-sonnet-4-5", "", "chat", "anthropic", "chat claude-sonnet-4-5",
			&provider.CallError{Class: provider.ClassRetryable, Status: 529, Msg: "overloaded PROMPT-SECRET"},
			[]string{"gen_ai.request.model", "error.type", "server.address", "server.port"}},
		{provider.KindBedrock, "anthropic.claude-3-haiku", "", "chat", "aws.bedrock", "chat anthropic.claude-3-haiku",
			&provider.CallError{Class: provider.ClassAmbiguous, Msg: "timeout"}, []string{"gen_ai.request.model", "error.type", "server.address"}},
		{provider.KindWebhook, "", "http://127.0.0.1:9999/hook", "generate_content", "onejob.webhook", "generate_content", nil,
			[]string{"gen_ai.response.model", "server.address", "server.port"}},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			tr, exp := recorder(t, false)
			ctx, call := tr.Tracer(describeAll(tc.kind, tc.model, tc.base)).Call(context.Background(), job.Job{ID: "job_1"},
				job.Attempt{Number: 1, Provider: "p"}, secretRequest)
			if !trace.SpanContextFromContext(ctx).IsValid() {
				t.Fatal("the call's context carries no span")
			}
			call.End(provider.Response{Output: json.RawMessage(`{"answer":"OUTPUT-SECRET"}`), Model: "answered-model",
				Usage: &provider.Usage{InputTokens: 10, OutputTokens: 3}}, tc.err)
			got := exported(t, tr, exp)
			if len(got) != 1 {
				t.Fatalf("%d spans", len(got))
			}
			sp := got[0]
			if sp.Name != tc.name || sp.SpanKind != trace.SpanKindClient {
				t.Errorf("span %q kind %v, want %q client", sp.Name, sp.SpanKind, tc.name)
			}
			attrs := map[string]attribute.Value{}
			for _, kv := range sp.Attributes {
				attrs[string(kv.Key)] = kv.Value
			}
			for _, k := range slices.Concat(specRequired, tc.want) {
				if _, ok := attrs[k]; !ok {
					t.Errorf("no %s", k)
				}
			}
			if attrs[semconv.GenAIOperationName].AsString() != tc.op || attrs[semconv.GenAIProviderName].AsString() != tc.system {
				t.Errorf("operation %v, provider %v", attrs[semconv.GenAIOperationName], attrs[semconv.GenAIProviderName])
			}
			for k := range attrs {
				if strings.HasPrefix(k, "onejob.") {
					continue
				}
				if !slices.Contains(listed, k) {
					t.Errorf("attribute %s is not one the GenAI conventions list", k)
				}
			}
			if _, ok := attrs[semconv.ServerAddress]; ok {
				if _, ok := attrs[semconv.ServerPort]; !ok {
					t.Error("server.address without server.port")
				}
			}
			if tc.err != nil && sp.Status.Code.String() != "Error" {
				t.Errorf("status %v on a failed call", sp.Status)
			}
			if tc.err == nil {
				if attrs[semconv.GenAIResponseModel].AsString() != "answered-model" || attrs[semconv.GenAIUsageInputTokens].AsInt64() != 10 {
					t.Errorf("response model %v, input tokens %v", attrs[semconv.GenAIResponseModel], attrs[semconv.GenAIUsageInputTokens])
				}
			}
			noSecret(t, sp)
		})
	}
	t.Run("EveryRecommendedAttributeIsSetOrSaidWhyNot", func(t *testing.T) {
		t.Parallel()
		set := []string{semconv.GenAIRequestMaxTokens, semconv.GenAIRequestTemperature, semconv.GenAIResponseModel,
			semconv.GenAIUsageInputTokens, semconv.GenAIUsageOutputTokens, semconv.ServerAddress}
		for _, k := range specRecommended {
			if !slices.Contains(set, k) && !slices.Contains(semconv.NotSent, k) && !slices.Contains(semconv.NotReported, k) &&
				k != semconv.GenAIResponseID {
				t.Errorf("recommended %s is neither set nor named in semconv.NotSent or NotReported", k)
			}
		}
		for _, k := range slices.Concat(semconv.NotSent, semconv.NotReported) {
			if !slices.Contains(specRecommended, k) {
				t.Errorf("%s is not a recommended attribute of the conventions", k)
			}
		}
		for _, k := range semconv.ContentAttributes {
			if !slices.Contains(specOptIn, k) {
				t.Errorf("%s is not an opt-in attribute of the conventions", k)
			}
		}
	})
}

// noSecret fails when the prompt, the system text or the output appear in
// any of the span's attributes, events or status.
func noSecret(t *testing.T, sp tracetest.SpanStub) {
	t.Helper()
	var text []string
	for _, kv := range sp.Attributes {
		text = append(text, kv.Value.String())
	}
	for _, e := range sp.Events {
		text = append(text, e.Name)
		for _, kv := range e.Attributes {
			text = append(text, kv.Value.String())
		}
	}
	text = append(text, sp.Status.Description)
	all := strings.Join(text, " ")
	for _, secret := range []string{"SYSTEM-SECRET", "PROMPT-SECRET", "OUTPUT-SECRET"} {
		if strings.Contains(all, secret) {
			t.Errorf("span %q carries %s", sp.Name, secret)
		}
	}
}

// TestContentOnlyWhenOptedIn: the prompt, system text and output go on
// the call span only when an operator opts in (Config.Content), in the
// conventions' opt-in attributes.
func TestContentOnlyWhenOptedIn(t *testing.T) {
	t.Parallel()
	tr, exp := recorder(t, true)
	_, call := tr.Tracer(describeAll(provider.KindOpenAI, "gpt-4o", "")).Call(context.Background(), job.Job{ID: "job_1"},
		job.Attempt{Number: 1, Provider: "p"}, secretRequest)
	call.End(provider.Response{Output: json.RawMessage(`{"answer":"OUTPUT-SECRET"}`)}, nil)
	sp := exported(t, tr, exp)[0]
	attrs := map[string]string{}
	for _, kv := range sp.Attributes {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if !strings.Contains(attrs[semconv.GenAIInputMessages], "PROMPT-SECRET") || attrs[semconv.GenAISystemInstructions] != "SYSTEM-SECRET" ||
		!strings.Contains(attrs[semconv.GenAIOutputMessages], "OUTPUT-SECRET") {
		t.Errorf("opted in, the content attributes are %v", attrs)
	}
}

// TestUseCaseSpansCarryNoErrorText: a use case's failed span says which
// error (a name, a status), never its text, which may hold a provider's
// words about the prompt.
func TestUseCaseSpansCarryNoErrorText(t *testing.T) {
	t.Parallel()
	tr, exp := recorder(t, false)
	_, span := tr.Tracer(nil).Start(context.Background(), semconv.SpanRun, job.Job{ID: "job_1", Type: "demo"})
	span.End(errors.Join(errors.New("PROMPT-SECRET leaked into an error"), &provider.CallError{Status: 400}))
	sp := exported(t, tr, exp)[0]
	noSecret(t, sp)
	if sp.Status.Description != "400" {
		t.Errorf("status %q, want the provider's status", sp.Status.Description)
	}
}

var _ sdktrace.SpanExporter = (*tracetest.InMemoryExporter)(nil)
