// Server-sent events read from a fetch body (a ReadableStream of bytes), as
// the HTML standard's event stream parser reads them: no EventSource, which
// cannot send an Authorization header and does not exist in React Native.

/** One dispatched event. */
export interface SSEMessage {
  /** The event's type; "message" when it named none. */
  type: string;
  /** Its data lines, joined by "\n". */
  data: string;
  /** The stream's last event ID when it was dispatched: what a reader resumes after. */
  id: string;
}

/** Bounds one line (an event's data line): far past any event onejob sends (a job is at most 400 KB). */
export const maxSSELineChars = 4 << 20;

/**
 * The events of an event stream, in order, as they arrive. Lines end in
 * CRLF, LF or CR; a leading BOM is dropped; comments (`: hb`) and unknown
 * fields are ignored; an event without data is not dispatched; an event
 * the stream never finished (no blank line after it) is dropped, as the
 * standard says, so a connection cut mid-event yields only whole events.
 * onBytes is told of every chunk, comments included (a liveness signal).
 * Ends when the body ends; throws what reading it throws (a cut
 * connection, an abort). Leaving the loop early cancels the body.
 */
export async function* readSSE(body: ReadableStream<Uint8Array>, onBytes?: () => void): AsyncGenerator<SSEMessage, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder("utf-8");
  let buf = "";
  let first = true;
  let lastId = "";
  let type = "";
  let data: string[] = [];
  let finished = false;
  // One line, without its end: the event it belongs to, or its dispatch.
  const line = (l: string): SSEMessage | undefined => {
    if (l === "") {
      const ev = data.length === 0 ? undefined : { type: type || "message", data: data.join("\n"), id: lastId };
      type = "";
      data = [];
      return ev;
    }
    if (l.startsWith(":")) {
      return undefined;
    }
    const colon = l.indexOf(":");
    const field = colon < 0 ? l : l.slice(0, colon);
    let value = colon < 0 ? "" : l.slice(colon + 1);
    if (value.startsWith(" ")) {
      value = value.slice(1);
    }
    switch (field) {
      case "event":
        type = value;
        break;
      case "data":
        data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) {
          lastId = value;
        }
        break;
    }
    return undefined;
  };
  // The whole lines buf holds, dispatching events; at the end of the
  // stream a CR that ends it ends its line too.
  const drain = (eof: boolean): SSEMessage[] => {
    const out: SSEMessage[] = [];
    let start = 0;
    for (;;) {
      let end = -1;
      for (let i = start; i < buf.length; i++) {
        const c = buf.charCodeAt(i);
        if (c === 10 || c === 13) {
          end = i;
          break;
        }
      }
      if (end < 0 || (!eof && buf.charCodeAt(end) === 13 && end + 1 === buf.length)) {
        break; // no whole line, or a CR at the end of what arrived: an LF may follow it
      }
      const ev = line(buf.slice(start, end));
      start = end + (buf.charCodeAt(end) === 13 && buf.charCodeAt(end + 1) === 10 ? 2 : 1);
      if (ev) {
        out.push(ev);
      }
    }
    buf = buf.slice(start);
    return out;
  };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        finished = true;
        buf += decoder.decode();
        // What is left without its line end belongs to an event the
        // stream never finished: dropped.
        yield* drain(true);
        return;
      }
      onBytes?.();
      buf += decoder.decode(value, { stream: true });
      if (first && buf.length > 0) {
        first = false;
        if (buf.charCodeAt(0) === 0xfeff) {
          buf = buf.slice(1);
        }
      }
      yield* drain(false);
      if (buf.length > maxSSELineChars) {
        throw new Error(`onejob: an event stream line longer than ${maxSSELineChars} characters`);
      }
    }
  } finally {
    if (!finished) {
      // The caller left early, or reading failed: close the connection.
      await reader.cancel().catch(() => undefined);
    }
    reader.releaseLock();
  }
}
