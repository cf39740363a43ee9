// Runs an ONNX model's first input through ONNX Runtime (1 thread) and writes its first output
// as .npy: node ort_run.js MODEL INPUT.npy OUTPUT.npy (KILN_REPO: where node_modules is).
const ort = require(require('path').join(process.env.KILN_REPO, 'node_modules', 'onnxruntime-node'));
const fs = require('fs');
function readNpy(path) {
  const buf = fs.readFileSync(path);
  const hlen = buf.readUInt16LE(8);
  const header = buf.slice(10, 10 + hlen).toString('latin1');
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter(s => s.trim()).map(s => parseInt(s));
  const data = new Float32Array(buf.buffer.slice(buf.byteOffset + 10 + hlen, buf.byteOffset + buf.length));
  return { shape, data };
}
function writeNpy(path, shape, data) {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${shape.join(', ')}${shape.length === 1 ? ',' : ''}), }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header = header + ' '.repeat(pad) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1'); pre[6] = 1; pre[7] = 0; pre.writeUInt16LE(header.length, 8);
  fs.writeFileSync(path, Buffer.concat([pre, Buffer.from(header, 'latin1'), Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}
(async () => {
  const [model, input, output] = process.argv.slice(2);
  const s = await ort.InferenceSession.create(model, { graphOptimizationLevel: 'all', intraOpNumThreads: 1 });
  const x = readNpy(input);
  const r = await s.run({ [s.inputNames[0]]: new ort.Tensor('float32', x.data, x.shape) });
  const y = r[s.outputNames[0]];
  writeNpy(output, y.dims, y.data);
  console.log('ort output', y.dims.join('x'));
})();
