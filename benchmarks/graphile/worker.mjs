// Graphile Worker's own runner, for `make bench` (benchmarks/systems/graphile_system.py).
//
// One Node process, one pool, GRAPHILE_CONCURRENCY jobs in flight. With
// GRAPHILE_TUNED=1 it uses the throughput options of Graphile Worker's performance
// guide: a local queue that locks 500 jobs at a time, and completions batched with no
// delay. The no-op task reports each start as "seq monotonic-nanoseconds" on stdout
// (process.hrtime is CLOCK_MONOTONIC, the clock of Python's time.perf_counter on
// Linux), buffered and written once per turn of Node's event loop so that reporting
// costs the worker one write per batch, not one per job.
import { Logger, run } from "graphile-worker";

const tuned = process.env.GRAPHILE_TUNED === "1";
const concurrency = Number(process.env.GRAPHILE_CONCURRENCY || "1");
let lines = [];
let flushing = false;

function flush() {
  flushing = false;
  const out = lines.join("");
  lines = [];
  process.stdout.write(out);
}

const runner = await run({
  connectionString: process.env.GRAPHILE_DSN,
  concurrency,
  noHandleSignals: true,
  pollInterval: 2000,
  // Quiet: stdout carries the job starts, and logging would cost the worker time.
  logger: new Logger(() => (level, message) => {
    if (level === "error") process.stderr.write(`${message}\n`);
  }),
  preset: tuned
    ? { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } }
    : {},
  taskList: {
    noop: async (payload) => {
      lines.push(`${payload.seq} ${process.hrtime.bigint()}\n`);
      if (!flushing) {
        flushing = true;
        setImmediate(flush);
      }
    },
  },
});
process.stdout.write("READY\n");

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  await runner.stop();
  flush();
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
await runner.promise;
