import { test } from "node:test";
import assert from "node:assert/strict";

import { parseEvents, type ServerSentEvent } from "../src/sse.js";

function streamOf(chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

async function all(chunks: string[]): Promise<ServerSentEvent[]> {
  const events: ServerSentEvent[] = [];
  for await (const event of parseEvents(streamOf(chunks))) events.push(event);
  return events;
}

test("events split across chunks, with every kind of line ending", async () => {
  const events = await all(["id: 1\r\nevent: step_started\r\nda", "ta: {\"a\":1}\r\n\r\n: ping\n\nid: 2\rdata: x\r", "\ndata: y\n\n"]);
  assert.deepEqual(events, [
    { id: "1", event: "step_started", data: '{"a":1}' },
    { id: "2", event: "message", data: "x\ny" },
  ]);
});

test("a comment or an id alone dispatches nothing, and an unfinished event at the end is dropped", async () => {
  const events = await all([": keep-alive\n\nid: 7\n\ndata: last\n\ndata: cut off"]);
  assert.deepEqual(events, [{ id: "7", event: "message", data: "last" }]);
});

test("characters split between chunks are decoded whole", async () => {
  const bytes = new TextEncoder().encode("data: café ✓\n\n");
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const byte of bytes) controller.enqueue(new Uint8Array([byte]));
      controller.close();
    },
  });
  const events: ServerSentEvent[] = [];
  for await (const event of parseEvents(body)) events.push(event);
  assert.deepEqual(events, [{ id: undefined, event: "message", data: "café ✓" }]);
});
