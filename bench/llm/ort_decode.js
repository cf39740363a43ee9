// ONNX Runtime's side of bench/llm/ort_decode_compare.py: greedy decoding of the past-key-values
// decoder.onnx (bench/llm/export_decoder.py) in one long-lived InferenceSession (CPU, graph
// optimisation 'all', intra-op threads N, inter-op 1), the loop a user of onnxruntime-node
// writes: each step's present.N.key/value are fed back as the next step's past_key_values.
//
// Usage: node ort_decode.js DECODER.onnx THREADS KV_HEADS HEAD_DIM (the last two from the
// model's config.json: the empty past of the prefill is [1, KV_HEADS, 0, HEAD_DIM])
//
// Prints {"ready": true, "version", "load_ms"} when the session is ready, then answers each
// stdin line "decode K ID,ID,..." with one JSON line: the prompt is prefilled in one run, then
// K + 1 single-token steps follow; the first of them is untimed (as Kiln's side, whose first
// step holds the prefill), so the K timed steps decode at contexts P+2..P+K+1:
//   {"context", "prefill_ms", "step_ms": [K], "tokens": [K + 2], "logits_only_ms": [K]}
// logits_only_ms: the last step's inputs run K times more fetching only `logits`, so that
// ONNX Runtime still computes every present (the attention needs them) but nothing is copied
// out to JavaScript: the session's own cost without the binding's output copies, a lower bound
// of a decode step through onnxruntime-node. "quit" ends it. Errors: {"error": "..."}, status 1.
'use strict';

const readline = require('readline');

function fail(msg) {
  process.stdout.write(JSON.stringify({error: msg}) + '\n');
  process.exit(1);
}

function loadOrt() {
  try {
    return require('onnxruntime-node');  // NODE_PATH (the driver's install) or a node_modules above
  } catch (e) {
    fail('cannot load onnxruntime-node (`npm install --ignore-scripts onnxruntime-node@1.30.0`): ' +
         e.message.split('\n')[0]);
  }
}

function argmaxLastRow(logits) {
  const vocab = logits.dims[logits.dims.length - 1];
  const data = logits.data;
  const base = data.length - vocab;
  let best = 0;
  for (let i = 1; i < vocab; ++i) {
    if (data[base + i] > data[base + best]) best = i;
  }
  return best;
}

async function main(argv) {
  if (argv.length !== 4) fail('usage: node ort_decode.js DECODER.onnx THREADS KV_HEADS HEAD_DIM');
  const [modelPath, threadArg, headsArg, headDimArg] = argv;
  const threads = Number(threadArg);
  const kvHeads = Number(headsArg);
  const headDim = Number(headDimArg);
  if (!Number.isInteger(threads) || threads < 1) fail(`bad thread count '${threadArg}'`);
  if (!Number.isInteger(kvHeads) || kvHeads < 1 || !Number.isInteger(headDim) || headDim < 1) {
    fail(`bad KV heads '${headsArg}' or head size '${headDimArg}'`);
  }
  const ort = loadOrt();
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(modelPath, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  });
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const pastNames = session.inputNames.filter((n) => n.startsWith('past_key_values.'));
  const presentNames = session.outputNames.filter((n) => n.startsWith('present.'));
  if (!pastNames.length || pastNames.length !== presentNames.length || !session.outputNames.includes('logits')) {
    fail(`${modelPath} is not a past-key-values decoder (inputs [${session.inputNames}], ` +
         `outputs [${session.outputNames}])`);
  }
  let version = 'unknown';
  try {
    version = require('onnxruntime-node/package.json').version;
  } catch (e) { /* reported as unknown */ }
  process.stdout.write(JSON.stringify({ready: true, version, load_ms: loadMs, threads}) + '\n');

  const int64 = (values, dims) => new ort.Tensor('int64', BigInt64Array.from(values, BigInt), dims);
  const feedsFor = (ids, start, past) => {
    const total = start + ids.length;
    const feeds = {
      input_ids: int64(ids, [1, ids.length]),
      attention_mask: int64(new Array(total).fill(1), [1, total]),
      position_ids: int64(ids.map((_, i) => start + i), [1, ids.length]),
    };
    pastNames.forEach((name, i) => { feeds[name] = past[i]; });
    return feeds;
  };
  const ms = (start) => Number(process.hrtime.bigint() - start) / 1e6;

  const rl = readline.createInterface({input: process.stdin, terminal: false});
  for await (const line of rl) {
    const words = line.trim().split(/\s+/u);
    if (words[0] === 'quit') break;
    const k = Number(words[1]);
    if (words[0] !== 'decode' || words.length !== 3 || !Number.isInteger(k) || k < 1) {
      fail(`bad command '${line}' (decode K ID,ID,... | quit)`);
    }
    const prompt = words[2].split(',').map(Number);
    try {
      let past = pastNames.map(() => new ort.Tensor('float32', new Float32Array(0), [1, kvHeads, 0, headDim]));
      let start = process.hrtime.bigint();
      let out = await session.run(feedsFor(prompt, 0, past));
      const prefillMs = ms(start);
      const tokens = [argmaxLastRow(out.logits)];
      const stepMs = [];
      let feeds = null;
      for (let step = 0; step <= k; ++step) {
        past = presentNames.map((name) => out[name]);
        feeds = feedsFor([tokens[tokens.length - 1]], prompt.length + step, past);
        start = process.hrtime.bigint();
        out = await session.run(feeds);
        const t = ms(start);
        if (step > 0) stepMs.push(t);
        tokens.push(argmaxLastRow(out.logits));
      }
      const logitsOnlyMs = [];
      for (let i = 0; i < k; ++i) {
        start = process.hrtime.bigint();
        await session.run(feeds, ['logits']);
        logitsOnlyMs.push(ms(start));
      }
      process.stdout.write(JSON.stringify({
        context: prompt.length, prefill_ms: prefillMs, step_ms: stepMs, tokens,
        logits_only_ms: logitsOnlyMs,
      }) + '\n');
    } catch (e) {
      fail(`decode: ${e.message}`);
    }
  }
  rl.close();
  process.exit(0);
}

main(process.argv.slice(2)).catch((e) => fail(e.message));
