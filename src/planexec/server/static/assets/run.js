// One run: what it is doing now, its plan as a live DAG, plan versions with their diffs, each
// step's details, usage and cost, the raw event log, its pending questions, and the actions
// cancel, resume and fork-from-an-event.
//
// Everything shown is folded (fold.js) from the events the page receives on the run's event
// stream, the same events its event log lists: the events of a frame are folded, listed and drawn
// together, so the page never says less than its own log. Only the wording of the questions comes
// from the server, fetched when the log says which questions are open.

import { api, ApiError, followRun } from "./api.js";
import { drawDag, shownStatus } from "./dag.js";
import { RunFold } from "./fold.js";
import { questionCard, questionsKey } from "./inbox.js";
import { h, fill, pretty, money, duration, when, runBadge, toast, ask, clip } from "./ui.js";

export function mountRun(main, runId, { setInboxCount, refreshInbox }) {
  const fold = new RunFold(); // the run, folded from the events the log below lists
  let accepted = null; // what GET /v1/runs/ID said before any event (a run waiting for a worker)
  let asked = new Map(); // question id -> the server's view of it, for the cards
  let askedKey = null; // the pending questions the cards were fetched for
  let dag = null;
  let dagKey = null;
  let cardsKey = null;
  let selected = null; // {id, record}: the step shown in the side panel
  let stream = null;
  let stopped = false;
  let misses = 0; // 404s before the run was first seen
  let lastSeq = 0;
  const queue = []; // events received and not drawn yet: drawn together, with the log, at the next frame
  let frame = 0;
  const proposals = new Map(); // approval id -> {plan, version} a human was asked to approve
  const openPlans = new Map(); // plan version -> whether its details are open, once a human chose
  const drawn = new WeakMap(); // section -> the key of what it shows

  /** Whether `section` should be drawn again: what it shows (`key`) changed since it was drawn. */
  const changed = (section, key) => {
    if (drawn.get(section) === key) return false;
    drawn.set(section, key);
    return true;
  };
  const edits = []; // {version, proposed, edited, by, reason}: plans a human edited before approving

  const header = h("div", { class: "run-head" });
  const actions = h("div", { class: "actions run-actions" });
  const questions = h("section", { class: "run-questions", "aria-label": "Questions" });
  const dagSection = h("section", { class: "card", id: "dag-section", "aria-labelledby": "dag-title" });
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
      { class: "log-scroll", tabindex: "0", role: "region", "aria-labelledby": "log-title" },
      h(
        "table",
        { class: "log" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["#", "Time", "Event", "Step"].map((c) => h("th", { scope: "col" }, c)),
            h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Details")),
            h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Fork")),
          ),
        ),
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
  fill(dagSection, h("h2", { id: "dag-title" }, "Plan"), h("p", { class: "muted" }, "Loading…"));
  fill(stepPanel, h("h2", { id: "step-title" }, "Step"), h("p", { class: "muted" }, "Choose a step in the plan."));

  const waitsOn = (id) => fold.questions.some((q) => q.step_id === id);
  const statusOf = (id) => shownStatus(fold.steps.get(id)?.status ?? "pending", waitsOn(id));

  /** The run as shown: folded from its events, or (none yet) as the server accepted it. */
  const shown = () => {
    if (fold.events > 0 || !accepted) return fold.view();
    return { ...accepted, steps: [], plans: [], questions: [], usage: {}, constraints: accepted.constraints ?? [] };
  };

  const planState = (plan) => {
    if (plan) return `version ${plan.version}`;
    if (fold.questions.some((q) => q.subject === "plan")) return "proposed, waiting for approval";
    return fold.planning ? "being made" : "none yet";
  };

  const renderHeader = (run) => {
    const plan = fold.plan;
    const progress = fold.progress();
    const stepsText = plan
      ? `${progress.succeeded} of ${progress.total} done${progress.failed ? `, ${progress.failed} failed` : ""}`
      : "no plan yet";
    const key = JSON.stringify([run.goal, run.status, run.stop, run.agent, planState(plan), stepsText, run.cost, run.duration, run.started_at, run.constraints, run.answer]);
    if (!changed(header, key)) return;
    fill(
      header,
      h("h1", {}, clip(run.goal, 160)),
      h(
        "dl",
        { class: "facts inline" },
        fact("Status", h("span", { id: "run-status", "data-status": run.status }, runBadge(run))),
        fact("Agent", run.agent ?? "—"),
        fact("Plan", h("span", { id: "run-plan" }, planState(plan))),
        fact("Steps", h("span", { id: "run-steps" }, stepsText)),
        fact("Cost", h("span", { id: "run-cost" }, money(run.cost))),
        fact("Duration", duration(run.duration)),
        fact("Started", when(run.started_at)),
      ),
      run.constraints?.length ? h("p", {}, "Constraints: ", run.constraints.join("; ")) : null,
      run.stop ? h("p", { class: "stop" }, `Stopped: ${run.stop.kind.replaceAll("_", " ")}`, run.stop.detail ? ` — ${run.stop.detail}` : "") : null,
      run.answer !== undefined && run.answer !== null ? h("div", { class: "answer" }, h("h2", {}, "Answer"), h("pre", {}, pretty(run.answer))) : null,
    );
    const finished = run.status === "finished";
    keepingFocus(actions, () =>
      fill(
        actions,
        h("button", { type: "button", class: "danger", disabled: finished, onclick: cancel, "data-focus": "cancel" }, "Cancel run"),
        h("button", { type: "button", disabled: finished || run.status === "running", onclick: resume, "data-focus": "resume" }, "Resume"),
        h("a", { href: "#/", "data-focus": "back" }, "Back to runs"),
      ),
    );
  };

  /** The cards of the questions the run waits on, as the server words them (fetched when they change). */
  const renderQuestions = () => {
    const pending = fold.questions.map((q) => q.question_id);
    const wanted = pending.join(" ");
    if (wanted !== askedKey) {
      askedKey = wanted;
      setInboxCount();
      if (pending.length) fetchQuestions(wanted);
    }
    const cards = pending.map((id) => asked.get(id)).filter(Boolean);
    const key = `${wanted}|${questionsKey(cards)}`;
    if (key === cardsKey) return;
    cardsKey = key;
    fill(
      questions,
      pending.length ? h("h2", {}, `Waiting for you (${pending.length})`) : null,
      cards.map((q) => questionCard(q, { showRun: false, onAnswered: () => refreshInbox() })),
      cards.length < pending.length ? h("p", { class: "muted" }, "Loading the question…") : null,
    );
  };

  async function fetchQuestions(wanted) {
    try {
      const fetched = await api(`/v1/runs/${encodeURIComponent(runId)}`);
      if (stopped || askedKey !== wanted) return;
      asked = new Map((fetched.questions ?? []).map((q) => [q.question_id, q]));
      draw();
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) toast(`Could not load the questions: ${error.message}`, "error");
    }
  }

  const renderDag = () => {
    const plan = fold.plan;
    if (!plan) {
      // before the first plan is approved, the question above shows the plan proposed
      const proposed = fold.questions.some((q) => q.subject === "plan");
      const say = proposed ? "A plan is proposed: it waits for approval in the question above." : fold.planning ? "The planner is making the plan…" : "No plan yet.";
      if (dagKey !== say) {
        dagKey = say;
        dag = null;
        fill(dagSection, h("h2", { id: "dag-title" }, "Plan"), h("p", { class: "muted" }, say));
      }
      return;
    }
    const key = JSON.stringify([plan.version, plan.steps.map((step) => [step.id, step.depends_on, step.tool, step.executor])]);
    const focused = document.activeElement?.closest?.("#dag-section .node")?.dataset.step;
    if (key !== dagKey || !dag) {
      dagKey = key;
      fill(dagSection, h("h2", { id: "dag-title" }, `Plan, version ${plan.version}`), plan.reason ? h("p", { class: "muted" }, plan.reason) : null);
      dag = drawDag(plan.steps, { statusOf, onSelect: (id) => selectStep(id), selected: selected?.id, label: `Plan version ${plan.version}` });
      dagSection.append(dag.element);
      if (focused) dag.focus(focused);
    } else {
      for (const step of plan.steps) dag.update(step.id, statusOf(step.id));
    }
  };

  const stepRow = (step, status, earlier = false) =>
    h(
      "tr",
      { class: earlier ? "superseded" : null, "data-step": step.id },
      h(
        "td",
        { "data-label": "Step" },
        h("button", { type: "button", class: "link", onclick: () => selectStep(step.id, step), "data-focus": `step:${step.id}:${earlier ? step.plan_version : ""}` }, step.id),
      ),
      h("td", { "data-label": "Status" }, status),
      h("td", { "data-label": "Tool" }, step.tool ?? step.executor ?? "—"),
      h("td", { "data-label": "Attempts" }, String(step.attempts ?? 0)),
      h("td", { "data-label": "Took" }, step.started_at && step.finished_at ? duration(step.finished_at - step.started_at) : "—"),
    );

  const renderStepsTable = (run) => {
    const plan = fold.plan;
    const inPlan = new Set(plan?.steps.map((step) => step.id) ?? []);
    const byId = new Map(run.steps.filter((x) => !x.superseded).map((x) => [x.id, x]));
    const current = (plan?.steps ?? []).map((step) => byId.get(step.id) ?? { ...step, status: "pending", attempts: 0 });
    // earlier records that did something: a step replaced or dropped before it ever started has
    // nothing to show but its definition, which the plan versions show
    const earlier = run.steps.filter((x) => (x.superseded || !inPlan.has(x.id)) && (x.attempts > 0 || x.started_at));
    const took = (x) => [x.id, x.status, x.attempts, x.started_at, x.finished_at, x.plan_version];
    const key = JSON.stringify([current.map((x) => [...took(x), statusOf(x.id)]), earlier.map(took)]);
    if (!changed(stepsTable, key)) return;
    keepingFocus(stepsTable, () => fill(
      stepsTable,
      h("h2", { id: "steps-title" }, "Steps"),
      plan
        ? h(
            "div",
            { class: "table-scroll" },
            h(
              "table",
              { class: "steps stack" },
              h("thead", {}, h("tr", {}, ["Step", "Status", "Tool", "Attempts", "Took"].map((c) => h("th", { scope: "col" }, c)))),
              h("tbody", {}, current.map((step) => stepRow(step, statusLabel(statusOf(step.id))))),
              earlier.length
                ? h(
                    "tbody",
                    { class: "earlier" },
                    h("tr", {}, h("th", { scope: "colgroup", colspan: 5 }, "From earlier plan versions")),
                    earlier.map((step) => stepRow(step, `${step.status} (plan v${step.plan_version})`, true)),
                  )
                : null,
            ),
          )
        : h("p", { class: "muted" }, "No plan yet."),
    ));
  };

  const renderStep = () => {
    if (!selected) return;
    const step = selected.record ?? fold.view().steps.find((x) => x.id === selected.id && !x.superseded);
    if (!step) return;
    const status = selected.record ? `${step.status} (plan v${step.plan_version})` : statusLabel(statusOf(step.id));
    const key = JSON.stringify([step.id, step.plan_version, status, step.attempts, step.started_at, step.finished_at, step.error]);
    if (!changed(stepPanel, key)) return;
    keepingFocus(stepPanel, () => fill(
      stepPanel,
      h("h2", { id: "step-title" }, "Step ", h("code", {}, step.id)),
      step.description ? h("p", {}, step.description) : null,
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "Status"),
        h("dd", { id: "step-status" }, status),
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
      h("pre", { class: "json", tabindex: "0", "data-focus": "args", "aria-label": `Arguments of step ${step.id}` }, pretty(step.args)),
      h("h3", {}, "Output"),
      h("pre", { class: "json", id: "step-output", tabindex: "0", "data-focus": "output", "aria-label": `Output of step ${step.id}` }, pretty(step.output)),
      step.error ? [h("h3", {}, "Error"), h("p", { class: "bad" }, h("strong", {}, step.error.kind), ": ", step.error.message)] : null,
    ));
  };

  /** What the plan version was expected to cost when it was proposed (its plan_forecast event). */
  const forecastLine = (f) => {
    const span = (r, fmt = (v) => v.toLocaleString()) => (r.low === r.high ? fmt(r.low) : `${fmt(r.low)}–${fmt(r.high)}`);
    let cost = span(f.cost, money);
    if (f.unpriced.length) cost = f.cost.high === 0 ? "cost unknown" : `at least ${cost}`;
    return h(
      "p",
      { class: "forecast", title: f.basis.join("\n") },
      h("strong", {}, "Forecast: "),
      `${cost} · model calls ${span(f.planner_calls)} planner, ${span(f.executor_calls)} executor · tool calls ${span(f.tool_calls)}`,
      ` · tokens ${span(f.input_tokens)} in, ${span(f.output_tokens)} out`,
      f.unpriced.length ? ` · no price for ${f.unpriced.join(", ")}` : "",
      f.over.length ? h("span", { class: "bad" }, ` · passes the ${f.over.join(", ")} cap`) : null,
    );
  };

  const renderPlans = (run) => {
    if (!changed(plans, `${run.plans.length} ${edits.length} ${run.plans.map((p) => (p.forecast ? 1 : 0)).join("")}`)) return;
    keepingFocus(plans, () => fill(
      plans,
      h("h2", { id: "plans-title" }, "Plan versions"),
      run.plans.length === 0 ? h("p", { class: "muted" }, "No plan yet.") : null,
      [...run.plans].reverse().map((plan, i) => {
        const previous = run.plans.find((p) => p.version === plan.version - 1) ?? run.plans[run.plans.indexOf(plan) - 1];
        const details = h(
          "details",
          { class: "plan-version", open: openPlans.get(plan.version) ?? i === 0, "data-version": plan.version },
          h(
            "summary",
            { "data-focus": `plan:${plan.version}` },
            h("strong", {}, `Version ${plan.version}`),
            ` by ${plan.author}`,
            plan.trigger ? h("span", { class: "muted" }, ` · ${plan.trigger}`) : null,
            plan.reason ? ` — ${clip(plan.reason, 100)}` : null,
          ),
          plan.reason ? h("p", { class: "reason" }, "Reason: ", plan.reason) : null,
          plan.forecast ? forecastLine(plan.forecast) : null,
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
        // a version a person opened or closed (a click, or Enter or Space on its summary) stays so
        // when the list is drawn again; the others show the latest version open
        details.querySelector("summary").addEventListener("click", () => openPlans.set(plan.version, !details.open));
        return details;
      }),
    ));
  };

  const renderUsage = (run) => {
    const u = run.usage ?? {};
    if (!changed(usage, JSON.stringify([u, run.cost]))) return;
    fill(
      usage,
      h("h2", { id: "usage-title" }, "Usage"),
      h(
        "dl",
        { class: "facts", id: "run-usage" },
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

  /** Fold the events received since the last frame, list them in the log, and draw the run. */
  function draw() {
    frame = 0;
    if (stopped) return;
    const rows = [];
    for (const message of queue.splice(0)) {
      fold.apply(message.event ?? {});
      noteEdits(message);
      rows.push(logRow(message));
    }
    if (rows.length) {
      logRows.append(...rows);
      logCount.textContent = `(${lastSeq} events)`;
    }
    // a run with a log is drawn from its events only (a run waiting for a worker has none yet)
    if (fold.events === 0 && !(accepted && accepted.events === 0)) return;
    const run = shown();
    renderHeader(run);
    renderQuestions();
    renderDag();
    renderStepsTable(run);
    renderPlans(run);
    renderUsage(run);
    renderStep();
  }
  const drawSoon = () => {
    if (!frame && !stopped) frame = requestAnimationFrame(draw);
  };

  function selectStep(id, record = null) {
    selected = { id, record: record?.superseded || (record && fold.plan && !fold.plan.steps.some((x) => x.id === id)) ? record : null };
    dag?.select(id);
    renderStep();
  }

  /** GET the run once: whether it exists, and what it is while no event is stored yet. */
  const load = async () => {
    try {
      accepted = await api(`/v1/runs/${encodeURIComponent(runId)}`);
      if (!stopped) drawSoon();
      return true;
    } catch (error) {
      if (error instanceof ApiError && error.status === 404 && misses < 6) {
        // a run just accepted may not be in the store for a moment: look again shortly
        misses += 1;
        await new Promise((resolve) => setTimeout(resolve, 300 * misses));
        return stopped ? false : load();
      }
      if (error instanceof ApiError && error.status === 404) {
        fill(main, h("h1", {}, "No such run"), h("p", {}, h("code", {}, runId), " is not in this server's store."), h("a", { href: "#/" }, "Back to runs"));
        stopped = true;
        stream?.close();
      } else if (!(error instanceof ApiError && error.status === 401)) {
        toast(`Could not load the run: ${error.message}`, "error");
      }
      return false;
    }
  };

  const logRow = ({ seq, kind, event }) =>
    h(
      "tr",
      { "data-seq": seq, "data-kind": kind },
      h("td", {}, String(seq)),
      h("td", {}, when(event?.at)),
      h("td", {}, h("code", {}, kind)),
      h("td", {}, event?.step_id ?? ""),
      h("td", {}, h("details", {}, h("summary", { "aria-label": `JSON of event ${seq}` }, "JSON"), h("pre", { class: "json" }, pretty(event)))),
      h("td", {}, h("button", { type: "button", class: "quiet", "aria-label": `Fork here, at event ${seq}`, onclick: () => fork(seq, kind) }, "Fork here")),
    );

  const noteEdits = ({ kind, event = {} }) => {
    if (kind === "approval_requested" && event.subject === "plan" && event.plan) {
      proposals.set(event.approval_id, { plan: event.plan, version: event.plan_version ?? event.plan.version });
    } else if (kind === "approval_decided" && event.edited_plan && proposals.has(event.approval_id)) {
      const asked = proposals.get(event.approval_id);
      edits.push({ version: event.edited_plan.version ?? asked.version, proposed: asked.plan, edited: event.edited_plan, by: event.by ?? "a human", reason: event.reason });
    }
  };

  const onEvent = (message) => {
    if (message.seq <= lastSeq) return; // a repeat after a reconnection
    lastSeq = message.seq;
    queue.push(message);
    drawSoon();
  };

  async function cancel() {
    const ok = await ask({ title: "Cancel this run?", body: [h("p", {}, "Running steps are cancelled; the run finishes as cancelled.")], confirm: "Cancel run", danger: true });
    if (!ok) return;
    try {
      await api(`/v1/runs/${encodeURIComponent(runId)}/cancel`, { method: "POST" });
      toast("Cancelling the run");
    } catch (error) {
      toast(`Could not cancel: ${error.message}`, "error");
    }
  }

  async function resume() {
    try {
      await api(`/v1/runs/${encodeURIComponent(runId)}/resume`, { method: "POST" });
      toast("Resumed");
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
      agents.map((a) => h("option", { value: a.name, selected: a.name === (fold.agent ?? accepted?.agent) }, a.name)),
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
      after: lastSeq,
      onEvent,
      onWaiting: () => {
        live.textContent = "waiting for an answer";
      },
      onEnd: () => {
        live.textContent = "finished";
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

  load().then((found) => {
    if (found && !stopped) follow();
  });
  return () => {
    stopped = true;
    cancelAnimationFrame(frame);
    stream?.close();
  };
}

/** One fact of a list of facts: its name and its value kept together on a line. */
function fact(name, value) {
  return h("div", { class: "fact" }, h("dt", {}, name), h("dd", {}, value));
}

/**
 * Run `redraw()`, which replaces what `section` holds; the control that had the focus in it (named
 * by its data-focus) has it again afterwards, so a person tabbing through the page is not thrown
 * out of it as the run goes on.
 */
function keepingFocus(section, redraw) {
  const active = document.activeElement;
  const name = section.contains(active) ? active.closest("[data-focus]")?.dataset.focus : null;
  redraw();
  if (name) [...section.querySelectorAll("[data-focus]")].find((e) => e.dataset.focus === name)?.focus({ preventScroll: true });
}

/** A status as words ("approval" is a step that needs one). */
function statusLabel(status) {
  return status === "approval" ? "needs approval" : status;
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
