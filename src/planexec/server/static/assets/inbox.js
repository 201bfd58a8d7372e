// The inbox: every question runs wait on, answered here with the checks the CLI makes (the server
// makes them, and lists every problem). A plan can be approved as it is, rejected, or edited.

import { api, ApiError } from "./api.js";
import { drawDag } from "./dag.js";
import { h, fill, pretty, when, money, problemList, toast } from "./ui.js";

/** A key telling whether the set of questions changed (so a card being edited is not redrawn). */
export function questionsKey(questions) {
  return questions.map((q) => `${q.run_id}/${q.question_id}`).join(" ");
}

/** "1 step", "2 steps". */
function counted(n, noun) {
  return `${n.toLocaleString()} ${noun}${n === 1 ? "" : "s"}`;
}

/** Where a value comes from and whether the run trusts it: a badge and the sources in words. */
function provenanceBadge(p) {
  if (!p) return "—";
  const untrusted = !p.trusted;
  const word = p.confirmed_by ? `confirmed by ${p.confirmed_by}` : untrusted ? "untrusted" : "trusted";
  const sources = (untrusted || p.confirmed_by ? p.sources.filter((s) => !s.trusted) : p.sources).map((s) => s.text);
  return h(
    "span",
    { class: "provenance", "data-trusted": String(p.trusted) },
    h("span", { class: ["badge", untrusted ? "tone-bad" : "tone-off"] }, word),
    sources.length ? h("span", { class: "muted" }, ` ${sources.join(", ")}`) : null,
  );
}

/** An argument's value as one line, with where it comes from and whether the run trusts it. */
function argumentRows(args) {
  return args.map((a) =>
    h(
      "tr",
      { "data-argument": a.name },
      h("th", { scope: "row" }, h("code", {}, a.name)),
      h("td", { "data-label": "Value as sent" }, h("code", { class: "value" }, a.text), a.cut ? h("span", { class: "muted" }, ` (${a.size.toLocaleString()} characters, cut)`) : null),
      h("td", { "data-label": "From" }, a.binding ? h("code", {}, a.binding) : "—", a.binding && !a.resolved ? h("span", { class: "muted" }, " (not run yet)") : null),
      h("td", { "data-label": "Trust" }, provenanceBadge(a.provenance)),
    ),
  );
}

function argumentsTable(args, caption) {
  if (!args.length) return h("p", { class: "muted" }, "No arguments.");
  return h(
    "div",
    { class: "table-scroll" },
    h(
      "table",
      { class: ["arguments", "stack"] },
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, ["Argument", "Value as sent", "From", "Trust"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, argumentRows(args)),
    ),
  );
}

/** The trust rules a call breaks: for each argument, what the rule requires and why it fails. */
function violationsList(violations) {
  if (!violations?.length) return null;
  return h(
    "ul",
    { class: "violations" },
    violations.map((v) =>
      h(
        "li",
        { "data-argument": v.argument, "data-rule": v.rule },
        h("strong", {}, v.argument === "*" ? "The call" : h("code", {}, v.argument)),
        v.rule === "argument_rule" ? ` breaks the rule “${v.requires}”: ` : " is untrusted: ",
        v.reason,
      ),
    ),
  );
}

function effectBadge(effect) {
  return h("span", { class: ["badge", effect.changes_world ? "tone-bad" : "tone-off"], "data-effect": effect.label }, effect.label);
}

/** A step as a human decides about it: what it does, where it runs, its effect, its arguments. */
function stepFacts(step) {
  return [
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Step"),
      h("dd", {}, h("code", {}, step.id), ` ${step.description}`, step.change && step.change !== "kept" ? h("span", { class: "badge tone-waiting change" }, ` ${step.change}`) : null),
      h("dt", {}, "Runs on"),
      h("dd", {}, step.runs_on),
      h("dt", {}, "Effect"),
      h("dd", {}, effectBadge(step.effect)),
      step.depends_on.length ? [h("dt", {}, "After"), h("dd", {}, step.depends_on.join(", "))] : null,
      step.idempotency_key ? [h("dt", {}, "Idempotency key"), h("dd", {}, h("code", {}, step.idempotency_key))] : null,
      step.tainted ? [h("dt", {}, "Written"), h("dd", { class: "tainted" }, h("span", { class: "badge tone-bad" }, "untrusted"), " by the planner after it read untrusted text")] : null,
    ),
    argumentsTable(step.arguments, `Arguments of step ${step.id}`),
  ];
}

/** A plan put to a human: its changes, its forecast, its graph and every step. */
function planSection(plan, id) {
  const rows = plan.steps.map((step, i) =>
    h(
      "tr",
      { "data-step": step.id, class: step.change === "added" || step.change === "changed" ? "changed" : null },
      h("td", { "data-label": "#" }, String(i + 1)),
      h("td", { "data-label": "Step" }, h("code", {}, step.id), h("div", { class: "muted" }, step.description)),
      h("td", { "data-label": "Runs on" }, step.runs_on),
      h("td", { "data-label": "After" }, step.depends_on.join(", ") || "—"),
      h("td", { "data-label": "Effect" }, effectBadge(step.effect)),
      h("td", { "data-label": "Arguments" }, step.arguments.length ? h("ul", { class: "plain" }, step.arguments.map((a) => h("li", {}, h("code", {}, a.name), " = ", h("code", {}, a.text), a.resolved ? null : h("span", { class: "muted" }, " (not run yet)")))) : "—"),
      h("td", { "data-label": "Change" }, step.change ?? "—", step.changed_fields.length ? h("div", { class: "muted" }, step.changed_fields.join(", ")) : null),
    ),
  );
  const changeOf = (sid) => plan.steps.find((x) => x.id === sid)?.change;
  const dag = drawDag(plan.steps, {
    markOf: (sid) => (["added", "changed"].includes(changeOf(sid)) ? changeOf(sid) : null),
    label: `Plan version ${plan.version}`,
  });
  return [
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Plan"),
      h("dd", {}, `version ${plan.version} by ${plan.author}`, plan.reason ? ` — ${plan.reason}` : ""),
      h("dt", {}, "Changes"),
      h("dd", { class: "changes" }, plan.changes.summary),
      h("dt", {}, "Forecast"),
      h("dd", { class: "forecast" }, plan.forecast ? plan.forecast.summary : "none made"),
      plan.world_changing.length ? [h("dt", {}, "Change the world"), h("dd", {}, plan.world_changing.join(", "))] : null,
    ),
    h("div", { class: "question-dag" }, dag.element),
    h(
      "div",
      { class: "table-scroll" },
      h(
        "table",
        { class: ["plan-steps", "stack"], id: `${id}-steps` },
        h("caption", { class: "visually-hidden" }, `Steps of plan version ${plan.version}`),
        h("thead", {}, h("tr", {}, ["#", "Step", "Runs on", "After", "Effect", "Arguments", "Change"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, rows),
      ),
    ),
    plan.changes.removed.length
      ? h("p", { class: "removed" }, "Removed: ", plan.changes.removed.map((st) => `${st.id} (${st.runs_on})`).join(", "))
      : null,
    plan.changes.changed.length
      ? h(
          "ul",
          { class: "field-changes" },
          plan.changes.changed.map((c) => h("li", {}, h("code", {}, `${c.step_id}.${c.field}`), ": ", h("code", {}, pretty(c.before)), " → ", h("code", {}, pretty(c.after)))),
        )
      : null,
  ];
}

function budgetSection(b, id) {
  const inputs = Object.entries(b.caps).map(([name, cap]) => {
    const input = h("input", {
      type: "number",
      min: "0",
      step: "any",
      id: `${id}-cap-${name}`,
      name,
      value: name === b.name ? String(Math.max(b.limit * 2, b.used + b.needed) || "") : cap === null ? "" : String(cap),
      placeholder: "no cap",
    });
    input.dataset.current = cap === null ? "" : String(cap);
    return { name, input };
  });
  const spent = b.spent;
  return {
    inputs,
    parts: [
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "Cap reached"),
        h("dd", {}, `${b.name}: ${b.used} used of ${b.limit}`),
        h("dt", {}, "Spent"),
        h("dd", {}, `${money(spent.cost)} · ${counted(spent.model_calls, "model call")} · ${counted(spent.tool_calls, "tool call")} · ${counted(spent.steps, "step")}`),
        Object.keys(spent.by_role).length ? [h("dt", {}, "By role"), h("dd", {}, Object.entries(spent.by_role).map(([k, v]) => `${k} ${money(v)}`).join(", "))] : null,
        Object.keys(spent.by_tool).length ? [h("dt", {}, "By tool"), h("dd", {}, Object.entries(spent.by_tool).map(([k, v]) => `${k} ×${v}`).join(", "))] : null,
        h("dt", {}, "The rest"),
        h("dd", {}, b.rest ? b.rest.summary : "no forecast"),
      ),
      h(
        "fieldset",
        { class: "caps" },
        h("legend", {}, "New caps (empty: no cap)"),
        inputs.map(({ name, input }) => h("div", { class: "field" }, h("label", { for: input.id }, name.replaceAll("_", " ")), input)),
      ),
    ],
  };
}

/** A card for question `q` (its view); `onAnswered(result)` is called after the server took the answer. */
export function questionCard(q, { showRun = true, onAnswered = () => {} } = {}) {
  const id = `q-${q.run_id}-${q.question_id}`.replace(/[^A-Za-z0-9_-]/g, "_");
  const feedback = h("div", { class: "feedback" });
  const note = h("input", { type: "text", id: `${id}-text`, name: "text", autocomplete: "off" });
  const parts = [];
  let editor = null;
  let choice = null;
  let caps = null;
  const checks = [];

  parts.push(
    h(
      "dl",
      { class: "facts" },
      showRun ? [h("dt", {}, "Run"), h("dd", {}, h("a", { href: `#/runs/${encodeURIComponent(q.run_id)}` }, q.run_id))] : null,
      h("dt", {}, "Goal"),
      h("dd", { class: "goal" }, q.goal),
      q.constraints.length ? [h("dt", {}, "Constraints"), h("dd", {}, q.constraints.join("; "))] : null,
      h("dt", {}, "Why asked"),
      h("dd", { class: "why" }, q.why, " ", h("code", { class: "muted rule" }, q.rule)),
      q.reason && ["question", "escalation", "effect"].includes(q.kind) && !q.why.includes(q.reason)
        ? [h("dt", {}, q.kind === "question" ? "Question" : "Detail"), h("dd", { class: "reason" }, q.reason)]
        : null,
      h("dt", {}, "Asked at"),
      h("dd", {}, when(q.asked_at)),
    ),
  );
  if (q.step) parts.push(stepFacts(q.step));
  if (q.violations?.length) parts.push(h("h4", {}, "Trust rules"), violationsList(q.violations));
  if (q.plan) parts.push(planSection(q.plan, id));
  if (q.under_review !== undefined && q.under_review !== null) {
    parts.push(h("h4", {}, q.kind === "answer" ? "The answer" : "The result"), h("pre", { class: "json under-review" }, pretty(q.under_review)));
  }
  if (q.failed_checks.length) {
    parts.push(h("ul", { class: "failed-checks" }, q.failed_checks.map((c) => h("li", {}, h("strong", {}, c.name), `: ${c.detail}`))));
  }
  if (q.budget) {
    const section = budgetSection(q.budget, id);
    caps = section.inputs;
    parts.push(section.parts);
  }

  if (q.kind === "plan" && q.plan) {
    const textarea = h("textarea", {
      id: `${id}-plan`,
      rows: Math.min(24, 4 + q.plan.steps.length * 9),
      spellcheck: "false",
      class: "json",
      "aria-describedby": `${id}-plan-help`,
    });
    textarea.value = JSON.stringify(q.plan.as_written.steps, null, 2);
    editor = h(
      "details",
      { class: "editor" },
      h("summary", {}, "Edit the plan"),
      h("label", { for: textarea.id }, "The plan's steps, as JSON"),
      h("p", { id: `${id}-plan-help`, class: "muted" }, "Remove, add or change steps; the plan is checked when you approve it."),
      textarea,
    );
    editor.textarea = textarea;
    parts.push(editor);
  }

  if (q.choices?.length) {
    choice = h(
      "fieldset",
      { class: "choices" },
      h("legend", {}, "What to do"),
      q.choices.map((c, i) =>
        h("label", {}, h("input", { type: "radio", name: `${id}-choice`, value: c, checked: i === 0 }), ` ${c}`),
      ),
    );
    parts.push(choice);
  }

  let output = null;
  if (q.kind === "effect") {
    output = h("input", { type: "text", id: `${id}-output`, name: "output", autocomplete: "off", spellcheck: "false", "aria-describedby": `${id}-output-help` });
    parts.push(
      h("div", { class: "field" }, h("label", { for: output.id }, "The step's output, when marked done (JSON)"), output),
      h("p", { id: `${id}-output-help`, class: "muted" }, 'For example "sent" or {"id": 42}; empty for none.'),
    );
  }

  if (q.checklist?.length) {
    parts.push(
      h(
        "fieldset",
        { class: "checklist" },
        h("legend", {}, "Checklist"),
        q.checklist.map((item, i) => {
          const box = h("input", { type: "checkbox", id: `${id}-check-${i}` });
          const remark = h("input", { type: "text", "aria-label": `Note on: ${item}`, placeholder: "note" });
          checks.push({ box, remark });
          return h("div", { class: "check" }, box, h("label", { for: box.id }, ` ${item}`), remark);
        }),
      ),
    );
  }

  parts.push(
    h("h4", {}, "What each answer does"),
    h(
      "dl",
      { class: "facts answers" },
      q.answers.map((a) => [h("dt", {}, a.label), h("dd", {}, a.does)]),
    ),
  );

  const asks = q.kind === "question" || q.kind === "escalation";
  parts.push(h("label", { for: note.id }, asks ? "Your answer" : "Note (optional)"), note);

  const buttons = [];
  const send = async (decision, button) => {
    const body = { decision };
    if (note.value.trim()) body.text = note.value.trim();
    if (choice) body.choice = choice.querySelector("input:checked")?.value;
    if (output && body.choice === "done" && output.value.trim()) {
      try {
        body.output = JSON.parse(output.value);
      } catch (error) {
        fill(feedback, problemList({ message: "The output is not JSON.", problems: [{ where: "output", message: error.message }] }));
        output.focus();
        return;
      }
    }
    if (checks.length) body.checklist = checks.map(({ box, remark }) => ({ passed: box.checked, note: remark.value }));
    if (caps && decision === "approve") {
      const wrong = caps.filter(({ input }) => input.validity.badInput || (input.value.trim() !== "" && !Number.isFinite(Number(input.value))));
      if (wrong.length) {
        fill(feedback, problemList({ message: "A cap is not a number.", problems: wrong.map(({ name }) => ({ where: name, message: "give a number, or leave it empty for no cap" })) }));
        wrong[0].input.focus();
        return;
      }
      body.budget = Object.fromEntries(caps.map(({ name, input }) => [name, input.value.trim() === "" ? null : Number(input.value)]));
    }
    if (decision === "approve" && editor?.open) {
      let steps;
      try {
        steps = JSON.parse(editor.textarea.value);
      } catch (error) {
        fill(feedback, problemList({ message: "The edited plan is not JSON.", problems: [{ where: "plan", message: error.message }] }));
        editor.textarea.focus();
        return;
      }
      body.plan = { ...q.plan.as_written, steps };
    }
    for (const b of buttons) b.disabled = true;
    fill(feedback, h("p", { class: "muted" }, "Sending…"));
    try {
      const result = await api(
        `/v1/runs/${encodeURIComponent(q.run_id)}/questions/${encodeURIComponent(q.question_id)}/answer`,
        { method: "POST", body },
      );
      fill(feedback, h("p", { class: "ok" }, result.resumed ? "Answered; the run goes on." : "Answered."));
      toast(`${button.textContent}: ${q.run_id}`);
      onAnswered(result);
    } catch (error) {
      for (const b of buttons) b.disabled = false;
      fill(feedback, problemList(error instanceof ApiError ? error : { message: String(error.message ?? error) }));
    }
  };
  const button = (label, decision, kind) => {
    const b = h("button", { type: "button", class: kind, onclick: () => send(decision, b) }, label);
    buttons.push(b);
    return b;
  };
  const actions =
    q.kind === "question"
      ? [button("Answer", "answer", "primary")]
      : q.kind === "escalation"
        ? [button("Answer", "answer", "primary"), button("Reject", "reject", "danger")]
        : q.kind === "budget"
          ? [button("Raise and go on", "approve", "primary"), button("Stop the run", "reject", "danger")]
          : [button("Approve", "approve", "primary"), button("Reject", "reject", "danger")];
  if (editor) {
    const approve = actions[0];
    editor.addEventListener("toggle", () => {
      approve.textContent = editor.open ? "Approve edited plan" : "Approve";
    });
  }
  note.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      actions[0].click();
    }
  });

  return h(
    "section",
    { class: ["card", "question", `subject-${q.kind}`], "aria-labelledby": `${id}-title`, "data-question": q.question_id, "data-kind": q.kind },
    h("h3", { id: `${id}-title` }, q.title),
    parts,
    h("div", { class: "actions" }, actions),
    feedback,
  );
}

/** The inbox view: questions across runs, polled every 2 s (redrawn only when they change). */
export function mountInbox(main, { setInboxCount }) {
  let timer = null;
  let stopped = false;
  let key = null;
  const list = h("div", { class: "questions" });
  fill(main, h("h1", {}, "Inbox"), h("p", { class: "muted" }, "Questions runs are waiting on, oldest first."), list);

  const schedule = (ms) => {
    clearTimeout(timer);
    if (!stopped) timer = setTimeout(load, ms);
  };
  const load = async () => {
    try {
      const { questions } = await api("/v1/inbox");
      setInboxCount(questions.length);
      const now = questionsKey(questions);
      if (now !== key) {
        key = now;
        fill(
          list,
          questions.length
            ? questions.map((q) => questionCard(q, { onAnswered: () => schedule(0) }))
            : h("p", { class: "empty" }, "Nothing is waiting for you."),
        );
      }
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) toast(`Could not load the inbox: ${error.message}`, "error");
    }
    schedule(2000);
  };
  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
