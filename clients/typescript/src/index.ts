// @onejob/client: the client half of onejob's contract, for browsers, Node
// and React Native. No dependency beyond fetch. Node's file-backed key
// store is in "@onejob/client/node".
export { OnejobClient, maxWaitSeconds, newTraceparent, problemOf, randomKey } from "./client.js";
export type { CallOptions, ClientOptions, ListQuery, RetryInfo, Submission, WaitOptions } from "./client.js";
export { IdempotencyKeyReusedError, NetworkError, ProblemError, problemBase } from "./errors.js";
export { MemoryKeyStore, StorageKeyStore, isStoredIntent } from "./keystore.js";
export type { KeyStore, StoredIntent, StringStorage } from "./keystore.js";
export { backoffDelay, defaultRetryPolicy, parseRetryAfter, sleep } from "./retry.js";
export { readSSE } from "./sse.js";
export type { SSEMessage } from "./sse.js";
export { JobStreams, StreamOrderError, StreamedAnswer, defaultReconnectPolicy, defaultStreamIdleMs, isFinalEvent } from "./stream.js";
export type { AttemptText, FinalEventType, ReconnectInfo, StreamAttemptDiscarded, StreamAttemptStarted, StreamEvent, StreamEventType, StreamHost,
  StreamOptions, StreamOutputDelta, StreamPage } from "./stream.js";
export type { RetryPolicy } from "./retry.js";
export { isTerminal, terminalStatuses } from "./types.js";
export type { Attempt, AttemptList, AttemptSummary, CreateJobRequest, Delivery, DeliveryList, Job, JobList, JobStatus, JobSummary, Problem,
  WebhookEndpoint } from "./types.js";
export { WebhookVerificationError, defaultWebhookToleranceSeconds, signWebhook, verifyWebhook } from "./webhooks.js";
export type { VerifyWebhookOptions, WebhookEvent, WebhookEventType, WebhookHeaders } from "./webhooks.js";
