/** `planexec serve` as a process of its own for the tests: agents over scripted planners, a store in a temporary folder. */

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = fileURLToPath(new URL(".", import.meta.url)); // dist/test/
export const PACKAGE = resolve(HERE, "..", "..");
export const FIXTURES = join(PACKAGE, "test", "fixtures");
const REPO = resolve(PACKAGE, "..", "..");
const PYTHON = process.env.PLANEXEC_PYTHON ?? join(REPO, ".venv", "bin", "python");

export function step(id: string, tool: string, args: Record<string, unknown>, ...dependsOn: string[]) {
  return { id, description: `${tool} ${id}`, tool, args, depends_on: dependsOn };
}

export interface Served {
  url: string;
  token: string;
  stop(): Promise<void>;
}

/** Start `planexec serve` with `agents` (name → the planner's scripted replies). */
export async function serve(agents: Record<string, unknown[]>): Promise<Served> {
  const folder = mkdtempSync(join(tmpdir(), "planexec-ts-"));
  const token = "typescript-client-test-token-0123456789";
  writeFileSync(join(folder, "token"), token);
  const flags: string[] = [];
  for (const [name, replies] of Object.entries(agents)) {
    writeFileSync(join(folder, `${name}.replies.json`), JSON.stringify(replies));
    const spec = { planner: `scripted:${join(folder, `${name}.replies.json`)}`, tools: ["calc_tools:TOOLS"], cwd: FIXTURES };
    writeFileSync(join(folder, `${name}.json`), JSON.stringify(spec));
    flags.push("--agent", `${name}=${join(folder, `${name}.json`)}`);
  }
  const args = ["-m", "planexec", "serve", "--port", "0", "--store", `sqlite:///${join(folder, "runs.db")}`];
  const child = spawn(PYTHON, [...args, "--token-file", join(folder, "token"), ...flags], {
    cwd: folder,
    env: { ...process.env, PYTHONPATH: [join(REPO, "src"), process.env.PYTHONPATH].filter(Boolean).join(":") },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const url = await listening(child);
  return {
    url,
    token,
    async stop() {
      const exited = new Promise((done) => child.once("exit", done));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
      rmSync(folder, { recursive: true, force: true });
    },
  };
}

function listening(child: ChildProcess): Promise<string> {
  return new Promise((done, fail) => {
    let said = "";
    const timer = setTimeout(() => fail(new Error(`planexec serve did not start in 60 s:\n${said}`)), 60_000);
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (chunk: string) => {
      said += chunk;
      const found = /planexec serve: (http:\/\/127\.0\.0\.1:\d+)\//.exec(said);
      if (found?.[1] !== undefined) {
        clearTimeout(timer);
        done(found[1]);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`planexec serve exited (${code}):\n${said}`));
    });
  });
}
