import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { PlanexecClient, PlanexecError, type BudgetCaps, type RunEvent } from "../src/index.js";
import { serve, step, type Served } from "./server.js";

let served: Served;
let client: PlanexecClient;

const ADD = { steps: [step("a", "add", { a: 2, b: 3 }), step("b", "add", { a: 4, b: 5 }), step("c", "add", { a: "${a}", b: "${b}" }, "a", "b")] };
const SEND = { steps: [step("sum", "add", { a: 1, b: 1 }), step("tell", "send", { text: "total ${sum}" }, "sum")] };

before(async () => {
  served = await serve({ adder: [ADD, { answer: "14" }], sender: [SEND, { answer: "sent total 2" }] });
  client = new PlanexecClient({ baseUrl: served.url, token: served.token });
});

after(async () => {
  await served?.stop();
});

test("agents are listed, and a run is started, followed to its end and read back", async () => {
  const agents = await client.agents();
  assert.deepEqual(agents.map((a) => a.name).sort(), ["adder", "sender"]);
  const run = await client.startRun({ agent: "adder", goal: "add it all up" });
  assert.equal(run.agent, "adder");
  const seen: RunEvent[] = [];
  const stream = client.events(run.run_id);
  let end;
  for (;;) {
    const next = await stream.next();
    if (next.done) {
      end = next.value;
      break;
    }
    seen.push(next.value);
  }
  assert.equal(end?.kind, "end");
  assert.deepEqual(
    seen.map((e) => e.seq),
    seen.map((_, i) => i + 1),
  ); // every event once, in order
  assert.equal(seen[0]?.kind, "run_started");
  assert.equal(seen.at(-1)?.kind, "run_finished");
  const detail = await client.getRun(run.run_id);
  assert.equal(detail.status, "finished");
  assert.equal(detail.answer, "14");
  assert.equal(detail.steps.find((s) => s.id === "c")?.output, 14);
  const listed = await client.listRuns({ agent: "adder" });
  assert.ok(listed.runs.some((r) => r.run_id === run.run_id));
});

test("a stream picked up after an event goes on from the next one", async () => {
  const run = await client.startRun({ agent: "adder", goal: "again" });
  await client.waitFor(run.run_id);
  const later: number[] = [];
  for await (const e of client.events(run.run_id, { after: 3 })) later.push(e.seq);
  assert.equal(later[0], 4);
  assert.deepEqual(later, later.map((_, i) => i + 4));
});

test("the same idempotency key gets the same run", async () => {
  const first = await client.startRun({ agent: "adder", goal: "once" }, { idempotencyKey: "ts-once" });
  const again = await client.startRun({ agent: "adder", goal: "once" }, { idempotencyKey: "ts-once" });
  assert.equal(again.run_id, first.run_id);
});

test("a step that waits for approval is answered from the inbox, and the run finishes", async () => {
  const run = await client.startRun({ agent: "sender", goal: "send the sum" });
  const waiting = await client.waitFor(run.run_id);
  assert.equal(waiting.status, "waiting");
  const [question] = (await client.inbox()).filter((q) => q.run_id === run.run_id);
  assert.ok(question !== undefined);
  // everything the decision needs: the goal, the step, its arguments as they will be sent, its effect, why
  assert.equal(question.kind, "step");
  assert.equal(question.goal, "send the sum");
  assert.equal(question.step?.id, "tell");
  assert.equal(question.step?.effect.label, "write · requires approval");
  assert.deepEqual(
    question.step?.arguments.map((a) => [a.name, a.value, a.binding]),
    [["text", "total 2", "${sum}"]],
  );
  assert.equal(question.rule, "tool_requires_approval");
  assert.deepEqual(
    question.answers.map((a) => a.decision),
    ["approve", "reject"],
  );
  const answered = await client.answer(run.run_id, question.question_id, { decision: "approve" });
  assert.equal(answered.resumed, true);
  const done = await client.waitFor(run.run_id);
  assert.equal(done.status, "finished");
  assert.equal(done.stop?.kind, "goal_met", JSON.stringify(done.stop));
  assert.equal(done.steps.find((s) => s.id === "tell")?.output, "sent total 2");
});

test("a run takes budget caps of the types the document gives", async () => {
  const budget: BudgetCaps = { steps: 10, tool_calls: 20, cost: 2.5, wall_time: null };
  const run = await client.startRun({ agent: "adder", goal: "add it all up", budget });
  const done = await client.waitFor(run.run_id);
  assert.equal(done.stop?.kind, "goal_met", JSON.stringify(done.stop));
});

test("refusals are errors with their status, code and problems", async () => {
  await assert.rejects(client.startRun({ agent: "nobody", goal: "x" }), (error: unknown) => {
    assert.ok(error instanceof PlanexecError);
    assert.equal(error.status, 404);
    assert.equal(error.code, "unknown_agent");
    return true;
  });
  await assert.rejects(client.startRun({ agent: "adder", goal: "x", budget: { steps: 2.5, nope: 1 } as BudgetCaps }), (error: unknown) => {
    assert.ok(error instanceof PlanexecError);
    assert.equal(error.status, 422);
    assert.equal(error.code, "invalid");
    assert.deepEqual(error.problems.map((p) => p.where).sort(), ["budget.nope", "budget.steps"]);
    return true;
  });
  await assert.rejects(client.getRun("no-such-run"), (error: unknown) => error instanceof PlanexecError && error.status === 404);
  await assert.rejects(client.getRun("no such run"), (error: unknown) => error instanceof PlanexecError && error.code === "bad_id");
  const stranger = new PlanexecClient({ baseUrl: served.url, token: "not-the-token-0123456789" });
  await assert.rejects(stranger.agents(), (error: unknown) => error instanceof PlanexecError && error.status === 401);
});

test("the reference loop example: plan, execute, evaluate, stop", async () => {
  const { loop } = await import("../examples/reference-loop.js");
  const lines: string[] = [];
  const stop = await loop(client, "sender", "send the sum", true, (line: string) => lines.push(line));
  assert.equal(stop, "goal_met");
  const turns = lines.map((l) => l.split(/\s+/)[0]);
  assert.deepEqual(turns, ["run", "plan", "execute", "evaluate", "ask", "approve", "execute", "evaluate", "stop"]);
  assert.match(lines.find((l) => l.startsWith("plan")) ?? "", /sum:add  tell:send<-sum/);
  assert.match(lines.at(-1) ?? "", /^stop +goal_met: .*\nanswer +sent total 2$/);
});
