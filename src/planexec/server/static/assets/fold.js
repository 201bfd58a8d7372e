// A run's state folded from its events, in the page, the way planexec's RunState folds them: the
// run page shows what this fold says about the very events its event log lists, so the two never
// disagree and the view is never behind the log. The views it gives have the shape of the API's
// run detail (GET /v1/runs/ID); the browser tests fold recorded logs both ways and compare them.

const DONE = new Set(["succeeded", "failed", "cancelled", "dropped"]);

/** JSON text with object keys sorted: equal values give equal text. */
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object")
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`)
      .join(",")}}`;
  return JSON.stringify(value ?? null);
}

/** A step of a plan event, compared by value. */
function sameStep(a, b) {
  return canonical(a) === canonical(b);
}

function newRecord(step, planVersion) {
  return {
    step,
    plan_version: planVersion,
    status: "pending",
    executor: null,
    args: null,
    output: null,
    error: null,
    attempts: 0,
    started_at: null,
    finished_at: null,
  };
}

/** A plan_forecast event's figures as the API's ForecastView carries them (ranges as {low, high}). */
function forecastView(logged) {
  if (!logged) return null;
  const f = logged.forecast;
  const range = (pair) => ({ low: pair?.[0] ?? 0, high: pair?.[1] ?? 0 });
  return {
    planner_calls: range(f.planner_calls),
    executor_calls: range(f.executor_calls),
    tool_calls: range(f.tool_calls),
    input_tokens: range(f.input_tokens),
    output_tokens: range(f.output_tokens),
    cost: range(f.cost),
    unpriced: f.unpriced ?? [],
    basis: f.basis ?? [],
    over: logged.over ?? [],
  };
}

const HANDLERS = {
  run_started(s, e) {
    s.run_id = e.run_id ?? "";
    s.goal = e.goal ?? "";
    s.constraints = e.constraints ?? [];
    s.started_at = e.at;
    const served = e.config?.serve;
    s.agent = served && typeof served === "object" && typeof served.agent === "string" ? served.agent : null;
  },
  planning_started(s) {
    s.planning = true;
  },
  model_called(s, e) {
    s.model_calls += 1;
    s.input_tokens += e.usage?.input_tokens ?? 0;
    s.output_tokens += e.usage?.output_tokens ?? 0;
    s.cost += e.cost ?? 0;
  },
  plan_proposed(s, e) {
    const plan = e.plan;
    s.planning = false;
    s.plans.push(plan);
    s.triggers.set(plan.version, e.trigger ?? "");
    const inPlan = new Set();
    for (const step of plan.steps) {
      inPlan.add(step.id);
      const old = s.steps.get(step.id);
      if (old && (old.status === "succeeded" || (sameStep(old.step, step) && (old.status === "pending" || old.status === "running"))))
        continue;
      if (old) s.superseded.push(old);
      s.steps.set(step.id, newRecord(step, plan.version));
    }
    for (const [id, rec] of [...s.steps]) {
      if (!inPlan.has(id) && rec.status === "pending") {
        rec.status = "dropped";
        s.superseded.push(rec);
        s.steps.delete(id);
      }
    }
  },
  plan_forecast(s, e) {
    s.forecasts.set(e.plan_version, { forecast: e.forecast ?? {}, over: e.over ?? [] });
  },
  step_streamed(s, e) {
    const old = s.steps.get(e.step.id);
    if (old) s.superseded.push(old);
    // a streamed step replaces its id's record where it stands (as a dict keeps a key's place)
    s.steps.set(e.step.id, newRecord(e.step, e.plan_version));
  },
  approval_requested(s, e) {
    s.approvals.set(e.approval_id, {
      question_id: e.approval_id,
      subject: e.subject,
      step_id: e.step_id ?? null,
      plan_version: e.plan_version ?? null,
      plan: e.plan ?? null,
      reason: e.reason ?? "",
      output: e.output ?? null,
      checklist: e.checklist ?? [],
      asked_at: e.at,
      approved: null,
    });
  },
  approval_decided(s, e) {
    const rec = s.approvals.get(e.approval_id);
    if (rec && rec.approved === null) rec.approved = e.approved;
  },
  step_started(s, e) {
    const rec = s.steps.get(e.step_id);
    if (!rec) return;
    Object.assign(rec, { status: "running", executor: e.executor ?? null, args: e.args ?? null, started_at: e.at, attempts: 1 });
    if (e.tool !== null && e.tool !== undefined) s.tool_calls += 1;
  },
  step_attempt_failed(s, e) {
    const rec = s.steps.get(e.step_id);
    if (!rec) return;
    if (e.retry_in !== null && e.retry_in !== undefined) {
      rec.attempts = e.attempt + 1;
      if (rec.step.tool !== null && rec.step.tool !== undefined) s.tool_calls += 1;
    }
  },
  tool_called(s, e) {
    s.tool_calls += e.attempts ?? 1;
  },
  step_requeued(s, e) {
    const rec = s.steps.get(e.step_id);
    if (rec) Object.assign(rec, { status: "pending", finished_at: null });
  },
  step_held(s, e) {
    const rec = s.steps.get(e.step_id);
    if (rec) rec.status = "held";
  },
  step_succeeded(s, e) {
    const rec = s.steps.get(e.step_id);
    if (rec) Object.assign(rec, { status: "succeeded", output: e.output ?? null, finished_at: e.at, attempts: e.attempts });
  },
  step_failed(s, e) {
    const rec = s.steps.get(e.step_id);
    if (!rec) return;
    Object.assign(rec, { status: "failed", error: e.error ?? null, finished_at: e.at, attempts: e.attempts });
    if (e.output !== null && e.output !== undefined) rec.output = e.output;
  },
  step_cancelled(s, e) {
    const rec = s.steps.get(e.step_id);
    if (rec) Object.assign(rec, { status: "cancelled", finished_at: e.at });
  },
  run_suspended(s) {
    s.suspended = true;
  },
  run_resumed(s) {
    s.suspended = false;
  },
  run_finished(s, e) {
    s.stop = e.stop ?? null;
    s.planning = false;
    s.answer = e.answer ?? null;
    s.finished_at = e.at;
    for (const rec of s.steps.values()) {
      if (rec.status === "running") Object.assign(rec, { status: "cancelled", finished_at: e.at });
    }
  },
};

/** A step record as the API shows one. */
function stepView(rec, superseded) {
  const step = rec.step;
  return {
    id: step.id,
    description: step.description ?? "",
    tool: step.tool ?? null,
    executor: rec.executor ?? step.executor ?? null,
    args: rec.args ?? step.args ?? {},
    depends_on: [...(step.depends_on ?? [])],
    status: rec.status,
    output: rec.output,
    error: rec.error ? { kind: String(rec.error.kind), message: rec.error.message } : null,
    attempts: rec.attempts,
    started_at: rec.started_at,
    finished_at: rec.finished_at,
    superseded,
    plan_version: rec.plan_version,
  };
}

/** A run's state, one event at a time: `apply(event)`, then `view()` for what to show. */
export class RunFold {
  constructor() {
    Object.assign(this, {
      run_id: "",
      agent: null,
      goal: "",
      constraints: [],
      started_at: 0,
      finished_at: null,
      last_at: 0,
      plans: [],
      triggers: new Map(),
      forecasts: new Map(),
      steps: new Map(),
      superseded: [],
      approvals: new Map(),
      cost: 0,
      model_calls: 0,
      input_tokens: 0,
      output_tokens: 0,
      tool_calls: 0,
      suspended: false,
      planning: false,
      stop: null,
      answer: null,
      events: 0,
    });
  }

  /** Fold one event (its JSON as the API sends it) into the state. */
  apply(event) {
    this.events += 1;
    if (typeof event?.at === "number" && event.at > this.last_at) this.last_at = event.at;
    HANDLERS[event?.kind]?.(this, event);
    return this;
  }

  get status() {
    if (this.stop) return "finished";
    return this.suspended ? "waiting" : "running";
  }

  /** The current plan (the latest version), or null before the first. */
  get plan() {
    return this.plans.length ? this.plans[this.plans.length - 1] : null;
  }

  /** The questions the run waits on (their ids, subjects, steps and what was asked). */
  get questions() {
    return [...this.approvals.values()].filter((q) => q.approved === null);
  }

  /**
   * The current plan's steps with their records, in plan order, and how many of them succeeded
   * and failed: what "steps done" counts (a step dropped from the plan, or of an earlier version,
   * is not one of them).
   */
  progress() {
    const plan = this.plan;
    const steps = plan ? plan.steps.map((step) => this.steps.get(step.id) ?? newRecord(step, plan.version)) : [];
    return {
      total: steps.length,
      succeeded: steps.filter((r) => r.status === "succeeded").length,
      failed: steps.filter((r) => r.status === "failed").length,
      done: steps.filter((r) => DONE.has(r.status)).length,
    };
  }

  /** Plan versions with what changed from the one before, as the API shows them. */
  planViews() {
    let before = new Map();
    return this.plans.map((plan) => {
      const steps = new Map(plan.steps.map((step) => [step.id, step]));
      const view = {
        version: plan.version,
        author: plan.author,
        reason: plan.reason ?? "",
        trigger: this.triggers.get(plan.version) ?? "",
        steps: [...steps.values()],
        diff: {
          added: [...steps.keys()].filter((id) => !before.has(id)),
          removed: [...before.keys()].filter((id) => !steps.has(id)),
          changed: [...steps.keys()].filter((id) => before.has(id) && !sameStep(before.get(id), steps.get(id))),
        },
        forecast: forecastView(this.forecasts.get(plan.version)),
      };
      before = steps;
      return view;
    });
  }

  /** The run as GET /v1/runs/ID shows it (a step view also says which plan version defined it). */
  view() {
    return {
      run_id: this.run_id,
      agent: this.agent,
      goal: this.goal,
      status: this.status,
      stop: this.stop ? { kind: this.stop.kind, detail: this.stop.detail ?? "", code: this.stop.code ?? null } : null,
      cost: this.cost,
      started_at: this.started_at,
      updated_at: this.last_at || this.started_at,
      duration: this.finished_at === null ? null : Math.max(0, this.finished_at - this.started_at),
      answer: this.answer,
      constraints: [...this.constraints],
      plans: this.planViews(),
      steps: [...this.superseded.map((r) => stepView(r, true)), ...[...this.steps.values()].map((r) => stepView(r, false))],
      usage: {
        model_calls: this.model_calls,
        input_tokens: this.input_tokens,
        output_tokens: this.output_tokens,
        tool_calls: this.tool_calls,
        cost: this.cost,
      },
      questions: this.questions.map(({ approved, ...q }) => q),
      events: this.events,
    };
  }
}

/** Fold a whole list of events. */
export function foldRun(events) {
  const fold = new RunFold();
  for (const event of events) fold.apply(event);
  return fold;
}
