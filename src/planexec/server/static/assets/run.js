// One run: what it is doing now, its plan as a live DAG, plan versions with their diffs, each
// step's details, usage and cost, the raw event log, its pending questions, and the actions
// cancel, resume and fork-from-an-event.

import { api, ApiError, followRun } from "./api.js";
import { drawDag, shownStatus } from "./dag.js";
import { questionCard, questionsKey } from "./inbox.js";
import { h, fill, pretty, money, duration, when, runBadge, toast, ask, clip } from "./ui.js";

const STEP_EVENTS = {
  step_started: "running",
  step_succeeded: "succeeded",
  step_failed: "failed",
  step_cancelled: "cancelled",
  step_held: "held",
  step_requeued: "pending",
};
/** Events after which the run's summary is fetched again. */
const REFRESH_ON = new Set([
  ...Object.keys(STEP_EVENTS),
  "plan_proposed",
  "approval_requested",
  "approval_decided",
  "run_suspended",
  "run_resumed",
  "run_finished",
  "information_added",
  "model_called",
  "answer_reviewed",
  "budget_exhausted",
]);

export function mountRun(main, runId, { setInboxCount, refreshInbox }) {
  let run = null;
  let dag = null;
  let dagKey = null;
  let questionKey = null;
  let selected = null;
  let stream = null;
  let refreshTimer = null;
  let stopped = false;
  let misses = 0; // 404s before the run was first seen
  const liveStatus = new Map(); // step id -> status from the event stream, ahead of the next fetch
  const proposals = new Map(); // approval id -> {plan, version} a human was asked to approve
  const edits = []; // {version, proposed, edited, by, reason}: plans a human edited before approving

  const header = h("div", { class: "run-head" });
  const actions = h("div", { class: "actions run-actions" });
  const questions = h("section", { class: "run-questions", "aria-label": "Questions" });
  const dagSection = h("section", { class: "card", "aria-labelledby": "dag-title" });
  const stepPanel = h("section", { class: "card step-panel", "aria-labelledby": "step-title", tabindex: "-1" });
  const stepsTable = h("section", { class: "card", "aria-labelledby": "steps-title" });
  const plans = h("section", { class: "card", "aria-labelledby": "plans-title" });
  const usage = h("section", { class: "card", "aria-labelledby": "usage-title" });
  const logRows = h("tbody");
  const logCount = h("span", { class: "muted" });
  const live = h("span", { class: "live", role: "status" });
  const log = h(
    "section",
    { class: "card", "aria-labelledby": "log-title" },
    h("h2", { id: "log-title" }, "Event log ", logCount),
    h(
      "div",
      { class: "log-scroll" },
      h(
        "table",
        { class: "log" },
        h("thead", {}, h("tr", {}, ["#", "Time", "Event", "Step", "", ""].map((c) => h("th", { scope: "col" }, c)))),
        logRows,
      ),
    ),
  );

  fill(
    main,
    h("p", { class: "crumbs" }, h("a", { href: "#/" }, "Runs"), " / ", h("code", {}, runId), " ", live),
    header,
    actions,
    questions,
    h("div", { class: "run-grid" }, h("div", { class: "run-main" }, dagSection, stepsTable, plans), h("div", { class: "run-side" }, stepPanel, usage)),
    log,
  );
  fill(dagSection, h("h2", { id: "dag-title" }, "Plan"), h("p", { class: "muted" }, "No plan yet."));
  fill(stepPanel, h("h2", { id: "step-title" }, "Step"), h("p", { class: "muted" }, "Choose a step in the plan."));

  const statusOf = (id) => {
    const record = run?.steps.find((step) => step.id === id && !step.superseded);
    const status = liveStatus.get(id) ?? record?.status ?? "pending";
    return shownStatus(status, run?.questions.some((q) => q.step?.id === id));
  };

  const currentPlan = () => (run?.plans?.length ? run.plans[run.plans.length - 1] : null);

  const renderHeader = () => {
    fill(
      header,
      h("h1", {}, clip(run.goal, 160)),
      h(
        "dl",
        { class: "facts inline" },
        h("dt", {}, "Status"),
        h("dd", { id: "run-status", "data-status": run.status }, runBadge(run)),
        h("dt", {}, "Agent"),
        h("dd", {}, run.agent ?? "—"),
        h("dt", {}, "Cost"),
        h("dd", {}, money(run.cost)),
        h("dt", {}, "Duration"),
        h("dd", {}, duration(run.duration)),
        h("dt", {}, "Started"),
        h("dd", {}, when(run.started_at)),
        h("dt", {}, "Steps"),
        h("dd", {}, `${run.steps.filter((x) => !x.superseded && isDone(x.status)).length} of ${run.plans.length ? currentPlan().steps.length : 0} done`),
      ),
      run.constraints?.length ? h("p", {}, "Constraints: ", run.constraints.join("; ")) : null,
      run.stop ? h("p", { class: "stop" }, `Stopped: ${run.stop.kind.replaceAll("_", " ")}`, run.stop.detail ? ` — ${run.stop.detail}` : "") : null,
      run.answer !== undefined && run.answer !== null ? h("div", { class: "answer" }, h("h2", {}, "Answer"), h("pre", {}, pretty(run.answer))) : null,
    );
    const finished = run.status === "finished";
    fill(
      actions,
      h("button", { type: "button", class: "danger", disabled: finished, onclick: cancel }, "Cancel run"),
      h("button", { type: "button", disabled: finished || run.status === "running", onclick: resume }, "Resume"),
      h("a", { href: "#/" }, "Back to runs"),
    );
  };

  const renderQuestions = () => {
    const key = questionsKey(run.questions);
    if (key === questionKey) return;
    questionKey = key;
    fill(
      questions,
      run.questions.length ? h("h2", {}, `Waiting for you (${run.questions.length})`) : null,
      run.questions.map((q) => questionCard(q, { showRun: false, onAnswered: () => { refreshInbox(); scheduleRefresh(0); } })),
    );
  };

  const renderDag = () => {
    const plan = currentPlan();
    if (!plan) return;
    const key = JSON.stringify(plan.steps.map((step) => [step.id, step.depends_on, step.tool]));
    const focused = document.activeElement?.closest?.(".node")?.dataset.step;
    if (key !== dagKey || !dag) {
      dagKey = key;
      dag = drawDag(plan.steps, { statusOf, onSelect: selectStep, selected });
      fill(
        dagSection,
        h("h2", { id: "dag-title" }, `Plan, version ${plan.version}`),
        plan.reason ? h("p", { class: "muted" }, plan.reason) : null,
        dag.element,
      );
      if (focused) dag.focus(focused);
    } else {
      for (const step of plan.steps) dag.update(step.id, statusOf(step.id));
    }
  };

  const renderStepsTable = () => {
    fill(
      stepsTable,
      h("h2", { id: "steps-title" }, "Steps"),
      h(
        "div",
        { class: "table-scroll" },
        h(
          "table",
          { class: "steps" },
          h("thead", {}, h("tr", {}, ["Step", "Status", "Tool", "Attempts", "Took"].map((c) => h("th", { scope: "col" }, c)))),
          h(
            "tbody",
            {},
            run.steps.map((step) =>
              h(
                "tr",
                { class: step.superseded ? "superseded" : null },
                h("td", {}, h("button", { type: "button", class: "link", onclick: () => selectStep(step.id, step) }, step.id)),
                h("td", {}, step.superseded ? `${step.status} (earlier plan)` : statusOf(step.id).replace("approval", "needs approval")),
                h("td", {}, step.tool ?? step.executor ?? "—"),
                h("td", {}, String(step.attempts ?? 0)),
                h("td", {}, step.started_at && step.finished_at ? duration(step.finished_at - step.started_at) : "—"),
              ),
            ),
          ),
        ),
      ),
    );
  };

  const renderStep = () => {
    if (!selected) return;
    const step = run.steps.find((x) => x.id === selected && !x.superseded) ?? run.steps.find((x) => x.id === selected);
    if (!step) return;
    const status = step.superseded ? step.status : statusOf(step.id);
    fill(
      stepPanel,
      h("h2", { id: "step-title" }, "Step ", h("code", {}, step.id)),
      step.description ? h("p", {}, step.description) : null,
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "Status"),
        h("dd", { id: "step-status" }, status.replace("approval", "needs approval")),
        h("dt", {}, "Tool"),
        h("dd", {}, step.tool ?? `model (${step.executor ?? "executor"})`),
        h("dt", {}, "After"),
        h("dd", {}, step.depends_on?.length ? step.depends_on.join(", ") : "—"),
        h("dt", {}, "Attempts"),
        h("dd", {}, String(step.attempts ?? 0)),
        h("dt", {}, "Started"),
        h("dd", {}, when(step.started_at)),
        h("dt", {}, "Finished"),
        h("dd", {}, when(step.finished_at)),
        h("dt", {}, "Took"),
        h("dd", {}, step.started_at && step.finished_at ? duration(step.finished_at - step.started_at) : "—"),
      ),
      h("h3", {}, "Arguments"),
      h("pre", { class: "json" }, pretty(step.args)),
      h("h3", {}, "Output"),
      h("pre", { class: "json", id: "step-output" }, pretty(step.output)),
      step.error ? [h("h3", {}, "Error"), h("p", { class: "bad" }, h("strong", {}, step.error.kind), ": ", step.error.message)] : null,
    );
  };

  const renderPlans = () => {
    fill(
      plans,
      h("h2", { id: "plans-title" }, "Plan versions"),
      run.plans.length === 0 ? h("p", { class: "muted" }, "No plan yet.") : null,
      [...run.plans].reverse().map((plan, i) => {
        const previous = run.plans.find((p) => p.version === plan.version - 1) ?? run.plans[run.plans.indexOf(plan) - 1];
        return h(
          "details",
          { class: "plan-version", open: i === 0, "data-version": plan.version },
          h(
            "summary",
            {},
            h("strong", {}, `Version ${plan.version}`),
            ` by ${plan.author}`,
            plan.trigger ? h("span", { class: "muted" }, ` · ${plan.trigger}`) : null,
            plan.reason ? ` — ${clip(plan.reason, 100)}` : null,
          ),
          plan.reason ? h("p", { class: "reason" }, "Reason: ", plan.reason) : null,
          diffView(plan, previous),
          edits
            .filter((edit) => edit.version === plan.version)
            .map((edit) =>
              h(
                "div",
                { class: "edit" },
                h("h3", {}, "Edited before approval", edit.by ? ` (by ${edit.by})` : "", edit.reason ? ` — ${edit.reason}` : ""),
                diffView({ version: plan.version, steps: edit.edited.steps, diff: planDiff(edit.proposed, edit.edited) }, edit.proposed),
              ),
            ),
        );
      }),
    );
  };

  const renderUsage = () => {
    const u = run.usage ?? {};
    fill(
      usage,
      h("h2", { id: "usage-title" }, "Usage"),
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "Cost"),
        h("dd", {}, money(u.cost ?? run.cost)),
        h("dt", {}, "Model calls"),
        h("dd", {}, String(u.model_calls ?? 0)),
        h("dt", {}, "Input tokens"),
        h("dd", {}, (u.input_tokens ?? 0).toLocaleString()),
        h("dt", {}, "Output tokens"),
        h("dd", {}, (u.output_tokens ?? 0).toLocaleString()),
        h("dt", {}, "Tool calls"),
        h("dd", {}, String(u.tool_calls ?? 0)),
      ),
    );
  };

  const render = () => {
    renderHeader();
    renderQuestions();
    renderDag();
    renderStepsTable();
    renderPlans();
    renderUsage();
    renderStep();
  };

  function selectStep(id) {
    selected = id;
    dag?.select(id);
    renderStep();
  }

  const refresh = async () => {
    try {
      const fetched = await api(`/v1/runs/${encodeURIComponent(runId)}`);
      // a run accepted but not begun yet comes as a summary: no step records, plans or questions
      run = {
        ...fetched,
        steps: Array.isArray(fetched.steps) ? fetched.steps : [],
        plans: fetched.plans ?? [],
        questions: Array.isArray(fetched.questions) ? fetched.questions : [],
        usage: fetched.usage ?? {},
      };
      // the fetched run is at least as new as the events seen before the request
      liveStatus.clear();
      if (!stopped) render();
      setInboxCount();
    } catch (error) {
      if (error instanceof ApiError && error.status === 404 && run === null && misses < 6) {
        // a run just accepted may not be in the store for a moment: look again shortly
        misses += 1;
        await new Promise((resolve) => setTimeout(resolve, 300 * misses));
        if (!stopped) await refresh();
      } else if (error instanceof ApiError && error.status === 404) {
        fill(main, h("h1", {}, "No such run"), h("p", {}, h("code", {}, runId), " is not in this server's store."), h("a", { href: "#/" }, "Back to runs"));
        stopped = true;
        stream?.close();
      } else if (!(error instanceof ApiError && error.status === 401)) {
        toast(`Could not load the run: ${error.message}`, "error");
      }
    }
  };
  function scheduleRefresh(ms = 150) {
    clearTimeout(refreshTimer);
    if (!stopped) refreshTimer = setTimeout(refresh, ms);
  }

  const appendEvent = ({ seq, kind, event }) => {
    const full = h("pre", { class: "json" }, pretty(event));
    logRows.append(
      h(
        "tr",
        { "data-seq": seq, "data-kind": kind },
        h("td", {}, String(seq)),
        h("td", {}, when(event?.at)),
        h("td", {}, h("code", {}, kind)),
        h("td", {}, event?.step_id ?? ""),
        h("td", {}, h("details", {}, h("summary", {}, "JSON"), full)),
        h("td", {}, h("button", { type: "button", class: "quiet", onclick: () => fork(seq, kind) }, "Fork here")),
      ),
    );
    logCount.textContent = `(${seq} events)`;
  };

  const onEvent = (message) => {
    appendEvent(message);
    const event = message.event ?? {};
    if (message.kind === "approval_requested" && event.subject === "plan" && event.plan) {
      proposals.set(event.approval_id, { plan: event.plan, version: event.plan_version ?? event.plan.version });
    } else if (message.kind === "approval_decided" && event.edited_plan && proposals.has(event.approval_id)) {
      const asked = proposals.get(event.approval_id);
      edits.push({ version: event.edited_plan.version ?? asked.version, proposed: asked.plan, edited: event.edited_plan, by: event.by ?? "a human", reason: event.reason });
    }
    const status = STEP_EVENTS[message.kind];
    if (status && message.event?.step_id) {
      liveStatus.set(message.event.step_id, status);
      dag?.update(message.event.step_id, statusOf(message.event.step_id));
    }
    if (REFRESH_ON.has(message.kind)) scheduleRefresh();
  };

  async function cancel() {
    const ok = await ask({ title: "Cancel this run?", body: [h("p", {}, "Running steps are cancelled; the run finishes as cancelled.")], confirm: "Cancel run", danger: true });
    if (!ok) return;
    try {
      await api(`/v1/runs/${encodeURIComponent(runId)}/cancel`, { method: "POST" });
      toast("Cancelling the run");
      scheduleRefresh(0);
    } catch (error) {
      toast(`Could not cancel: ${error.message}`, "error");
    }
  }

  async function resume() {
    try {
      await api(`/v1/runs/${encodeURIComponent(runId)}/resume`, { method: "POST" });
      toast("Resumed");
      scheduleRefresh(0);
      if (!stream) follow();
    } catch (error) {
      toast(`Could not resume: ${error.message}`, "error");
    }
  }

  async function fork(seq, kind) {
    const agents = await api("/v1/agents").then((r) => r.agents).catch(() => []);
    const select = h(
      "select",
      { id: "fork-agent", name: "agent" },
      agents.map((a) => h("option", { value: a.name, selected: a.name === run?.agent }, a.name)),
    );
    const values = await ask({
      title: `Fork from event ${seq}`,
      body: [
        h("p", {}, `A new run replays this run's log up to event ${seq} (`, h("code", {}, kind), ") and goes on from there."),
        agents.length ? h("div", { class: "field" }, h("label", { for: select.id }, "Agent"), select) : null,
      ],
      confirm: "Fork",
    });
    if (!values) return;
    try {
      const body = { at: seq };
      if (values.agent) body.agent = values.agent;
      const forked = await api(`/v1/runs/${encodeURIComponent(runId)}/fork`, { method: "POST", body });
      toast(`Forked into ${forked.run_id}`);
      location.hash = `#/runs/${encodeURIComponent(forked.run_id)}`;
    } catch (error) {
      toast(`Could not fork: ${error.message}`, "error");
    }
  }

  function follow() {
    stream = followRun(runId, {
      after: 0,
      onEvent,
      onWaiting: () => {
        live.textContent = "waiting for an answer";
        scheduleRefresh(0);
      },
      onEnd: () => {
        live.textContent = "finished";
        scheduleRefresh(0);
      },
      onState: (state) => {
        if (state === "live") live.textContent = "live";
        else if (state === "reconnecting") live.textContent = "reconnecting…";
        else if (state === "closed") {
          stream = null;
          if (live.textContent === "live" || live.textContent === "reconnecting…") live.textContent = "";
        }
      },
    });
  }

  refresh().then(() => {
    if (!stopped) follow();
  });
  return () => {
    stopped = true;
    clearTimeout(refreshTimer);
    stream?.close();
  };
}

function isDone(status) {
  return ["succeeded", "failed", "cancelled", "dropped"].includes(status);
}

/** The ids of the steps added, removed and changed from plan `a` to plan `b`. */
function planDiff(a, b) {
  const before = new Map(a.steps.map((x) => [x.id, JSON.stringify(x)]));
  const after = new Map(b.steps.map((x) => [x.id, JSON.stringify(x)]));
  return {
    added: [...after.keys()].filter((id) => !before.has(id)),
    removed: [...before.keys()].filter((id) => !after.has(id)),
    changed: [...after.keys()].filter((id) => before.has(id) && before.get(id) !== after.get(id)),
  };
}

/** What changed from `previous` to `plan`: added, removed and changed steps, field by field. */
function diffView(plan, previous) {
  const diff = plan.diff ?? { added: plan.steps.map((x) => x.id), removed: [], changed: [] };
  if (!diff.added.length && !diff.removed.length && !diff.changed.length)
    return h("p", { class: "muted" }, "No change to the steps.");
  const before = new Map((previous?.steps ?? []).map((x) => [x.id, x]));
  const after = new Map(plan.steps.map((x) => [x.id, x]));
  const line = (sign, cls, id, extra = null) =>
    h("li", { class: cls }, h("span", { class: "sign", "aria-hidden": "true" }, sign), h("span", { class: "visually-hidden" }, `${cls}: `), h("code", {}, id), " ", extra);
  const fields = (id) => {
    const a = before.get(id) ?? {};
    const b = after.get(id) ?? {};
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]));
    return h(
      "ul",
      { class: "fields" },
      keys.map((k) => h("li", {}, h("code", {}, k), ": ", h("del", {}, clip(JSON.stringify(a[k]) ?? "—", 80)), " → ", h("ins", {}, clip(JSON.stringify(b[k]) ?? "—", 80)))),
    );
  };
  return h(
    "ul",
    { class: "diff", "aria-label": `Changes in version ${plan.version}` },
    diff.added.map((id) => line("+", "added", id, after.get(id)?.description ?? "")),
    diff.removed.map((id) => line("−", "removed", id, before.get(id)?.description ?? "")),
    diff.changed.map((id) => line("~", "changed", id, fields(id))),
  );
}
