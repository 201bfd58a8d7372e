// The plan as a DAG in SVG: steps in columns by dependency depth (a step stands one column right
// of its deepest dependency), arrows from each dependency, nodes coloured by status with the
// status also written in the node, and a legend.

import { h, s, clip } from "./ui.js";

export const STATUSES = [
  ["pending", "pending"],
  ["approval", "needs approval"],
  ["running", "running"],
  ["held", "held"],
  ["succeeded", "succeeded"],
  ["failed", "failed"],
  ["cancelled", "cancelled"],
  ["dropped", "dropped"],
];
const LABELS = Object.fromEntries(STATUSES);

const NODE_W = 180;
const NODE_H = 54;
const GAP_X = 64;
const GAP_Y = 18;
const PAD = 12;

/** Each step's column: 0 without dependencies, else one more than its deepest dependency. */
export function depths(steps) {
  const byId = new Map(steps.map((step) => [step.id, step]));
  const depth = new Map();
  const visiting = new Set();
  const of = (id) => {
    if (depth.has(id)) return depth.get(id);
    if (visiting.has(id)) return 0; // a cycle cannot be in a checked plan; draw it flat rather than loop
    visiting.add(id);
    const deps = (byId.get(id)?.depends_on ?? []).filter((d) => byId.has(d));
    const d = deps.length ? 1 + Math.max(...deps.map(of)) : 0;
    visiting.delete(id);
    depth.set(id, d);
    return d;
  };
  for (const step of steps) of(step.id);
  return depth;
}

/** The status a node shows: a pending step a question waits on needs approval. */
export function shownStatus(status, waitingOn) {
  return (status === "pending" || status === "held") && waitingOn ? "approval" : status;
}

/**
 * Draw `steps` (each {id, description, tool, depends_on}) with `statusOf(id)`; `onSelect(id)`
 * is called when a node is clicked or chosen with Enter or Space. Returns {element, update(id, status), select(id)}.
 */
export function drawDag(steps, { statusOf, onSelect, selected = null }) {
  const depth = depths(steps);
  const columns = [];
  for (const step of steps) (columns[depth.get(step.id)] ??= []).push(step);
  const position = new Map();
  columns.forEach((column, c) =>
    column.forEach((step, r) =>
      position.set(step.id, { x: PAD + c * (NODE_W + GAP_X), y: PAD + r * (NODE_H + GAP_Y) }),
    ),
  );
  const width = PAD * 2 + Math.max(1, columns.length) * NODE_W + Math.max(0, columns.length - 1) * GAP_X;
  const rows = Math.max(1, ...columns.map((column) => column?.length ?? 0));
  const height = PAD * 2 + rows * NODE_H + (rows - 1) * GAP_Y;

  const svg = s("svg", {
    class: "dag",
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: "group",
    "aria-label": `Plan graph: ${steps.length} steps`,
  });
  svg.append(
    s(
      "defs",
      {},
      s(
        "marker",
        { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
        s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }),
      ),
    ),
  );
  const edges = s("g", { class: "edges", "aria-hidden": "true" });
  for (const step of steps) {
    const to = position.get(step.id);
    for (const dep of step.depends_on ?? []) {
      const from = position.get(dep);
      if (!from) continue;
      const x1 = from.x + NODE_W;
      const y1 = from.y + NODE_H / 2;
      const x2 = to.x - 2;
      const y2 = to.y + NODE_H / 2;
      const mid = (x1 + x2) / 2;
      edges.append(s("path", { d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`, "marker-end": "url(#arrow)" }));
    }
  }
  svg.append(edges);

  const nodes = new Map();
  for (const step of steps) {
    const { x, y } = position.get(step.id);
    const status = statusOf(step.id);
    const statusText = s("text", { x: 10, y: 40, class: "node-status" }, LABELS[status] ?? status);
    const node = s(
      "g",
      {
        class: ["node", `status-${status}`, step.id === selected && "selected"],
        transform: `translate(${x} ${y})`,
        tabindex: 0,
        role: "button",
        "data-step": step.id,
        "data-status": status,
        "aria-label": `Step ${step.id}: ${LABELS[status] ?? status}`,
      },
      s("title", {}, `${step.id}: ${step.description ?? ""}`),
      s("rect", { width: NODE_W, height: NODE_H, rx: 6 }),
      s("text", { x: 10, y: 20, class: "node-id" }, clip(step.id, 22)),
      s("text", { x: NODE_W - 8, y: 20, class: "node-tool", "text-anchor": "end" }, clip(step.tool ?? "model", 12)),
      statusText,
    );
    const choose = () => onSelect?.(step.id);
    node.addEventListener("click", choose);
    node.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        choose();
      }
    });
    nodes.set(step.id, { node, statusText });
    svg.append(node);
  }

  const legend = h(
    "ul",
    { class: "legend", "aria-label": "Step colours" },
    STATUSES.map(([key, label]) => h("li", {}, h("span", { class: ["swatch", `status-${key}`], "aria-hidden": "true" }), label)),
  );

  return {
    element: h("div", { class: "dag-box" }, h("div", { class: "dag-scroll" }, svg), legend),
    /** Show `status` on the node of step `id` (when it is in this plan). */
    update(id, status) {
      const entry = nodes.get(id);
      if (!entry || entry.node.dataset.status === status) return;
      entry.node.classList.remove(`status-${entry.node.dataset.status}`);
      entry.node.classList.add(`status-${status}`);
      entry.node.dataset.status = status;
      entry.node.setAttribute("aria-label", `Step ${id}: ${LABELS[status] ?? status}`);
      entry.statusText.textContent = LABELS[status] ?? status;
    },
    select(id) {
      for (const [key, entry] of nodes) entry.node.classList.toggle("selected", key === id);
    },
    focus(id) {
      nodes.get(id)?.node.focus();
    },
  };
}
