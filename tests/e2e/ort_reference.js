// Runs an ONNX model with ONNX Runtime (CPU, one thread) and writes its outputs as .npy references.
//
// Usage: node ort_reference.js MODEL.onnx OUT_DIR NAME=INPUT.npy ...
//
// Writes OUT_DIR/expected_<output name, sanitised>.npy for every model output, plus
// OUT_DIR/outputs.json in the same layout as `kiln run --output-dir` ({name: {file, dtype,
// shape}}), so that compare.py can also check ONNX Runtime against a PyTorch reference.
//
// onnxruntime-node must be installed with `npm install --ignore-scripts onnxruntime-node@1.30.0`
// in the repository root (or any folder on NODE_PATH): its postinstall script only fetches the
// optional CUDA providers; the CPU library ships in the package (bin/napi-v6/linux/x64).
'use strict';

const fs = require('fs');
const path = require('path');
const {readNpy, writeNpy, sanitize} = require('./npy.js');

function loadOrt() {
  // Plain resolution walks up from this file, so <repo>/node_modules is found; NODE_PATH too.
  const tried = [];
  for (const id of ['onnxruntime-node', path.join(process.cwd(), 'node_modules', 'onnxruntime-node')]) {
    try {
      return require(id);
    } catch (e) {
      tried.push(`${id}: ${e.message.split('\n')[0]}`);
    }
  }
  throw new Error('cannot load onnxruntime-node. Install it in the repository root with\n' +
                  '  npm install --ignore-scripts onnxruntime-node@1.30.0\n' +
                  'or put a node_modules that has it on NODE_PATH. Tried:\n  ' + tried.join('\n  '));
}

function usage(msg) {
  if (msg) console.error(`ort_reference.js: ${msg}`);
  console.error('usage: node ort_reference.js MODEL.onnx OUT_DIR NAME=INPUT.npy ...');
  process.exit(2);
}

async function main(argv) {
  if (argv.length < 2) usage('missing arguments');
  const [modelPath, outDir, ...inputArgs] = argv;
  if (!fs.existsSync(modelPath)) usage(`model '${modelPath}' not found`);

  const feeds = {};
  const ort = loadOrt();
  for (const arg of inputArgs) {
    const eq = arg.indexOf('=');
    if (eq <= 0) usage(`input '${arg}' is not NAME=FILE.npy`);
    const name = arg.slice(0, eq);
    const {type, dims, data} = readNpy(arg.slice(eq + 1));
    feeds[name] = new ort.Tensor(type, data, dims);
  }

  let t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(modelPath, {
    executionProviders: ['cpu'],
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
  });
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;

  const missing = session.inputNames.filter((n) => !(n in feeds));
  const unknown = Object.keys(feeds).filter((n) => !session.inputNames.includes(n));
  if (missing.length || unknown.length) {
    usage(`model inputs are [${session.inputNames}]; missing [${missing}], unknown [${unknown}]`);
  }

  t0 = process.hrtime.bigint();
  const results = await session.run(feeds);
  const runMs = Number(process.hrtime.bigint() - t0) / 1e6;

  fs.mkdirSync(outDir, {recursive: true});
  const index = {};
  for (const name of session.outputNames) {
    const t = results[name];
    const file = `expected_${sanitize(name)}.npy`;
    writeNpy(path.join(outDir, file), t.type, t.dims, t.data);
    index[name] = {file, dtype: t.type, shape: Array.from(t.dims)};
    console.log(`[ort_reference] ${name}: ${t.type} [${t.dims.join(',')}] -> ${file}`);
  }
  fs.writeFileSync(path.join(outDir, 'outputs.json'), JSON.stringify(index, null, 2) + '\n');
  console.log(`[ort_reference] ${path.basename(modelPath)}: load ${loadMs.toFixed(0)} ms, ` +
              `run ${runMs.toFixed(0)} ms (onnxruntime-node ${ort.env.versions?.node ?? ''})`);
}

main(process.argv.slice(2)).catch((e) => {
  console.error(`ort_reference.js: ${e.message}`);
  process.exit(1);
});
