// Package api is onejob's HTTP edge: it turns API Gateway HTTP API (payload
// 2.0) events into one engine call each, the result into JSON, and every
// error into an RFC 9457 problem through one table (problemOf). openapi.yaml
// is the contract; Local serves the same handler over net/http.
//
// Who the caller is comes only from the JWT authorizer's claims, never from
// the body or a header: the owner is the `sub` claim; a `scope` claim
// containing jobs:admin (space-separated, or API Gateway's "[a b]" array
// form) makes an operator. Owners see only their own jobs; another owner's
// job answers exactly like an absent one. Operators may resolve unknown
// attempts of any owner's job — settling a provider's uncertain outcome is
// an operator's task — while reads and cancels stay the owner's.
//
// Request bodies, decided once:
//   - more than 256 KiB: 413 payload-too-large (checked first);
//   - POST /v1/jobs then needs an Idempotency-Key (400 idempotency-key-missing;
//     present but empty, too long or not visible ASCII: 400
//     idempotency-key-invalid), then Content-Type application/json, UTF-8 if
//     a charset is named (415 unsupported-media-type);
//   - 400 malformed-json for: not UTF-8, empty, not JSON, anything but
//     whitespace after the value, an object naming a key twice at any
//     depth, a number literal over 40 characters or outside the
//     interoperable range (decimal exponent beyond ±308: I-JSON, RFC 7493),
//     nesting deeper than 64, an object with more than 10,000 members
//     (job.CheckJSON). Duplicate keys are refused rather than resolved
//     (first or last wins) because parsers disagree, so the body has no
//     single meaning. These bounds make a refusal cost no more than reading
//     the body once;
//   - 422 validation-failed (with errors[].pointer) for well-formed JSON of
//     the wrong shape: a body that is not an object (array, string, …),
//     unknown members, `input` missing or not an object, bad providers,
//     input failing the job type's schema;
//   - 422 unknown-job-type for a type the catalog does not know.
//
// Nothing is written to DynamoDB for a refused request: all checks run
// before the engine is called.
//
// GET /v1/jobs/{id} lets clients wait for an outcome without hammering
// (wait.go): a strong ETag, 304 for If-None-Match, and Prefer: wait=N
// holding the request until the job changes, re-reading it every 500 ms
// for at most 20 s.
package apigw
