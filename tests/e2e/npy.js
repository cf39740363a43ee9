// Reads and writes NumPy .npy files (format 1.0-3.0, little-endian, C order) for the e2e tools.
'use strict';

const fs = require('fs');

// NumPy descr -> [ONNX Runtime tensor type, typed array constructor].
const kDescrs = {
  '<f4': ['float32', Float32Array],
  '<f8': ['float64', Float64Array],
  '<i8': ['int64', BigInt64Array],
  '<i4': ['int32', Int32Array],
  '|i1': ['int8', Int8Array],
  '|u1': ['uint8', Uint8Array],
  '|b1': ['bool', Uint8Array],
};
const kTypeToDescr = Object.fromEntries(Object.entries(kDescrs).map(([d, [t]]) => [t, d]));
const kMagic = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]);  // "\x93NUMPY"

function parseHeader(text, file) {
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(text);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(text);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(text);
  if (!descr || !fortran || !shape) throw new Error(`${file}: malformed .npy header: ${text}`);
  if (fortran[1] === 'True') throw new Error(`${file}: Fortran-order arrays are not supported`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length > 0).map((s) => {
    if (!/^\d+$/.test(s)) throw new Error(`${file}: bad dimension '${s}' in .npy shape`);
    return Number(s);
  });
  // '<u1' and '|u1' mean the same for one-byte types; normalise to NumPy's usual spelling.
  let d = descr[1];
  if (/^[<=]/.test(d) && /[iub]1$/.test(d)) d = '|' + d.slice(1);
  if (d[0] === '=') d = '<' + d.slice(1);  // Native order; this tool only runs little-endian.
  if (!(d in kDescrs)) {
    throw new Error(`${file}: unsupported dtype '${descr[1]}' (supported: ` +
                    `${Object.values(kDescrs).map((v) => v[0]).join(', ')}; little-endian only)`);
  }
  return {descr: d, dims};
}

// Returns {type, dims, data} where type is the ONNX Runtime type name and data a typed array.
function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || !buf.subarray(0, 6).equals(kMagic)) {
    throw new Error(`${file}: not a .npy file (bad magic)`);
  }
  const major = buf[6];
  let headerLen;
  let headerStart;
  if (major === 1) {
    headerLen = buf.readUInt16LE(8);
    headerStart = 10;
  } else if (major === 2 || major === 3) {
    headerLen = buf.readUInt32LE(8);
    headerStart = 12;
  } else {
    throw new Error(`${file}: unsupported .npy version ${major}`);
  }
  if (headerStart + headerLen > buf.length) throw new Error(`${file}: truncated .npy header`);
  const header = buf.toString('latin1', headerStart, headerStart + headerLen);
  const {descr, dims} = parseHeader(header, file);
  const [type, Ctor] = kDescrs[descr];
  const count = dims.reduce((a, b) => a * b, 1);
  const dataStart = headerStart + headerLen;
  const bytes = count * Ctor.BYTES_PER_ELEMENT;
  if (buf.length - dataStart !== bytes) {
    throw new Error(`${file}: expected ${bytes} data bytes for shape [${dims}] ${type}, ` +
                    `found ${buf.length - dataStart}`);
  }
  // Copy into a fresh ArrayBuffer: Buffer's pooled memory need not be aligned for the type.
  const ab = buf.buffer.slice(buf.byteOffset + dataStart, buf.byteOffset + dataStart + bytes);
  return {type, dims, data: new Ctor(ab)};
}

// Writes a typed array as a version 1.0 .npy file; `type` is an ONNX Runtime type name.
function writeNpy(file, type, dims, data) {
  const descr = kTypeToDescr[type];
  if (!descr) throw new Error(`${file}: cannot write dtype '${type}' to .npy`);
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  // Pad with spaces so that the data starts on a 64-byte boundary, ending with '\n' as NumPy does.
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  kMagic.copy(pre, 0);
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), body]));
}

// Same rule as `kiln run --output-dir`: every char outside [A-Za-z0-9._-] becomes '_'.
function sanitize(name) {
  return name.replace(/[^A-Za-z0-9._-]/gu, '_');
}

module.exports = {readNpy, writeNpy, sanitize};
