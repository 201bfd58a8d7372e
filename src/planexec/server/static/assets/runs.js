// The runs list (newest first, refreshed every 2 s) and the form that starts a run.

import { api, ApiError } from "./api.js";
import { h, fill, clip, money, duration, when, runBadge, problemList, toast } from "./ui.js";

export function mountRuns(main) {
  let timer = null;
  let stopped = false;
  let older = []; // runs of pages loaded with "Older runs"
  let nextCursor = null;

  const status = h(
    "select",
    { id: "filter-status" },
    h("option", { value: "" }, "any"),
    ["running", "waiting", "finished"].map((v) => h("option", { value: v }, v)),
  );
  const agentFilter = h("select", { id: "filter-agent" }, h("option", { value: "" }, "any"));
  const rows = h("tbody");
  const more = h("button", { type: "button", hidden: true }, "Older runs");
  const table = h(
    "table",
    { class: "runs stack" },
    h("caption", { class: "visually-hidden" }, "Runs, newest first"),
    h(
      "thead",
      {},
      h("tr", {}, ["Run", "Status", "Agent", "Goal", "Steps", "Cost", "Duration", "Started"].map((c) => h("th", { scope: "col" }, c))),
    ),
    rows,
  );

  const agent = h("select", { id: "start-agent", name: "agent", required: true });
  const goal = h("textarea", { id: "start-goal", name: "goal", rows: 2, required: true, maxlength: 20000 });
  const constraints = h("textarea", { id: "start-constraints", name: "constraints", rows: 2 });
  const startFeedback = h("div", { class: "feedback" });
  const startButton = h("button", { type: "submit", class: "primary" }, "Start run");
  const form = h(
    "form",
    { class: "card start", "aria-labelledby": "start-title" },
    h("h2", { id: "start-title" }, "Start a run"),
    h("div", { class: "field" }, h("label", { for: agent.id }, "Agent"), agent),
    h("div", { class: "field wide" }, h("label", { for: goal.id }, "Goal"), goal),
    h(
      "div",
      { class: "field wide" },
      h("label", { for: constraints.id }, "Constraints ", h("span", { class: "muted" }, "(one a line, optional)")),
      constraints,
    ),
    h("div", { class: "actions" }, startButton),
    startFeedback,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    startButton.disabled = true;
    fill(startFeedback);
    try {
      const run = await api("/v1/runs", {
        method: "POST",
        body: {
          agent: agent.value,
          goal: goal.value,
          constraints: constraints.value
            .split("\n")
            .map((c) => c.trim())
            .filter(Boolean),
        },
      });
      toast(`Started ${run.run_id}`);
      location.hash = `#/runs/${encodeURIComponent(run.run_id)}`;
    } catch (error) {
      fill(startFeedback, problemList(error instanceof ApiError ? error : { message: String(error.message ?? error) }));
    } finally {
      startButton.disabled = false;
    }
  });
  // Ctrl+Enter (or Cmd+Enter) in the goal starts the run; Enter alone makes a new line
  goal.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
  });

  fill(
    main,
    h("h1", {}, "Runs"),
    form,
    h(
      "section",
      { "aria-labelledby": "runs-title" },
      h(
        "div",
        { class: "bar" },
        h("h2", { id: "runs-title" }, "Recent runs"),
        h("label", { for: status.id }, "Status"),
        status,
        h("label", { for: agentFilter.id }, "Agent"),
        agentFilter,
      ),
      h("div", { class: "table-scroll" }, table),
      more,
    ),
  );

  const row = (run) =>
    h(
      "tr",
      { "data-run": run.run_id, "data-status": run.status },
      h("td", { "data-label": "Run" }, h("a", { href: `#/runs/${encodeURIComponent(run.run_id)}`, title: run.run_id }, clip(run.run_id, 24))),
      h(
        "td",
        { "data-label": "Status" },
        runBadge(run),
        run.questions ? h("span", { class: "count", "aria-label": `${run.questions} waiting` }, ` ${run.questions} ?`) : null,
      ),
      h("td", { "data-label": "Agent" }, run.agent ?? "—"),
      h("td", { "data-label": "Goal", title: run.goal }, clip(run.goal, 70)),
      h(
        "td",
        { "data-label": "Steps" },
        run.steps ? `${run.steps.finished}/${run.steps.total}` : "—",
        run.steps?.failed ? h("span", { class: "bad" }, ` (${run.steps.failed} failed)`) : null,
      ),
      h("td", { "data-label": "Cost" }, money(run.cost)),
      h("td", { "data-label": "Duration" }, duration(run.duration)),
      h("td", { "data-label": "Started" }, when(run.started_at)),
    );

  const query = (cursor) => {
    const params = new URLSearchParams({ limit: "50" });
    if (status.value) params.set("status", status.value);
    if (agentFilter.value) params.set("agent", agentFilter.value);
    if (cursor) params.set("cursor", cursor);
    return `/v1/runs?${params}`;
  };

  const load = async () => {
    clearTimeout(timer);
    try {
      const page = await api(query(null));
      if (older.length === 0) nextCursor = page.next_cursor;
      const seen = new Set(page.runs.map((r) => r.run_id));
      const all = [...page.runs, ...older.filter((r) => !seen.has(r.run_id))];
      fill(rows, all.length ? all.map(row) : h("tr", {}, h("td", { colspan: 8, class: "empty" }, "No runs yet.")));
      more.hidden = !nextCursor;
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) toast(`Could not load the runs: ${error.message}`, "error");
    }
    if (!stopped) timer = setTimeout(load, 2000);
  };
  more.addEventListener("click", async () => {
    try {
      const page = await api(query(nextCursor));
      older = [...older, ...page.runs];
      nextCursor = page.next_cursor;
    } catch (error) {
      toast(`Could not load older runs: ${error.message}`, "error");
    }
    load();
  });
  for (const select of [status, agentFilter])
    select.addEventListener("change", () => {
      older = [];
      load();
    });

  api("/v1/agents")
    .then(({ agents }) => {
      fill(
        agent,
        agents.map((a) => h("option", { value: a.name }, a.approve_plan ? `${a.name} (plans approved by you)` : a.name)),
      );
      for (const a of agents) agentFilter.append(h("option", { value: a.name }, a.name));
      const offerExample = () => {
        goal.placeholder = agents.find((a) => a.name === agent.value)?.example ?? "";
      };
      agent.addEventListener("change", offerExample);
      offerExample();
      if (!agents.length) fill(startFeedback, h("p", {}, "This server has no agents."));
    })
    .catch((error) => {
      if (!(error instanceof ApiError && error.status === 401)) toast(`Could not load the agents: ${error.message}`, "error");
    });
  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
