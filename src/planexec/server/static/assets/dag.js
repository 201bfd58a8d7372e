// A plan as a graph in SVG, laid out by dagre (vendored: assets/vendor/dagre.esm.js, MIT, see
// vendor/dagre.LICENSE.txt). Each node is as wide as its text needs (up to a limit): the step id on
// the first line, its tool on the second, its status (and, when asked, whether the step is new or
// changed) on the third; text too long for the widest node is cut with "…" and given whole in the
// node's tooltip and accessible name. Nothing is scaled down: a plan wider or taller than its box
// scrolls, and says so. The nodes are one keyboard stop: Tab reaches the graph, the arrow keys move
// from step to step along the arrows, Enter or Space chooses one.

import dagre from "./vendor/dagre.esm.js";
import { h, s } from "./ui.js";

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
export const MARKS = { added: "new", changed: "changed", removed: "removed" };

const PAD_X = 10;
const PAD_Y = 8;
const LINE = [18, 16, 16]; // the height of each line: id, tool, status
const MIN_W = 96;
const MAX_W = 240;
const NODE_SEP = 14;
const RANK_SEP = 44;
const MARGIN = 10;

/** The status a node shows: a pending step a question waits on needs approval. */
export function shownStatus(status, waitingOn) {
  return (status === "pending" || status === "held") && waitingOn ? "approval" : status;
}

/** What a step's second line says it runs. */
function runsWith(step) {
  if (step.tool) return step.tool;
  return step.executor ? `model · ${step.executor}` : "model";
}

/** The third line: the status, then the mark. */
function thirdLine(status, mark) {
  return [status ? LABELS[status] ?? status : null, mark ? MARKS[mark] ?? mark : null].filter(Boolean).join(" · ");
}

/**
 * Measure text as the page draws it: a hidden SVG in the document with the node's classes, so the
 * style sheet's fonts apply. Returns {width(cls, text), fit(cls, text, max)} and must be closed.
 */
function measurer() {
  const svg = s("svg", { class: "dag dag-measure", width: 0, height: 0, "aria-hidden": "true" });
  const group = s("g", { class: "node" });
  svg.append(group);
  document.body.append(svg);
  const texts = new Map();
  const textOf = (cls) => {
    if (!texts.has(cls)) {
      const t = s("text", { class: cls });
      group.append(t);
      texts.set(cls, t);
    }
    return texts.get(cls);
  };
  const width = (cls, text) => {
    const t = textOf(cls);
    t.textContent = text;
    return text ? t.getComputedTextLength() : 0;
  };
  return {
    width,
    /** `text`, or its longest start that fits in `max` pixels followed by "…". */
    fit(cls, text, max) {
      if (width(cls, text) <= max) return text;
      const chars = [...text];
      let lo = 0;
      let hi = chars.length;
      while (lo < hi) {
        const mid = Math.ceil((lo + hi) / 2);
        if (width(cls, `${chars.slice(0, mid).join("")}…`) <= max) lo = mid;
        else hi = mid - 1;
      }
      // end at a word (after _ - . : or a space) when one ends in the last third of what fits
      let cut = lo;
      for (let i = lo; i > (lo * 2) / 3; i--) {
        if ("_-.: ".includes(chars[i - 1])) {
          cut = i - 1;
          break;
        }
      }
      return `${chars.slice(0, Math.max(1, cut)).join("")}…`;
    },
    close() {
      svg.remove();
    },
  };
}

/** An SVG path through dagre's edge points, rounded at the bends. */
function edgePath(points) {
  if (points.length < 2) return "";
  const f = (n) => Math.round(n * 10) / 10;
  let d = `M ${f(points[0].x)} ${f(points[0].y)}`;
  for (let i = 1; i < points.length - 1; i++) {
    const p = points[i];
    const next = points[i + 1];
    d += ` Q ${f(p.x)} ${f(p.y)} ${f((p.x + next.x) / 2)} ${f((p.y + next.y) / 2)}`;
  }
  const last = points[points.length - 1];
  return `${d} L ${f(last.x)} ${f(last.y)}`;
}

/**
 * Draw `steps` (each {id, description, tool, executor, depends_on}).
 *
 * Options: `statusOf(id)` gives each step's status (leave it out to draw a plan without statuses,
 * as a question shows one); `markOf(id)` marks a step "added" or "changed" (a plan's diff);
 * `onSelect(id)` is called when a node is clicked or chosen with Enter or Space; `selected` is the
 * step chosen first; `label` names the graph for assistive technology.
 *
 * Returns {element, update(id, status), select(id), focus(id)}. The element must be in the
 * document when drawDag is called (the text is measured there); it checks whether it overflows its
 * box when it is added, and again as its box is resized or scrolled.
 */
export function drawDag(steps, { statusOf = null, markOf = null, onSelect = null, selected = null, label = "Plan" } = {}) {
  const unique = [];
  const seen = new Set();
  for (const step of steps) {
    if (!seen.has(step.id)) {
      seen.add(step.id);
      unique.push(step);
    }
  }
  const lines = statusOf || (markOf && unique.some((step) => markOf(step.id))) ? 3 : 2;
  const height = PAD_Y * 2 + LINE.slice(0, lines).reduce((a, b) => a + b, 0);
  const measure = measurer();
  const textMax = MAX_W - PAD_X * 2;
  // every node can show its longest status (it changes as the run goes) without growing
  let floor = MIN_W;
  if (statusOf) {
    const longest = Math.max(...STATUSES.map(([, text]) => measure.width("node-status", `${text} · ${MARKS.changed}`)));
    floor = Math.max(floor, Math.min(MAX_W, longest + PAD_X * 2));
  }
  const shapes = new Map();
  for (const step of unique) {
    const tool = runsWith(step);
    const mark = markOf?.(step.id) ?? null;
    const third = thirdLine(statusOf?.(step.id), mark);
    const widest = Math.max(
      measure.width("node-id", step.id),
      measure.width("node-tool", tool),
      lines === 3 ? measure.width("node-status", third) : 0,
    );
    const width = Math.ceil(Math.min(MAX_W, Math.max(floor, widest + PAD_X * 2)));
    shapes.set(step.id, {
      width,
      height,
      id: measure.fit("node-id", step.id, textMax),
      tool: measure.fit("node-tool", tool, textMax),
      fullTool: tool,
      mark,
    });
  }

  const graph = new dagre.graphlib.Graph();
  graph.setGraph({ rankdir: "LR", nodesep: NODE_SEP, ranksep: RANK_SEP, marginx: MARGIN, marginy: MARGIN });
  graph.setDefaultEdgeLabel(() => ({}));
  for (const step of unique) graph.setNode(step.id, { width: shapes.get(step.id).width, height });
  for (const step of unique)
    for (const dep of step.depends_on ?? []) if (seen.has(dep) && dep !== step.id) graph.setEdge(dep, step.id);
  dagre.layout(graph);
  const size = graph.graph();
  const width = Math.ceil(Math.max(size.width ?? 0, MIN_W + MARGIN * 2));
  const tall = Math.ceil(Math.max(size.height ?? 0, height + MARGIN * 2));

  const helpId = `dag-help-${Math.random().toString(36).slice(2, 9)}`;
  const svg = s("svg", {
    class: "dag",
    width,
    height: tall,
    viewBox: `0 0 ${width} ${tall}`,
    role: "group",
    "aria-label": `${label}: ${unique.length} ${unique.length === 1 ? "step" : "steps"}`,
    "aria-describedby": helpId,
  });
  const arrowId = `${helpId}-arrow`;
  svg.append(
    s(
      "defs",
      {},
      s(
        "marker",
        { id: arrowId, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
        s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }),
      ),
    ),
  );
  const edges = s("g", { class: "edges", "aria-hidden": "true" });
  for (const e of graph.edges()) {
    const points = graph.edge(e)?.points ?? [];
    edges.append(s("path", { d: edgePath(points), "marker-end": `url(#${arrowId})`, "data-from": e.v, "data-to": e.w }));
  }
  svg.append(edges);

  const nodes = new Map();
  const order = [];
  // a node's name is what it shows (so a person speaking to the page can say what they see); a
  // label cut short is whole in the node's description (its <title>)
  const accessibleName = (shape, status) =>
    [`Step ${shape.id}`, shape.tool, status ? LABELS[status] ?? status : null, shape.mark ? MARKS[shape.mark] : null]
      .filter(Boolean)
      .join(", ");
  const firstFocus = selected && seen.has(selected) ? selected : unique[0]?.id;
  for (const step of unique) {
    const place = graph.node(step.id);
    const shape = shapes.get(step.id);
    const x = Math.round(place.x - shape.width / 2);
    const y = Math.round(place.y - height / 2);
    const status = statusOf?.(step.id) ?? null;
    const titleId = `${helpId}-${order.length}`;
    const title = s("title", { id: titleId }, `${step.id} (${shape.fullTool})${step.description ? `: ${step.description}` : ""}`);
    // each line's baseline sits 5 px above the bottom of its line
    const line = (cls, text, i) =>
      s("text", { x: PAD_X, y: PAD_Y + LINE.slice(0, i + 1).reduce((a, b) => a + b, 0) - 5, class: cls }, text);
    const third = lines === 3 ? line("node-status", thirdLine(status, shape.mark), 2) : null;
    const node = s(
      "g",
      {
        class: ["node", status && `status-${status}`, shape.mark && `mark-${shape.mark}`, step.id === selected && "selected"],
        transform: `translate(${x} ${y})`,
        tabindex: step.id === firstFocus ? 0 : -1,
        role: "button",
        "data-step": step.id,
        "data-status": status,
        "data-mark": shape.mark,
        "aria-label": accessibleName(shape, status),
        "aria-describedby": titleId,
        "aria-current": step.id === selected ? "true" : null,
      },
      title,
      s("rect", { width: shape.width, height, rx: 6 }),
      // the spaces between the lines are not drawn; they keep the lines' words apart as text
      line("node-id", shape.id, 0),
      " ",
      line("node-tool", shape.tool, 1),
      third ? " " : null,
      third,
    );
    const choose = () => onSelect?.(step.id);
    node.addEventListener("click", () => {
      roveTo(step.id, false);
      choose();
    });
    nodes.set(step.id, { node, third, step, shape, x: place.x, y: place.y });
    order.push(step.id);
    svg.append(node);
  }
  measure.close();

  const dependents = new Map(order.map((id) => [id, []]));
  for (const step of unique)
    for (const dep of step.depends_on ?? []) if (dependents.has(dep) && dep !== step.id) dependents.get(dep).push(step.id);
  const byY = (ids) => [...ids].sort((a, b) => nodes.get(a).y - nodes.get(b).y);
  const column = (id) => byY(order.filter((other) => Math.abs(nodes.get(other).x - nodes.get(id).x) < 1));

  /** Make `id` the graph's one keyboard stop (and focus it when asked). */
  function roveTo(id, focus = true) {
    const entry = nodes.get(id);
    if (!entry) return;
    for (const other of nodes.values()) other.node.setAttribute("tabindex", other === entry ? "0" : "-1");
    if (focus) {
      entry.node.focus({ preventScroll: true });
      entry.node.scrollIntoView?.({ block: "nearest", inline: "nearest" });
    }
  }

  svg.addEventListener("keydown", (event) => {
    const id = event.target.closest?.(".node")?.dataset.step;
    if (!id || !nodes.has(id)) return;
    const at = order.indexOf(id);
    let next = null;
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      onSelect?.(id);
      return;
    }
    if (event.key === "ArrowRight") next = byY(dependents.get(id))[0] ?? order[at + 1];
    else if (event.key === "ArrowLeft")
      next = byY((nodes.get(id).step.depends_on ?? []).filter((d) => nodes.has(d)))[0] ?? order[at - 1];
    else if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      const col = column(id);
      const i = col.indexOf(id) + (event.key === "ArrowDown" ? 1 : -1);
      next = col[i] ?? order[at + (event.key === "ArrowDown" ? 1 : -1)];
    } else if (event.key === "Home") next = order[0];
    else if (event.key === "End") next = order[order.length - 1];
    else return;
    event.preventDefault();
    if (next) roveTo(next);
  });

  const legend = statusOf
    ? h(
        "ul",
        { class: "legend", "aria-label": "Step colours" },
        STATUSES.map(([key, text]) => h("li", {}, h("span", { class: ["swatch", `status-${key}`], "aria-hidden": "true" }), text)),
      )
    : null;
  const scroller = h("div", { class: "dag-scroll" }, svg);
  const cue = h("p", { class: "dag-more", hidden: true });
  const frame = h("div", { class: "dag-frame" }, scroller);
  const help = h(
    "p",
    { class: "visually-hidden", id: helpId },
    "Arrow keys move between steps along the arrows; Enter or Space shows a step.",
  );
  const element = h("div", { class: "dag-box" }, frame, cue, help, legend);

  /** Say whether more of the graph is out of sight, and where. */
  const checkOverflow = () => {
    const right = scroller.scrollWidth - scroller.clientWidth - scroller.scrollLeft > 1;
    const left = scroller.scrollLeft > 1;
    const below = scroller.scrollHeight - scroller.clientHeight - scroller.scrollTop > 1;
    frame.classList.toggle("more-right", right);
    frame.classList.toggle("more-left", left);
    frame.classList.toggle("more-below", below);
    const where = [right && "to the right", below && "below", left && !right && "to the left"].filter(Boolean);
    cue.hidden = where.length === 0;
    cue.textContent = where.length ? `More of the plan ${where.join(" and ")}: scroll to see it.` : "";
  };
  scroller.addEventListener("scroll", checkOverflow, { passive: true });
  if (typeof ResizeObserver === "function") new ResizeObserver(checkOverflow).observe(scroller);
  requestAnimationFrame(() => {
    // a tall plan opens where its first (or chosen) step is, not on the empty space above it
    const start = nodes.get(firstFocus);
    if (start) {
      const top = start.y - height / 2 - MARGIN;
      const left = start.x - shapes.get(firstFocus).width / 2 - MARGIN;
      if (top + height > scroller.clientHeight) scroller.scrollTop = top;
      if (left + shapes.get(firstFocus).width > scroller.clientWidth) scroller.scrollLeft = left;
    }
    checkOverflow();
  });

  return {
    element,
    /** Show `status` on the node of step `id` (when it is in this plan). */
    update(id, status) {
      const entry = nodes.get(id);
      if (!entry || !entry.third || entry.node.dataset.status === status) return;
      entry.node.classList.remove(`status-${entry.node.dataset.status}`);
      entry.node.classList.add(`status-${status}`);
      entry.node.dataset.status = status;
      entry.node.setAttribute("aria-label", accessibleName(entry.shape, status));
      entry.third.textContent = thirdLine(status, entry.shape.mark);
    },
    select(id) {
      for (const [key, entry] of nodes) {
        entry.node.classList.toggle("selected", key === id);
        if (key === id) entry.node.setAttribute("aria-current", "true");
        else entry.node.removeAttribute("aria-current");
      }
      if (nodes.has(id)) roveTo(id, false);
    },
    focus(id) {
      roveTo(id);
    },
    checkOverflow,
  };
}
