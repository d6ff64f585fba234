// Package semconv names every span attribute onejob sets, in one place: the
// OpenTelemetry semantic conventions' names it follows (GenAI client spans,
// error.type, server.*) and onejob's own (onejob.*). Constants only, so any
// package may import it.
package semconv

// The GenAI semantic conventions for a model call's CLIENT span
// (open-telemetry/semantic-conventions docs/gen-ai/gen-ai-spans.md, status
// Development): the span is named "{gen_ai.operation.name}
// {gen_ai.request.model}".
const (
	GenAIOperationName          = "gen_ai.operation.name"          // required
	GenAIProviderName           = "gen_ai.provider.name"           // required
	GenAIRequestModel           = "gen_ai.request.model"           // conditionally required: when known
	GenAIRequestMaxTokens       = "gen_ai.request.max_tokens"      // recommended
	GenAIRequestTemperature     = "gen_ai.request.temperature"     // recommended
	GenAIResponseID             = "gen_ai.response.id"             // recommended
	GenAIResponseModel          = "gen_ai.response.model"          // recommended
	GenAIResponseFinishReasons  = "gen_ai.response.finish_reasons" // recommended
	GenAIUsageInputTokens       = "gen_ai.usage.input_tokens"      // recommended
	GenAIUsageOutputTokens      = "gen_ai.usage.output_tokens"     // recommended
	GenAIOutputType             = "gen_ai.output.type"             // conditionally required: when the request asks for a format
	ErrorType                   = "error.type"                     // conditionally required: when the call failed
	ServerAddress               = "server.address"                 // recommended
	ServerPort                  = "server.port"                    // conditionally required: with server.address
	GenAIInputMessages          = "gen_ai.input.messages"          // opt-in: never set by default (ContentOptIn)
	GenAIOutputMessages         = "gen_ai.output.messages"         // opt-in: never set by default
	GenAISystemInstructions     = "gen_ai.system_instructions"     // opt-in: never set by default
	genAIRequestStopSequences   = "gen_ai.request.stop_sequences"  // recommended; onejob sends none
	genAIRequestTopP            = "gen_ai.request.top_p"           // recommended; onejob sends none
	genAIRequestTopK            = "gen_ai.request.top_k"           // recommended; onejob sends none
	genAIRequestFrequencyPenalt = "gen_ai.request.frequency_penalty"
	genAIRequestPresencePenalty = "gen_ai.request.presence_penalty"
)

// Values of gen_ai.operation.name and gen_ai.output.type onejob uses.
const (
	OperationChat            = "chat"
	OperationGenerateContent = "generate_content"
	OutputJSON               = "json"
)

// NotSent lists the recommended request attributes onejob never sets
// because it never sends the parameter (the semconv test holds the list of
// recommended names to the ones set plus these and NotReported).
var NotSent = []string{genAIRequestStopSequences, genAIRequestTopP, genAIRequestTopK, genAIRequestFrequencyPenalt, genAIRequestPresencePenalty}

// NotReported lists the recommended attributes a provider port does not
// carry yet: the finish reasons (provider.Response has no field for them;
// a truncated or filtered answer shows as the call's error.type instead).
var NotReported = []string{GenAIResponseFinishReasons}

// ContentAttributes are the opt-in content attributes: set only when an
// operator opts in (tracing.Config.Content), never by default.
var ContentAttributes = []string{GenAIInputMessages, GenAIOutputMessages, GenAISystemInstructions}

// onejob's own attributes, on every span about a job.
const (
	JobID      = "onejob.job_id"
	JobType    = "onejob.job_type"
	Attempt    = "onejob.attempt"
	Provider   = "onejob.provider" // the configured name (gen_ai.provider.name is its kind's system)
	Hedge      = "onejob.hedge"
	Fallback   = "onejob.fallback"
	Outcome    = "onejob.outcome" // the attempt's state when its span ended
	Replayed   = "onejob.replayed"
	Transition = "onejob.transition" // the kind of a job write (complete, fail, ...)
	Won        = "onejob.won"        // a write that applied (false: it lost its condition)
	Delivery   = "onejob.delivery"   // a webhook delivery's id
	Endpoint   = "onejob.endpoint"   // the endpoint's id
	EventType  = "onejob.event_type"
	Status     = "http.response.status_code"
	Evidence   = "onejob.evidence" // what a reconciler's settlement rests on
	Reason     = "onejob.reason"
)

// Span names of onejob's use cases (the provider call's is "{operation}
// {model}").
const (
	SpanCreate   = "create"
	SpanReplay   = "create replayed"
	SpanStart    = "start"
	SpanRun      = "run"
	SpanAttempt  = "attempt"
	SpanHold     = "hold"
	SpanSettle   = "settle"
	SpanRestart  = "restart"
	SpanHandoff  = "start handed off" // the sweeper's start of a job the api handed it
	SpanPoll     = "poll"             // the scheduled pass's work on one parked job
	SpanWake     = "wake"             // the start of the run a parked job needs
	SpanDeliver  = "deliver"
	SpanEvent    = "provider event"
	SpanWritePre = "write " // + the transition's kind
)

// Event names: a breaker's or an admission's decision on the span of the
// attempt it was made for.
const (
	EventAdmitted = "admission allowed"
	EventRefused  = "admission refused"
	EventObserved = "breaker observed"
)
