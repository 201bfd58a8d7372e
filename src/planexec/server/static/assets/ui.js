// Small DOM helpers and formatters shared by the views. Data from the server is only ever put
// into the page as text (textContent, attribute values), never as markup.

/** An element: h("button", {type: "button", onclick: f}, "text", child, ...). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";

/** An SVG element, with attributes and children as h() takes them. */
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "value" && "value" in el) el.value = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

/** Replace everything in `el` with `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** JSON as indented text ("—" for nothing). */
export function pretty(value) {
  if (value === undefined || value === null) return "—";
  if (typeof value === "string") return value;
  return JSON.stringify(value, null, 2);
}

/** A money amount; null (not known) as "—". */
export function money(cost) {
  if (cost === undefined || cost === null) return "—";
  if (cost === 0) return "$0";
  return cost < 0.01 ? `$${cost.toPrecision(2)}` : `$${cost.toFixed(2)}`;
}

/** Seconds as "850 ms", "4.2 s", "3 min 4 s", "2 h 5 min". */
export function duration(seconds) {
  if (seconds === undefined || seconds === null) return "—";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** An epoch time (seconds) as a local date and time. */
export function when(epoch) {
  if (epoch === undefined || epoch === null) return "—";
  const d = new Date(epoch * 1000);
  const today = new Date();
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  return d.toDateString() === today.toDateString() ? time : `${d.toLocaleDateString()} ${time}`;
}

/** Shorten `text` to `n` characters with an ellipsis. */
export function clip(text, n = 80) {
  const t = String(text ?? "");
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

/** A run's status as a badge: its text says it, the colour repeats it. */
export function runBadge(run) {
  let tone = run.status;
  let label = run.status;
  if (run.status === "finished" && run.stop) {
    label = `finished: ${run.stop.kind.replaceAll("_", " ")}`;
    tone = run.stop.kind === "goal_met" ? "ok" : run.stop.kind === "cancelled" ? "off" : "bad";
  }
  return h("span", { class: ["badge", `tone-${tone}`] }, label);
}

/** Show a short message at the bottom of the screen for a few seconds. */
export function toast(message, kind = "info") {
  const box = document.getElementById("toasts");
  const item = h("div", { class: ["toast", `toast-${kind}`] }, message);
  box.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 4000);
}

/** A labelled list of the problems an error carries (the server lists every one). */
export function problemList(error) {
  const problems = error.problems ?? [];
  return h(
    "div",
    { class: "problems", role: "alert" },
    h("p", {}, error.message),
    problems.length
      ? h(
          "ul",
          {},
          problems.map((p) => h("li", {}, p.where ? h("code", {}, p.where) : null, p.where ? ": " : null, p.message)),
        )
      : null,
  );
}

/**
 * Ask in a modal dialog; resolves with the form's values, or null when dismissed.
 * Enter submits (the default button), Escape closes it; Tab and Shift+Tab go round the dialog's
 * controls without leaving it, and the focus goes back where it was when the dialog closes.
 */
export function ask({ title, body = [], confirm = "OK", danger = false }) {
  return new Promise((resolve) => {
    const form = h(
      "form",
      { method: "dialog" },
      h("h2", {}, title),
      body,
      h(
        "div",
        { class: "actions" },
        h("button", { type: "submit", value: "ok", class: danger ? "danger" : "primary" }, confirm),
        h("button", { type: "submit", value: "cancel", formnovalidate: true }, "Cancel"),
      ),
    );
    const dialog = h("dialog", { "aria-label": title }, form);
    const before = document.activeElement;
    document.body.append(dialog);
    dialog.addEventListener("keydown", (event) => {
      if (event.key !== "Tab") return;
      const controls = [...dialog.querySelectorAll("button, input, select, textarea, a[href], [tabindex]")].filter(
        (e) => !e.disabled && e.tabIndex >= 0,
      );
      if (!controls.length) return;
      const first = controls[0];
      const last = controls[controls.length - 1];
      if (event.shiftKey && document.activeElement === first) {
        event.preventDefault();
        last.focus();
      } else if (!event.shiftKey && document.activeElement === last) {
        event.preventDefault();
        first.focus();
      }
    });
    dialog.addEventListener("close", () => {
      const ok = dialog.returnValue === "ok";
      const values = ok ? Object.fromEntries(new FormData(form).entries()) : null;
      dialog.remove();
      if (before instanceof HTMLElement && before.isConnected) before.focus();
      resolve(values);
    });
    dialog.showModal();
  });
}
