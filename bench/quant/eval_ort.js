// Runs one single-input ONNX model with ONNX Runtime (CPU) over many .npy samples and writes
// the first output of every sample, stacked along a new axis 0, as one float32 .npy.
// A helper of eval_top1.py (engine "ort").
//
// Usage: node eval_ort.js MODEL.onnx OUT.npy THREADS SAMPLE.npy ...
//
// onnxruntime-node is resolved as in tests/e2e/ort_reference.js (repository root node_modules,
// or NODE_PATH); install with `npm install --ignore-scripts --no-save onnxruntime-node@1.30.0`.
'use strict';

const path = require('path');
const {readNpy, writeNpy} = require('../../tests/e2e/npy.js');

async function main(argv) {
  if (argv.length < 4) {
    console.error('usage: node eval_ort.js MODEL.onnx OUT.npy THREADS SAMPLE.npy ...');
    process.exit(2);
  }
  const [modelPath, outPath, threads, ...samples] = argv;
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    ort = require(path.join(process.cwd(), 'node_modules', 'onnxruntime-node'));
  }
  const session = await ort.InferenceSession.create(modelPath, {
    executionProviders: ['cpu'],
    intraOpNumThreads: Number(threads),
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
  });
  if (session.inputNames.length !== 1) {
    throw new Error(`${modelPath} has inputs [${session.inputNames}]: one is supported`);
  }
  const inName = session.inputNames[0];
  const outName = session.outputNames[0];
  let all = null;
  let dims = null;
  for (let i = 0; i < samples.length; i++) {
    const {type, dims: d, data} = readNpy(samples[i]);
    const r = await session.run({[inName]: new ort.Tensor(type, data, d)});
    const t = r[outName];
    if (all === null) {
      dims = Array.from(t.dims);
      all = new Float32Array(samples.length * t.data.length);
    }
    all.set(Float32Array.from(t.data), i * t.data.length);
  }
  writeNpy(outPath, 'float32', [samples.length, ...dims], all);
}

main(process.argv.slice(2)).catch((e) => {
  console.error(`eval_ort.js: ${e.message}`);
  process.exit(1);
});
