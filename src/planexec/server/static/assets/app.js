// The web page of `planexec serve`: hash routes #/ (runs), #/runs/ID (a run), #/inbox (questions).

import { api, ApiError, forgetToken, getToken, onUnauthorized, setToken, takeTokenFromUrl } from "./api.js";
import { mountInbox } from "./inbox.js";
import { mountRun } from "./run.js";
import { mountRuns } from "./runs.js";
import { fill, h, problemList } from "./ui.js";

const main = document.getElementById("main");
const inboxCount = document.getElementById("inbox-count");
const connection = document.getElementById("connection");
const forgetButton = document.getElementById("forget-token");
let unmount = () => {};
let inboxTimer = null;

/** Show how many questions wait (fetched when `n` is not given). */
async function setInboxCount(n) {
  if (n === undefined) {
    try {
      n = (await api("/v1/inbox")).questions.length;
    } catch {
      return;
    }
  }
  inboxCount.hidden = n === 0;
  inboxCount.textContent = String(n);
  inboxCount.setAttribute("aria-label", `${n} waiting`);
}

function pollInbox() {
  clearTimeout(inboxTimer);
  if (!getToken()) return;
  setInboxCount().finally(() => {
    inboxTimer = setTimeout(pollInbox, 5000);
  });
}

function tokenForm(problem = null) {
  unmount();
  unmount = () => {};
  forgetButton.hidden = true;
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true, minlength: 16 });
  const feedback = h("div", { class: "feedback" }, problem ? problemList(problem) : null);
  const form = h(
    "form",
    { class: "card token-form", "aria-labelledby": "token-title" },
    h("h1", { id: "token-title" }, "Sign in"),
    h("p", {}, "Paste the token ", h("code", {}, "planexec serve"), " printed, or the one in its token file (", h("code", {}, "--token-file"), ")."),
    h("label", { for: input.id }, "Token"),
    input,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Continue")),
    feedback,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    setToken(input.value);
    try {
      await api("/v1/agents");
      route();
    } catch (error) {
      forgetToken();
      fill(feedback, problemList(error instanceof ApiError ? error : { message: `Could not reach the server: ${error.message}` }));
    }
  });
  fill(main, form);
  input.focus();
}

onUnauthorized(() => {
  forgetToken();
  tokenForm({ message: "The server did not accept the token. Enter it again." });
});

function highlightNav(name) {
  for (const link of document.querySelectorAll("[data-nav]")) {
    if (link.dataset.nav === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function route() {
  if (takeTokenFromUrl()) {
    // the token was in the address; it is kept in this tab and gone from the address bar
  }
  if (!getToken()) {
    tokenForm();
    return;
  }
  forgetButton.hidden = false;
  unmount();
  const path = location.hash.replace(/^#/, "") || "/";
  const runMatch = /^\/runs\/([^/?]+)$/.exec(path);
  const context = { setInboxCount, refreshInbox: () => setInboxCount() };
  if (runMatch) {
    highlightNav(null);
    document.title = `Run ${decodeURIComponent(runMatch[1])} · planexec`;
    unmount = mountRun(main, decodeURIComponent(runMatch[1]), context);
  } else if (path === "/inbox") {
    highlightNav("inbox");
    document.title = "Inbox · planexec";
    unmount = mountInbox(main, context);
  } else {
    highlightNav("runs");
    document.title = "Runs · planexec";
    unmount = mountRuns(main, context);
  }
  main.focus({ preventScroll: true });
  pollInbox();
}

forgetButton.addEventListener("click", () => {
  forgetToken();
  clearTimeout(inboxTimer);
  tokenForm();
});
window.addEventListener("hashchange", route);
window.addEventListener("online", () => (connection.textContent = ""));
window.addEventListener("offline", () => (connection.textContent = "offline"));
route();
