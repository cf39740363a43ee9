// onnxruntime-node's per-call time of session.run on the models of bench/python/overhead.py
// (ONNX Runtime's Python wheel is not installable offline here; its Node binding is, through
// npm, and is the nearest measure of ORT's per-call overhead from a scripting language).
//
// Usage: node bench/python/ort_node_overhead.js MODEL.onnx [RUNS] [REPEATS]
// Prints {"median_us": ...}: the median over REPEATS blocks of the mean time per run.
const path = require("path");
const ort = require(path.join(process.cwd(), "node_modules", "onnxruntime-node"));

async function main() {
  const [model, runs = "2000", repeats = "7"] = process.argv.slice(2);
  const sess = await ort.InferenceSession.create(model, { intraOpNumThreads: 1, interOpNumThreads: 1 });
  const x = new ort.Tensor("float32", new Float32Array(16), [1, 16]);
  const feeds = { [sess.inputNames[0]]: x };
  for (let i = 0; i < Number(runs) / 10; ++i) await sess.run(feeds);
  const means = [];
  for (let r = 0; r < Number(repeats); ++r) {
    const t = process.hrtime.bigint();
    for (let i = 0; i < Number(runs); ++i) await sess.run(feeds);
    means.push(Number(process.hrtime.bigint() - t) / 1e3 / Number(runs));
  }
  means.sort((a, b) => a - b);
  console.log(JSON.stringify({ median_us: means[Math.floor(means.length / 2)] }));
}
main().catch((e) => { console.log(JSON.stringify({ error: String(e) })); process.exit(1); });
