// ONNX Runtime's own per-op profile of a model (issue 28: where Kiln's int8 time goes against
// ONNX Runtime's on the same QDQ file). Opens one session as bench/ort_compare/run_ort.js does
// (CPU, graph optimisation 'all', intra-op threads N, inter-op 1) with the session option
// enableProfiling, runs the model W times untimed and K times timed, and prints the median run
// and, per op type of the optimised graph (QLinearConv, QLinearAdd, ...), the microseconds per
// run and the node count, from ORT's trace (kept at PREFIX_<date>.json; ORT's "Node" events,
// the warm-up runs included in neither figure).
//
// Usage: node ort_profile.js MODEL.onnx THREADS PREFIX NAME=INPUT.npy ... [--runs K] [--warmup W]
'use strict';

const fs = require('fs');
const path = require('path');
const {readNpy} = require('../../tests/e2e/npy.js');

function fail(msg) {
  process.stderr.write(`ort_profile: ${msg}\n`);
  process.exit(1);
}

async function main(argv) {
  const opts = {runs: 30, warmup: 5};
  const pos = [];
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === '--runs' || argv[i] === '--warmup') opts[argv[i].slice(2)] = Number(argv[++i]);
    else pos.push(argv[i]);
  }
  if (pos.length < 4) fail('usage: node ort_profile.js MODEL.onnx THREADS PREFIX NAME=INPUT.npy ... [--runs K] [--warmup W]');
  const [modelPath, threadArg, prefix, ...inputArgs] = pos;
  const threads = Number(threadArg);
  if (!Number.isInteger(threads) || threads < 1) fail(`bad thread count '${threadArg}'`);
  if (!Number.isInteger(opts.runs) || opts.runs < 1 || !Number.isInteger(opts.warmup) || opts.warmup < 0)
    fail('--runs must be >= 1 and --warmup >= 0');
  if (!fs.existsSync(modelPath)) fail(`model '${modelPath}' not found`);
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    fail('cannot load onnxruntime-node (install it in the repository root with ' +
         '`npm install --ignore-scripts onnxruntime-node@1.30.0`)');
  }
  const feeds = {};
  for (const arg of inputArgs) {
    const eq = arg.indexOf('=');
    if (eq <= 0) fail(`input '${arg}' is not NAME=FILE.npy`);
    const {type, dims, data} = readNpy(arg.slice(eq + 1));
    feeds[arg.slice(0, eq)] = new ort.Tensor(type, data, dims);
  }
  const session = await ort.InferenceSession.create(modelPath, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    enableProfiling: true,
    profileFilePrefix: prefix,
  });
  const missing = session.inputNames.filter((n) => !(n in feeds));
  if (missing.length) fail(`missing inputs: ${missing.join(', ')}`);
  // ORT records every run; the warm-up runs are told apart by their order in the trace.
  for (let i = 0; i < opts.warmup; ++i) await session.run(feeds);
  const times = [];
  for (let i = 0; i < opts.runs; ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  session.endProfiling();
  // onnxruntime-node does not return the trace's name: the newest PREFIX_*.json.
  const dir = path.dirname(prefix) || '.';
  const base = path.basename(prefix) + '_';
  const traces = fs.readdirSync(dir).filter((f) => f.startsWith(base) && f.endsWith('.json'))
                     .map((f) => path.join(dir, f)).sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs);
  if (!traces.length) fail(`ONNX Runtime wrote no trace ${prefix}_*.json`);
  const traceFile = traces[0];
  times.sort((a, b) => a - b);
  const events = JSON.parse(fs.readFileSync(traceFile, 'utf8'));
  const runStarts = events.filter((e) => e.name === 'model_run').map((e) => e.ts).sort((a, b) => a - b);
  const firstTimed = runStarts[opts.warmup];
  const perOp = new Map();
  for (const e of events) {
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time') || e.ts < firstTimed) continue;
    const op = e.args.op_name;
    const entry = perOp.get(op) || {us: 0, calls: 0};
    entry.us += e.dur;
    entry.calls += 1;
    perOp.set(op, entry);
  }
  console.log(`trace: ${traceFile}`);
  console.log(`median run ${times[Math.floor(times.length / 2)].toFixed(3)} ms over ${opts.runs} runs, ` +
              `${threads} thread(s), profiling on`);
  let total = 0;
  const rows = [...perOp.entries()].sort((a, b) => b[1].us - a[1].us);
  for (const [op, {us, calls}] of rows) {
    total += us;
    console.log(`${op.padEnd(30)} ${(us / opts.runs).toFixed(1).padStart(10)} us/run ${String(calls / opts.runs).padStart(5)} nodes`);
  }
  console.log(`${'all nodes'.padEnd(30)} ${(total / opts.runs).toFixed(1).padStart(10)} us/run`);
}

main(process.argv.slice(2)).catch((e) => fail(e.message));
