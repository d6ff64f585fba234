package job

import "time"

// StreamLogGrace is how long past its job's retention, counted from its
// writing, a chunk of a streamed attempt's text is kept (ChunkExpiry).
const StreamLogGrace = 24 * time.Hour

// ChunkExpiry is when a chunk of j's stream written at at may go (the log
// table's TTL): the job's retention from its writing, plus a day. A
// chunk is written while its attempt runs, so it outlives its job unless
// the job stays open more than a day after it (an unknown attempt settled
// late): then the log may go before the job, and a reader is sent the
// job's end with the deltas still kept (the final event carries the
// answer; deltas are only ever provisional). Readers ignore nothing by
// time: the log is read while it is kept.
func ChunkExpiry(j Job, at time.Time) time.Time { return at.Add(j.retention() + StreamLogGrace) }

// CountedUsage is what a streamed call cut before its end (its job was
// cancelled) is charged when its provider reported no usage for it: the
// output tokens counted from the pieces of text received (a provider's
// stream sends about a token a piece), and the input bound of a request
// of requestBytes (InputBound), so a cut stream is never charged less than
// it may have cost in input.
func CountedUsage(pieces, requestBytes int) (inputTokens, outputTokens int) {
	return InputBound(requestBytes), pieces
}
