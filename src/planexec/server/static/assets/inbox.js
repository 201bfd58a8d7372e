// The inbox: every question runs wait on, answered here with the checks the CLI makes (the server
// makes them, and lists every problem). A plan can be approved as it is, rejected, or edited.

import { api, ApiError } from "./api.js";
import { h, fill, pretty, when, problemList, toast } from "./ui.js";

const TITLES = {
  plan: "Approve the plan",
  step: "Approve a step",
  effect: "An effect may or may not have happened",
  question: "The planner asks",
  escalation: "The planner is stuck",
  review: "Review a step's result",
  answer: "Review the answer",
};

/** A key telling whether the set of questions changed (so a card being edited is not redrawn). */
export function questionsKey(questions) {
  return questions.map((q) => `${q.run_id}/${q.question_id}`).join(" ");
}

/** A card for question `q`; `onAnswered(result)` is called after the server took the answer. */
export function questionCard(q, { showRun = true, onAnswered = () => {} } = {}) {
  const id = `q-${q.run_id}-${q.question_id}`.replace(/[^A-Za-z0-9_-]/g, "_");
  const feedback = h("div", { class: "feedback" });
  const note = h("input", { type: "text", id: `${id}-text`, name: "text", autocomplete: "off" });
  const parts = [];
  let editor = null;
  let choice = null;
  const checks = [];

  parts.push(
    h(
      "dl",
      { class: "facts" },
      showRun ? [h("dt", {}, "Run"), h("dd", {}, h("a", { href: `#/runs/${encodeURIComponent(q.run_id)}` }, q.run_id))] : null,
      q.step_id ? [h("dt", {}, "Step"), h("dd", {}, h("code", {}, q.step_id))] : null,
      q.plan_version ? [h("dt", {}, "Plan version"), h("dd", {}, String(q.plan_version))] : null,
      [h("dt", {}, "Asked"), h("dd", {}, when(q.asked_at))],
    ),
  );
  if (q.about) parts.push(h("p", { class: "about" }, q.about));
  if (q.reason && q.reason !== q.about) parts.push(h("p", { class: "reason" }, q.reason));
  if (q.output !== undefined && q.output !== null) parts.push(h("h4", {}, "Output"), h("pre", { class: "json" }, pretty(q.output)));

  if (q.subject === "plan" && q.plan) {
    parts.push(
      h(
        "ol",
        { class: "plan-steps" },
        q.plan.steps.map((step) =>
          h(
            "li",
            {},
            h("code", {}, step.id),
            ` ${step.description ?? ""}`,
            step.tool ? h("span", { class: "muted" }, ` · ${step.tool}`) : null,
            step.depends_on?.length ? h("span", { class: "muted" }, ` · after ${step.depends_on.join(", ")}`) : null,
          ),
        ),
      ),
    );
    const textarea = h("textarea", {
      id: `${id}-plan`,
      rows: Math.min(24, 4 + q.plan.steps.length * 9),
      spellcheck: "false",
      class: "json",
      "aria-describedby": `${id}-plan-help`,
    });
    textarea.value = JSON.stringify(q.plan.steps, null, 2);
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

  const asks = q.subject === "question" || q.subject === "escalation";
  parts.push(h("label", { for: note.id }, asks ? "Your answer" : "Note (optional)"), note);

  const buttons = [];
  const send = async (decision, button) => {
    const body = { decision };
    if (note.value.trim()) body.text = note.value.trim();
    if (choice) body.choice = choice.querySelector("input:checked")?.value;
    if (checks.length) body.checklist = checks.map(({ box, remark }) => ({ passed: box.checked, note: remark.value }));
    if (decision === "approve" && editor?.open) {
      let steps;
      try {
        steps = JSON.parse(editor.textarea.value);
      } catch (error) {
        fill(feedback, problemList({ message: "The edited plan is not JSON.", problems: [{ where: "plan", message: error.message }] }));
        editor.textarea.focus();
        return;
      }
      body.plan = { ...q.plan, steps };
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
    q.subject === "question"
      ? [button("Answer", "answer", "primary")]
      : q.subject === "escalation"
        ? [button("Answer", "answer", "primary"), button("Reject", "reject", "danger")]
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
    { class: ["card", "question", `subject-${q.subject}`], "aria-labelledby": `${id}-title`, "data-question": q.question_id },
    h("h3", { id: `${id}-title` }, TITLES[q.subject] ?? q.subject),
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
