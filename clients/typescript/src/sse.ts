/**
 * Server-Sent Events read from a fetch() response body. EventSource cannot send an Authorization
 * header, so the client reads the stream itself: fields `id`, `event`, `data` (several lines
 * joined by "\n"), comments ignored, an event dispatched at each blank line.
 */

export interface ServerSentEvent {
  /** The event's id (`id:`), the last one seen when the event carried none. */
  id: string | undefined;
  /** The event's type (`event:`), "message" when it names none. */
  event: string;
  data: string;
}

/** Parse a stream of bytes into events, as they arrive. */
export async function* parseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<ServerSentEvent> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let buffer = "";
  let lastId: string | undefined;
  let type = "";
  let data: string[] = [];
  let sawData = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      // A line ends at \r\n, \n or \r; a trailing \r may be the first half of \r\n: keep it.
      for (;;) {
        const match = /\r\n|\n|\r(?!$)/.exec(buffer);
        if (match === null) break;
        const line = buffer.slice(0, match.index);
        buffer = buffer.slice(match.index + match[0].length);
        if (line === "") {
          if (sawData) {
            yield { id: lastId, event: type || "message", data: data.join("\n") };
          }
          type = "";
          data = [];
          sawData = false;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon === -1 ? line : line.slice(0, colon);
        let value = colon === -1 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "data") {
          data.push(value);
          sawData = true;
        } else if (field === "event") {
          type = value;
        } else if (field === "id" && !value.includes("\0")) {
          lastId = value;
        }
      }
      if (done) return;
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => undefined);
  }
}
