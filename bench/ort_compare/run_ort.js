// ONNX Runtime side of bench/ort_compare.sh: keeps one InferenceSession open (CPU, graph
// optimisation 'all', intra-op threads N, inter-op 1) and runs it on command, so that the driver
// can alternate blocks of ORT runs with blocks of Kiln runs on the same machine.
//
// Usage: node run_ort.js MODEL.onnx THREADS [NAME=INPUT.npy ...]
//
// Prints one JSON line when the session is ready ({"ready": true, "load_ms", "version",
// "inputs", "outputs"}), then answers one JSON line per command read from stdin:
//   time K W [SET]  W untimed runs, then K timed runs: {"times_ms": [...]} (wall clock of each
//                   session.run, as a user of onnxruntime-node sees it)
//   save DIR [SET]  one run; writes DIR/<output, sanitised>.npy and DIR/outputs.json in the
//                   layout of `kiln run --output-dir`: {"saved": DIR}
//   feed SET NAME=INPUT.npy ...   another input set (bench/dynamic_shapes.sh: one per shape
//                   of a model with open dims): {"fed": SET}
//   quit            exits
// Without SET, the inputs of the command line. Errors are printed as {"error": "..."} and end
// the process with status 1.
'use strict';

const fs = require('fs');
const path = require('path');
const readline = require('readline');
const {readNpy, writeNpy, sanitize} = require('../../tests/e2e/npy.js');

function fail(msg) {
  process.stdout.write(JSON.stringify({error: msg}) + '\n');
  process.exit(1);
}

function loadOrt() {
  // Plain resolution walks up from this file, so <repo>/node_modules is found; NODE_PATH too.
  try {
    return require('onnxruntime-node');
  } catch (e) {
    fail('cannot load onnxruntime-node (install it in the repository root with ' +
         '`npm install --ignore-scripts onnxruntime-node@1.30.0`): ' + e.message.split('\n')[0]);
  }
}

function ortVersion() {
  try {
    return require('onnxruntime-node/package.json').version;
  } catch (e) {
    return 'unknown';
  }
}

async function main(argv) {
  if (argv.length < 2) fail('usage: node run_ort.js MODEL.onnx THREADS [NAME=INPUT.npy ...]');
  const [modelPath, threadArg, ...inputArgs] = argv;
  const threads = Number(threadArg);
  if (!Number.isInteger(threads) || threads < 1) fail(`bad thread count '${threadArg}'`);
  if (!fs.existsSync(modelPath)) fail(`model '${modelPath}' not found`);
  const ort = loadOrt();

  const readFeeds = (args) => {
    const feeds = {};
    for (const arg of args) {
      const eq = arg.indexOf('=');
      if (eq <= 0) fail(`input '${arg}' is not NAME=FILE.npy`);
      const {type, dims, data} = readNpy(arg.slice(eq + 1));
      feeds[arg.slice(0, eq)] = new ort.Tensor(type, data, dims);
    }
    return feeds;
  };
  const feeds = readFeeds(inputArgs);

  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(modelPath, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  });
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const checkFeeds = (f) => {
    const missing = session.inputNames.filter((n) => !(n in f));
    const unknown = Object.keys(f).filter((n) => !session.inputNames.includes(n));
    if (missing.length || unknown.length) {
      fail(`model inputs are [${session.inputNames}]; missing [${missing}], unknown [${unknown}]`);
    }
    return f;
  };
  if (inputArgs.length) checkFeeds(feeds);
  const sets = {'': feeds};
  const feedsOf = (set) => {
    if (!(set in sets)) fail(`no input set '${set}'`);
    return sets[set];
  };
  process.stdout.write(JSON.stringify({
    ready: true, load_ms: loadMs, version: ortVersion(), threads,
    inputs: session.inputNames, outputs: session.outputNames,
  }) + '\n');

  const rl = readline.createInterface({input: process.stdin, terminal: false});
  for await (const line of rl) {
    const words = line.trim().split(/\s+/u);
    try {
      if (words[0] === 'time') {
        const k = Number(words[1]);
        const w = Number(words[2] ?? 0);
        if (!Number.isInteger(k) || k < 1 || !Number.isInteger(w) || w < 0) {
          fail(`bad command '${line}'`);
        }
        const f = feedsOf(words[3] ?? '');
        for (let i = 0; i < w; ++i) await session.run(f);
        const times = [];
        for (let i = 0; i < k; ++i) {
          const s = process.hrtime.bigint();
          await session.run(f);
          times.push(Number(process.hrtime.bigint() - s) / 1e6);
        }
        process.stdout.write(JSON.stringify({times_ms: times}) + '\n');
      } else if (words[0] === 'feed' && words.length >= 3) {
        sets[words[1]] = checkFeeds(readFeeds(words.slice(2)));
        process.stdout.write(JSON.stringify({fed: words[1]}) + '\n');
      } else if (words[0] === 'save' && (words.length === 2 || words.length === 3)) {
        const dir = words[1];
        const results = await session.run(feedsOf(words[2] ?? ''));
        fs.mkdirSync(dir, {recursive: true});
        const index = {};
        for (const name of session.outputNames) {
          const t = results[name];
          const file = `${sanitize(name)}.npy`;
          writeNpy(path.join(dir, file), t.type, t.dims, t.data);
          index[name] = {file, dtype: t.type, shape: Array.from(t.dims)};
        }
        fs.writeFileSync(path.join(dir, 'outputs.json'), JSON.stringify(index, null, 2) + '\n');
        process.stdout.write(JSON.stringify({saved: dir}) + '\n');
      } else if (words[0] === 'quit') {
        break;
      } else {
        fail(`unknown command '${line}' (time K W [SET] | save DIR [SET] | feed SET ... | quit)`);
      }
    } catch (e) {
      fail(`${words[0]}: ${e.message}`);
    }
  }
  rl.close();
  process.exit(0);
}

main(process.argv.slice(2)).catch((e) => fail(e.message));
