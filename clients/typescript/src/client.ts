/**
 * A typed client for the planexec HTTP API (`planexec serve`), written against its OpenAPI
 * document (`openapi.json`, from `planexec serve --openapi`; `npm run schema` regenerates the
 * types in `schema.d.ts`).
 */

import createClient from "openapi-fetch";

import type { components, paths } from "./schema.js";
import { parseEvents } from "./sse.js";

type Schemas = components["schemas"];
export type AgentView = Schemas["AgentView"];
export type Answer = Schemas["Answer"];
export type AnswerResult = Schemas["AnswerResult"];
/** A question a run waits for, with everything a human needs to answer it (the same view the CLI,
 * the web page and the MCP tools show). */
export type QuestionView = Schemas["QuestionView"];
export type QuestionKind = QuestionView["kind"];
export type StepView = Schemas["StepView"];
export type ArgumentView = Schemas["ArgumentView"];
export type EffectView = Schemas["EffectView"];
export type PlanView = Schemas["PlanView"];
export type PlanChangeView = Schemas["PlanChangeView"];
export type ForecastView = Schemas["ForecastView"];
export type BudgetView = Schemas["BudgetView"];
export type AnswerOption = Schemas["AnswerOption"];
export type RunDetail = Schemas["RunDetail"];
export type RunList = Schemas["RunList"];
export type RunSummary = Schemas["RunSummary"];
export type StartRun = Schemas["StartRun"];
/** Budget caps by name: whole numbers for the counted ones, a number for `cost` and `wall_time`; null lifts a cap. */
export type BudgetCaps = Schemas["BudgetCaps"];
export type Tell = Schemas["Tell"];
/** What the server answers whenever it refuses a request. */
export type ErrorBody = Schemas["ErrorBody"];
/** What a problem with a request says: where, what, and a code to act on. */
export type Problem = Schemas["ProblemItem"];

/** The server refused a request (a 4xx or 5xx answer): its status, code, message and every problem. */
export class PlanexecError extends Error {
  readonly status: number;
  readonly code: string;
  readonly problems: Problem[];

  constructor(status: number, code: string, message: string, problems: Problem[] = []) {
    const listed = problems.map((p) => `\n  - ${p.where ? `${p.where}: ` : ""}${p.message}`).join("");
    super(`${status} ${code}: ${message}${listed}`);
    this.name = "PlanexecError";
    this.status = status;
    this.code = code;
    this.problems = problems;
  }
}

/** One event of a run's log, as the stream sends it: its position (`seq`, from 1) and the event. */
export interface RunEvent {
  seq: number;
  kind: string;
  event: Record<string, unknown>;
}

/** The end of what a stream follows: the run finished, or it waits for a human. */
export interface StreamEnd {
  kind: "end" | "waiting";
  status: string;
  data: Record<string, unknown>;
}

export interface ClientOptions {
  /** Where the server listens, e.g. `http://127.0.0.1:8700`. */
  baseUrl: string;
  /** The server's bearer token. */
  token: string;
  /** A fetch of your own (a proxy, a test); the global one by default. */
  fetch?: typeof fetch;
}

export interface FollowOptions {
  /** Start after this event (0: from the first). */
  after?: number;
  /** Stop following. */
  signal?: AbortSignal;
  /** Reconnect with `Last-Event-ID` when the connection drops (default true), this many times in a row at most. */
  reconnects?: number;
  /** Return when the run waits for a human (default true), rather than keep following. */
  untilWaiting?: boolean;
}

export class PlanexecClient {
  private readonly api: ReturnType<typeof createClient<paths>>;
  private readonly baseUrl: string;
  private readonly token: string;
  private readonly fetcher: typeof fetch;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.token = options.token;
    this.fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.api = createClient<paths>({
      baseUrl: this.baseUrl,
      headers: { Authorization: `Bearer ${this.token}` },
      fetch: this.fetcher,
    });
  }

  /** The agents the server runs goals with. */
  async agents(): Promise<AgentView[]> {
    return (await this.call(this.api.GET("/v1/agents"))).agents;
  }

  /** Start a goal with a registered agent. The same `idempotencyKey` again gets the same run. */
  async startRun(body: StartRun, options: { idempotencyKey?: string } = {}): Promise<RunSummary> {
    const header = options.idempotencyKey === undefined ? {} : { "idempotency-key": options.idempotencyKey };
    return this.call(this.api.POST("/v1/runs", { body, params: { header } }));
  }

  /** The runs, newest first (`next_cursor` pages on). */
  async listRuns(query: paths["/v1/runs"]["get"]["parameters"]["query"] = {}): Promise<RunList> {
    return this.call(this.api.GET("/v1/runs", { params: { query } }));
  }

  /** One run: its plans, steps, usage, cost and pending questions. */
  async getRun(runId: string): Promise<RunDetail> {
    return this.call(this.api.GET("/v1/runs/{run_id}", { params: { path: { run_id: runId } } }));
  }

  /** The questions runs wait for, across runs. */
  async inbox(): Promise<QuestionView[]> {
    return (await this.call(this.api.GET("/v1/inbox"))).questions;
  }

  /** Answer a question; the server resumes the run once it waits for nothing else. */
  async answer(runId: string, questionId: string, answer: Answer): Promise<AnswerResult> {
    const path = { run_id: runId, question_id: questionId };
    return this.call(this.api.POST("/v1/runs/{run_id}/questions/{question_id}/answer", { params: { path }, body: answer }));
  }

  async cancel(runId: string): Promise<RunSummary> {
    return this.call(this.api.POST("/v1/runs/{run_id}/cancel", { params: { path: { run_id: runId } } }));
  }

  async resume(runId: string): Promise<RunSummary> {
    return this.call(this.api.POST("/v1/runs/{run_id}/resume", { params: { path: { run_id: runId } } }));
  }

  /** Tell a run something new (`constraint`: a constraint the plan must meet from now on). */
  async tell(runId: string, body: Tell): Promise<RunSummary> {
    return this.call(this.api.POST("/v1/runs/{run_id}/tell", { params: { path: { run_id: runId } }, body }));
  }

  /**
   * Follow a run's events, live: each event once, in log order, across dropped connections
   * (reconnecting with `Last-Event-ID`). Returns how the stream ended: the run finished, or it
   * waits for a human.
   */
  async *events(runId: string, options: FollowOptions = {}): AsyncGenerator<RunEvent, StreamEnd | undefined> {
    let after = options.after ?? 0;
    const untilWaiting = options.untilWaiting ?? true;
    let failures = 0;
    const limit = options.reconnects ?? 5;
    for (;;) {
      let response: Response;
      try {
        response = await this.fetcher(`${this.baseUrl}/v1/runs/${encodeURIComponent(runId)}/events/stream`, {
          headers: { Authorization: `Bearer ${this.token}`, Accept: "text/event-stream", "Last-Event-ID": String(after) },
          signal: options.signal,
        });
      } catch (error) {
        if (options.signal?.aborted || ++failures > limit) throw error;
        await sleep(Math.min(2000, 100 * 2 ** failures));
        continue;
      }
      if (!response.ok || response.body === null) {
        throw await errorOf(response);
      }
      try {
        for await (const message of parseEvents(response.body)) {
          if (message.event === "end" || message.event === "waiting") {
            const data = JSON.parse(message.data) as Record<string, unknown>;
            const end: StreamEnd = { kind: message.event, status: String(data.status ?? message.event), data };
            if (message.event === "end" || untilWaiting) return end;
            continue;
          }
          const seq = Number(message.id);
          if (!Number.isInteger(seq) || seq <= after) continue; // never twice
          after = seq;
          failures = 0;
          yield { seq, kind: message.event, event: JSON.parse(message.data) as Record<string, unknown> };
        }
      } catch (error) {
        if (options.signal?.aborted || ++failures > limit) throw error;
        await sleep(Math.min(2000, 100 * 2 ** failures));
        continue;
      }
      // The server closed the stream before the end (a slow reader's overflow, a restart): go on from `after`.
      if (options.signal?.aborted) return undefined;
      if (++failures > limit) throw new PlanexecError(0, "stream_closed", `the event stream of run ${runId} kept closing`);
      await sleep(Math.min(2000, 100 * 2 ** failures));
    }
  }

  /** Follow a run until it finishes or waits for a human; return it as it then is. */
  async waitFor(runId: string, options: FollowOptions = {}): Promise<RunDetail> {
    const stream = this.events(runId, options);
    for (;;) {
      const next = await stream.next();
      if (next.done) break;
    }
    return this.getRun(runId);
  }

  private async call<T>(pending: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
    const { data, error, response } = await pending;
    if (error !== undefined || data === undefined) {
      throw errorFromBody(response.status, error);
    }
    return data;
  }
}

async function errorOf(response: Response): Promise<PlanexecError> {
  let body: unknown;
  try {
    body = await response.json();
  } catch {
    body = undefined;
  }
  return errorFromBody(response.status, body);
}

function isErrorBody(body: unknown): body is ErrorBody {
  const error = (body as { error?: unknown } | null | undefined)?.error;
  return typeof error === "object" && error !== null && typeof (error as { code?: unknown }).code === "string";
}

function errorFromBody(status: number, body: unknown): PlanexecError {
  if (isErrorBody(body)) {
    const { code, message, problems } = body.error;
    return new PlanexecError(status, code, message ?? "", Array.isArray(problems) ? problems : []);
  }
  // a server at its connection limit answers 503 in plain text
  return new PlanexecError(status, "error", typeof body === "string" ? body : JSON.stringify(body ?? null));
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
