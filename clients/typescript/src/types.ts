// The wire types, named: all of them come from schema.ts, which
// openapi-typescript generates from internal/apigw/openapi.yaml (a test
// fails when it no longer matches the document).
import type { components } from "./schema.js";

export type Job = components["schemas"]["Job"];
export type JobStatus = components["schemas"]["JobStatus"];
export type AttemptSummary = components["schemas"]["AttemptSummary"];
export type Attempt = components["schemas"]["Attempt"];
export type AttemptList = components["schemas"]["AttemptList"];
/** A job as listings show it: a Job without its input. */
export type JobSummary = components["schemas"]["JobSummary"];
export type JobList = components["schemas"]["JobList"];
export type CreateJobRequest = components["schemas"]["CreateJobRequest"];
export type Problem = components["schemas"]["Problem"];
export type Delivery = components["schemas"]["Delivery"];
export type DeliveryList = components["schemas"]["DeliveryList"];
export type WebhookEndpoint = components["schemas"]["Endpoint"];

/** The statuses after which a job never changes again. */
export const terminalStatuses: readonly JobStatus[] = ["succeeded", "failed", "cancelled"];

/** Whether a job has reached its outcome. */
export function isTerminal(status: JobStatus): boolean {
  return terminalStatuses.includes(status);
}
