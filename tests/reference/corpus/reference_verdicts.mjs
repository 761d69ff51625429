// What the reference implementation's own validator says about each corpus file.
//
//   env -i PATH="$PATH" node tests/reference/corpus/reference_verdicts.mjs /path/to/built/reference
//
// The reference tree must be built (`npm install` then `npx tsc -b tsconfig.json`
// at its root; see README.md). Reads index.json, writes verdicts.json beside
// this script. An agent manifest goes through the reference CLI's
// `validate FILE`, a runtime config through its `config validate FILE`. A run
// manifest goes through what the CLI's `run-manifest` does before it starts a
// run: the run manifest's own contract (FileAgentRunManifestSource), then the
// agent manifest it names (FileAgentManifestSource) when upstream ships that
// file beside it; a documentation snippet naming an agent file upstream does not
// ship is judged on its own fields only, and the verdict says so. A
// documentation excerpt of an agent manifest that leaves out `schemaVersion`
// (`completion` in index.json) is validated again with that line put first,
// recorded as `completed`.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const reference = process.argv[2];
if (!reference || !existsSync(path.join(reference, "packages/cli/dist/index.js"))) {
  process.stderr.write("usage: reference_verdicts.mjs BUILT_REFERENCE_DIRECTORY\n");
  process.exit(2);
}
const load = (pkg) =>
  import(pathToFileURL(path.resolve(reference, "packages", pkg, "dist/index.js")).href);
const { runCli } = await load("cli");
const { FileAgentManifestSource, FileAgentRunManifestSource } = await load("store-local");
const version = JSON.parse(
  readFileSync(path.join(reference, "packages/cli/package.json"), "utf8"),
).version;

const cli = async (args) => {
  let stderr = "";
  const code = await runCli(args, { stdout: () => {}, stderr: (text) => (stderr += text) });
  return code === 0
    ? { verdict: "accepted" }
    : { verdict: "refused", message: stderr.trim().replace(/^Error: /u, "") };
};

const runManifest = async (file) => {
  const directory = path.dirname(file);
  try {
    const run = await new FileAgentRunManifestSource(directory, path.basename(file))
      .loadAgentRunManifest();
    if (!existsSync(path.resolve(directory, run.agent.ref)))
      return { verdict: "accepted", checked: "run manifest only: its agent.ref names no upstream file" };
    await new FileAgentManifestSource(directory).loadManifest(run.agent.ref);
    return { verdict: "accepted", checked: "run manifest and its agent manifest" };
  } catch (error) {
    return { verdict: "refused", message: error instanceof Error ? error.message : String(error) };
  }
};

const completed = async (entry) => {
  const directory = mkdtempSync(path.join(os.tmpdir(), "corpus-completed-"));
  try {
    const file = path.join(directory, path.basename(entry.file));
    writeFileSync(file, entry.completion + readFileSync(path.join(here, entry.file), "utf8"));
    return await cli(["validate", file]);
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
};

const index = JSON.parse(readFileSync(path.join(here, "index.json"), "utf8"));
const verdicts = {};
for (const entry of index.files) {
  const file = path.join(here, entry.file);
  const verdict =
    entry.kind === "agent"
      ? await cli(["validate", file])
      : entry.kind === "config"
        ? await cli(["config", "validate", file])
        : await runManifest(file);
  verdicts[entry.file] = {
    kind: entry.kind,
    ...verdict,
    ...(entry.completion ? { completed: await completed(entry) } : {}),
  };
}
writeFileSync(
  path.join(here, "verdicts.json"),
  `${JSON.stringify({ reference: `agent-runtime ${version}`, node: process.version, verdicts }, null, 2)}\n`,
);
const accepted = Object.values(verdicts).filter((v) => v.verdict === "accepted").length;
const completions = Object.values(verdicts).filter((v) => v.completed).length;
const completedAccepted = Object.values(verdicts).filter(
  (v) => v.completed?.verdict === "accepted",
).length;
process.stdout.write(
  `${accepted} of ${index.files.length} accepted by the reference; ` +
    `${completedAccepted} of ${completions} completed excerpts\n`,
);
