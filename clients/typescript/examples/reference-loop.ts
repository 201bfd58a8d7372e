/**
 * The planner–executor loop — plan, execute, evaluate, stop — watched from a live `planexec serve`.
 *
 *   node dist/examples/reference-loop.js URL TOKEN AGENT "GOAL" [--approve]
 *
 * planexec runs the loop; this program starts a goal and prints each turn of it from the run's
 * event stream: the plan (and every patch), each step as it executes, each result as it is
 * evaluated, and why the run stopped. With --approve it approves what the run asks a human
 * (from the inbox) and follows the run on; without, it stops where the run waits.
 */

import { PlanexecClient, type RunEvent } from "../src/index.js";

type Say = (line: string) => void;

/** One line for each event that marks a turn of the loop (the others are left out). */
export function describe(e: RunEvent): string | undefined {
  const event = e.event as Record<string, any>;
  switch (e.kind) {
    case "plan_proposed": {
      const plan = event.plan as { version: number; steps: { id: string; tool?: string | null; depends_on?: string[] }[] };
      const steps = plan.steps.map((s) => `${s.id}${s.tool ? `:${s.tool}` : ""}${s.depends_on?.length ? `<-${s.depends_on.join(",")}` : ""}`);
      return `plan      v${plan.version}: ${steps.join("  ")}`;
    }
    case "step_started":
      return `execute   ${event.step_id}${event.tool ? ` (${event.tool})` : ""}`;
    case "step_succeeded":
      return `evaluate  ${event.step_id}: passed${event.verdict?.checks?.length ? ` ${event.verdict.checks.length} check(s)` : ""} -> ${JSON.stringify(event.output)}`;
    case "step_failed":
      return `evaluate  ${event.step_id}: failed (${event.error?.kind}: ${event.error?.message})`;
    case "planning_started":
      // the first plan and the final answer are turns of their own (plan_proposed, run_finished)
      return event.trigger === "initial" || event.trigger === "finish" ? undefined : `replan    ${event.trigger}: ${event.why}`;
    case "approval_requested":
      return `ask       ${event.subject}${event.step_id ? ` ${event.step_id}` : ""}: ${event.reason}`;
    case "run_finished":
      return `stop      ${event.stop.kind}: ${event.stop.detail}${event.answer ? `\nanswer    ${event.answer}` : ""}`;
    default:
      return undefined;
  }
}

/** Run `goal` with `agent` to its end, saying each turn of the loop; approve questions when asked to. */
export async function loop(client: PlanexecClient, agent: string, goal: string, approve: boolean, say: Say): Promise<string> {
  const run = await client.startRun({ agent, goal });
  say(`run       ${run.run_id} (${agent}): ${goal}`);
  let after = 0;
  for (;;) {
    const stream = client.events(run.run_id, { after });
    let end;
    for (;;) {
      const next = await stream.next();
      if (next.done) {
        end = next.value;
        break;
      }
      after = next.value.seq;
      const line = describe(next.value);
      if (line !== undefined) say(line);
    }
    if (end?.kind !== "waiting") break;
    const questions = (await client.inbox()).filter((q) => q.run_id === run.run_id);
    if (!approve) {
      say(`waiting   ${questions.map((q) => `${q.question_id} (${q.about})`).join(", ")}`);
      return "waiting";
    }
    for (const q of questions) {
      say(`approve   ${q.question_id}: ${q.about}`);
      await client.answer(run.run_id, q.question_id, { decision: "approve" });
    }
  }
  const finished = await client.getRun(run.run_id);
  return finished.stop?.kind ?? finished.status;
}

async function main(argv: string[]): Promise<number> {
  const [url, token, agent, goal] = argv;
  if (url === undefined || token === undefined || agent === undefined || goal === undefined) {
    console.error('usage: reference-loop URL TOKEN AGENT "GOAL" [--approve]');
    return 2;
  }
  const client = new PlanexecClient({ baseUrl: url, token });
  const stop = await loop(client, agent, goal, argv.includes("--approve"), (line) => console.log(line));
  return stop === "goal_met" ? 0 : 1;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main(process.argv.slice(2)).then((code) => process.exit(code), (error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
