// Graphile Worker's side of `skiplock-bench compare` (graphile-worker is an
// npm dependency of this directory only; `npm ci` installs it here).
//
//   PEER_N=N PEER_DSN=URL node bench.mjs [--procs 2]
//   node bench.mjs --n N --dsn URL [--procs 2]
//
// Runs Graphile Worker's migration on the (fresh) database, adds N no-op
// jobs in one call (WorkerUtils.addJobs, the bulk add_jobs function), then
// works them with the settings Graphile Worker publishes its figures with
// (worker.graphile.org/docs/performance: 24 concurrent jobs, a pool of 25, a
// local queue of 500, completions and failures batched with no added delay)
// in --procs worker processes. The worker processes are forked and loaded
// before the clock starts; the clock runs from the "go" sent to them until
// the jobs table is empty (Graphile Worker deletes a job when it succeeds).
// Prints key=value lines on stdout, work_per_s last; progress on stderr.

import { fork } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";

const TASK = "compare_noop";
const JOBS_TABLE = "graphile_worker._private_jobs";
const SETTINGS = {
  concurrentJobs: 24,
  maxPoolSize: 25,
  localQueue: { size: 500 },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
};

function parseFlags(argv) {
  const flags = { n: Number(process.env.PEER_N ?? 0), dsn: process.env.PEER_DSN ?? "", procs: 2, worker: false };
  for (let i = 0; i < argv.length; i++) {
    switch (argv[i]) {
      case "--n": flags.n = Number(argv[++i]); break;
      case "--dsn": flags.dsn = argv[++i]; break;
      case "--procs": flags.procs = Number(argv[++i]); break;
      case "--worker": flags.worker = true; break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  if (!flags.dsn) throw new Error("--dsn or PEER_DSN is required");
  if (!flags.worker && !(flags.n > 0)) throw new Error("--n or PEER_N must be a positive number of jobs");
  return flags;
}

// Warnings and errors only, on stderr.
function quietLogger(Logger) {
  return new Logger(() => (level, message) => {
    if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`);
  });
}

// A worker process: loads the library, says "ready", runs a worker on
// "go", reports how many jobs its handler ran every 50 ms, and on "stop"
// stops the worker and exits.
async function workerProcess(flags) {
  const gw = await import("graphile-worker");
  let handled = 0;
  let runner = null;
  const report = setInterval(() => process.send({ handled }), 50);
  process.on("message", async (msg) => {
    if (msg === "go") {
      runner = await gw.run({
        preset: { worker: { connectionString: flags.dsn, ...SETTINGS } },
        taskList: { [TASK]: async () => { handled++; } },
        logger: quietLogger(gw.Logger),
        noHandleSignals: true,
      });
    } else if (msg === "stop") {
      clearInterval(report);
      if (runner) await runner.stop();
      process.send({ handled, stopped: true }, () => process.exit(0));
    }
  });
  process.on("disconnect", () => process.exit(1)); // the main process is gone
  process.send({ ready: true });
}

async function main(flags) {
  const gw = await import("graphile-worker");
  const pg = (await import("pg")).default;
  const here = fileURLToPath(new URL(".", import.meta.url));
  const version = JSON.parse(readFileSync(`${here}node_modules/graphile-worker/package.json`, "utf8")).version;

  const utils = await gw.makeWorkerUtils({ connectionString: flags.dsn, logger: quietLogger(gw.Logger) });
  await utils.migrate();
  const db = new pg.Client({ connectionString: flags.dsn });
  await db.connect();
  const count = async () => Number((await db.query(`SELECT count(*) AS c FROM ${JOBS_TABLE}`)).rows[0].c);
  const empty = async () => (await db.query(`SELECT NOT EXISTS (SELECT FROM ${JOBS_TABLE}) AS e`)).rows[0].e;

  // The worker processes load while the jobs go in. The connection string
  // reaches them in the environment, off their command lines.
  const env = { ...process.env, PEER_DSN: flags.dsn, NO_LOG_SUCCESS: "1" }; // NO_LOG_SUCCESS is read when the library loads
  const workers = [];
  for (let i = 0; i < flags.procs; i++) {
    const child = fork(fileURLToPath(import.meta.url), ["--worker"], { env, stdio: ["ignore", "inherit", "inherit", "ipc"] });
    const w = { child, handled: 0, ready: null, exited: null };
    w.ready = new Promise((resolve) => child.on("message", (m) => {
      if (m.ready) resolve();
      if (m.handled !== undefined) w.handled = m.handled;
    }));
    w.exited = new Promise((resolve) => child.on("exit", resolve));
    workers.push(w);
  }

  console.error(`graphile: adding ${flags.n} jobs (addJobs)`);
  const jobs = Array.from({ length: flags.n }, (_, i) => ({ identifier: TASK, payload: { n: i } }));
  const t0 = performance.now();
  await utils.addJobs(jobs);
  const insertS = (performance.now() - t0) / 1000;
  const added = await count();
  if (added !== flags.n) throw new Error(`${added} jobs in ${JOBS_TABLE}, want ${flags.n}`);
  await Promise.race([
    Promise.all(workers.map((w) => w.ready)),
    Promise.any(workers.map((w) => w.exited)).then(() => { throw new Error("a worker process exited before it was ready"); }),
  ]);

  console.error(`graphile: working (${flags.procs} processes x ${SETTINGS.concurrentJobs})`);
  const start = performance.now();
  const busy0 = machineBusy();
  for (const w of workers) w.child.send("go");
  // Look at the table rarely while the handlers run (each look reads past
  // the deleted rows), and every 2 ms once they have all run: the last
  // batched deletions follow within milliseconds.
  let lastLook = start;
  for (;;) {
    const handled = workers.reduce((sum, w) => sum + w.handled, 0);
    const now = performance.now();
    if (handled >= flags.n || now - lastLook >= 250) {
      lastLook = now;
      if (await empty()) break;
    }
    await new Promise((r) => setTimeout(r, handled >= flags.n ? 2 : 10));
  }
  const workS = (performance.now() - start) / 1000;
  const busy = machineBusy() - busy0;

  for (const w of workers) w.child.send("stop");
  const codes = await Promise.all(workers.map((w) => w.exited));
  const handled = workers.reduce((sum, w) => sum + w.handled, 0);
  const left = await count();
  await db.end();
  await utils.release();
  if (left !== 0 || handled < flags.n || codes.some((c) => c !== 0)) {
    throw new Error(`${handled} jobs handled, ${left} left in ${JOBS_TABLE}, worker exit codes ${codes.join(",")}`);
  }
  console.log(`system=graphile version=${version} node=${process.version} n=${flags.n} procs=${flags.procs} concurrency=${SETTINGS.concurrentJobs} local_queue=${SETTINGS.localQueue.size} insert_per_s=${Math.round(flags.n / insertS)}`);
  if (busy > 0) console.log(`machine_cpu_us_per_task=${(busy * 1e6 / flags.n).toFixed(1)}`);
  console.log(`work_per_s=${Math.round(flags.n / workS)}`);
}

const flags = parseFlags(process.argv.slice(2));
if (flags.worker) {
  workerProcess(flags).catch((e) => {
    console.error("graphile worker process:", e);
    process.exit(1);
  });
} else {
  // Exit once the result is out, whatever handles the libraries keep open.
  main(flags).then(() => process.exit(0), (e) => {
    console.error("graphile:", e);
    process.exit(1);
  });
}

// machineBusy is the CPU time, in seconds, the whole machine has spent busy
// (not idle, not waiting for I/O) since boot, from Linux's /proc/stat; 0
// elsewhere. Units of USER_HZ, 100 a second.
function machineBusy() {
  try {
    const f = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/);
    if (f[0] !== "cpu") return 0;
    return f.slice(1, 9).reduce((sum, v, i) => (i === 3 || i === 4 ? sum : sum + Number(v)), 0) / 100;
  } catch {
    return 0;
  }
}
