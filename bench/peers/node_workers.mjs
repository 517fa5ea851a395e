// The Node.js systems of the burn-down, graphile-worker and pg-boss, as py_workers.py runs the
// Python ones (`work` says `ready`, then starts at the next line of its standard input):
//
//   node bench/peers/node_workers.mjs install|enqueue|work SYSTEM DSN [JOBS | CONCURRENCY SLEEP_MS]
import { once } from "node:events";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";

const QUEUE = "burndown";
const CHUNK = 1000;
const [action, system, dsn, arg1, arg2] = process.argv.slice(2);

async function ready() {
  process.stdout.write("ready\n");
  const rl = createInterface({ input: process.stdin });
  await once(rl, "line");
  rl.close();
}

function handler(sleepMs) {
  return sleepMs > 0 ? async () => sleep(sleepMs) : async () => {};
}

// The jobs 0 .. jobs - 1 in arrays of CHUNK, each job made by make(n): a bulk enqueue's calls.
function* chunks(jobs, make) {
  for (let start = 0; start < jobs; start += CHUNK) {
    yield Array.from({ length: Math.min(CHUNK, jobs - start) }, (_, k) => make(start + k));
  }
}

const graphile = {
  // what `graphile-worker --schema-only` runs
  async install() {
    const { runMigrations } = await import("graphile-worker");
    await runMigrations({ connectionString: dsn });
  },
  async enqueue(jobs) {
    const { makeWorkerUtils } = await import("graphile-worker");
    const utils = await makeWorkerUtils({ connectionString: dsn });
    for (const specs of chunks(jobs, (n) => ({ identifier: "noop", payload: { n } }))) {
      await utils.addJobs(specs);
    }
    await utils.release();
  },
  // concurrency: graphile-worker's documented per-process setting (-j / concurrency). Its default
  // logger writes a line per job completed; as pyqueue-sql's worker, it logs warnings and errors only.
  async work(concurrency, sleepMs, preset) {
    const { run, Logger } = await import("graphile-worker");
    const quiet = () => (level, message) => ["error", "warning"].includes(level) && console.error(message);
    await ready();
    const runner = await run({
      connectionString: dsn,
      concurrency,
      noHandleSignals: true,
      logger: new Logger(quiet),
      taskList: { noop: handler(sleepMs) },
      ...(preset ? { preset } : {}),
    });
    await runner.promise;
  },
};

// graphile-worker as its performance page runs it: a local queue of 500 jobs fetched per round
// trip (localQueue.size 500) and completions batched with no delay (completeJobBatchDelay 0: the
// completions that arrive while one batch is written go in the next). Both are off by default.
export const GRAPHILE_TUNED = { localQueue: { size: 500 }, completeJobBatchDelay: 0 };
const graphileBatched = {
  ...graphile,
  work: (concurrency, sleepMs) => graphile.work(concurrency, sleepMs, { worker: GRAPHILE_TUNED }),
};

const pgboss = {
  // pg-boss installs or migrates its schema in start()
  async install() {
    const { PgBoss } = await import("pg-boss");
    const boss = new PgBoss(dsn);
    boss.on("error", (e) => console.error(e));
    await boss.start();
    await boss.createQueue(QUEUE);
    await boss.stop({ graceful: false });
  },
  async enqueue(jobs) {
    const { PgBoss } = await import("pg-boss");
    const boss = new PgBoss({ connectionString: dsn, supervise: false, schedule: false });
    await boss.start();
    for (const batch of chunks(jobs, (n) => ({ data: { n } }))) await boss.insert(QUEUE, batch);
    await boss.stop({ graceful: false });
  },
  // concurrency: pg-boss's documented per-process setting (work's localConcurrency: 16 loops,
  // each running its jobs one at a time). With its default batchSize of 1 a loop waits the polling
  // interval (>= 0.5 s) after every fetch, even with a backlog (64 jobs/s here); a batch of 10 with
  // burstWhenBatchFull, its documented way to drain a backlog, fetches again at once.
  async work(concurrency, sleepMs) {
    const { PgBoss } = await import("pg-boss");
    const boss = new PgBoss({ connectionString: dsn, max: concurrency + 4 });
    boss.on("error", (e) => console.error(e));
    const run = handler(sleepMs);
    await ready();
    await boss.start();
    const options = { localConcurrency: concurrency, batchSize: 10, burstWhenBatchFull: true };
    await boss.work(QUEUE, options, async (jobs) => {
      for (const _ of jobs) await run();
    });
    await new Promise(() => {});
  },
};

const systems = { "graphile-worker": graphile, "graphile-worker-batched": graphileBatched, "pg-boss": pgboss };
const impl = systems[system];
if (!impl || !["install", "enqueue", "work"].includes(action)) {
  console.error(`unknown system ${system} or action ${action}`);
  process.exit(2);
}
await impl[action](Number(arg1), Number(arg2));
process.exit(0);
