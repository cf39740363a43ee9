// Command line, timing and output shared by the two OCR peers of bench/ocr/ocr_bench.sh
// (guten_ocr.mjs, ort_pipeline.mjs), so that both print exactly what `kiln ocr --json` prints:
//
//   {"images": [{"path": "<as given>", "lines": [{"text": "...", "confidence": 0.97,
//                "box": [[x1,y1],[x2,y2],[x3,y3],[x4,y4]]}], "ms": 12.3}, ...],
//    "total_ms": ..., "images_per_s": ...}
//
// Lines in reading order, box corners clockwise from the top-left, in pixels of the original
// image; an image that fails is {"path": ..., "error": "..."}. `ms` is the wall time of one image
// (file read and decode to the last line, model load excluded); `total_ms` the wall time of the
// timed pass over all images, after --warmup untimed passes over the first one; `images_per_s`
// counts every image of the timed pass, failed ones included.

import fs from 'node:fs';

export function usage(name, extra = '') {
  return `usage: node bench/ocr/${name} [--threads N] [--warmup K] [--json] IMAGE... ` +
      `('-' reads image paths from stdin, one a line)${extra}`;
}

export function fail(msg, status = 1) {
  process.stderr.write(`${msg}\n`);
  process.exit(status);
}

// Parses argv (without node and the script); returns {threads, warmup, json, images}.
export function parseArgs(argv, name) {
  const opts = {threads: 1, warmup: 1, json: false, images: []};
  const count = (flag, value, min) => {
    const n = Number(value);
    if (value === undefined || !Number.isInteger(n) || n < min) {
      fail(`${name}: ${flag} needs an integer >= ${min}, got '${value ?? ''}'`);
    }
    return n;
  };
  let readStdin = false;
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === '--threads') opts.threads = count(a, argv[++i], 1);
    else if (a.startsWith('--threads=')) opts.threads = count('--threads', a.slice(10), 1);
    else if (a === '--warmup') opts.warmup = count(a, argv[++i], 0);
    else if (a.startsWith('--warmup=')) opts.warmup = count('--warmup', a.slice(9), 0);
    else if (a === '--json') opts.json = true;
    else if (a === '-h' || a === '--help') { process.stdout.write(usage(name) + '\n'); process.exit(0); }
    else if (a === '-') readStdin = true;
    else if (a.startsWith('--')) fail(`${name}: unknown option '${a}'\n${usage(name)}`);
    else opts.images.push(a);
  }
  if (readStdin) {
    for (const line of fs.readFileSync(0, 'utf8').split('\n')) {
      const p = line.replace(/\r$/, '');
      if (p.trim() !== '') opts.images.push(p);
    }
  }
  if (opts.images.length === 0) fail(`${name}: no images\n${usage(name)}`);
  return opts;
}

const round = (x, digits) => Number(x.toFixed(digits));

// Runs `ocr(path) -> lines` over the images (after the warm-up passes) and prints the result.
// `ocr` throws for an image that fails; that image gets {"path", "error"}.
export async function runAndReport(opts, ocr, describe) {
  if (opts.warmup > 0) {
    for (let k = 0; k < opts.warmup; ++k) {
      try {
        await ocr(opts.images[0]);
      } catch (e) {
        break;  // the timed pass reports it
      }
    }
  }
  const images = [];
  const t0 = performance.now();
  for (const path of opts.images) {
    const s = performance.now();
    try {
      const lines = await ocr(path);
      const ms = performance.now() - s;
      images.push({
        path,
        lines: lines.map((l) => ({
          text: l.text,
          confidence: round(l.confidence, 6),
          box: l.box.map(([x, y]) => [Math.round(x), Math.round(y)]),
        })),
        ms: round(ms, 3),
      });
    } catch (e) {
      images.push({path, error: String(e && e.message ? e.message : e).split('\n')[0]});
    }
  }
  const totalMs = performance.now() - t0;
  const result = {
    images,
    total_ms: round(totalMs, 3),
    images_per_s: round(totalMs > 0 ? (images.length * 1000) / totalMs : 0, 3),
  };
  if (opts.json) {
    process.stdout.write(JSON.stringify(result) + '\n');
    return result;
  }
  const out = [`${describe}, ${opts.threads} thread(s), warm-up ${opts.warmup}`];
  for (const img of images) {
    if (img.error) {
      out.push(`${img.path}: error: ${img.error}`);
      continue;
    }
    out.push(`${img.path}: ${img.lines.length} line(s), ${img.ms.toFixed(1)} ms`);
    for (const l of img.lines) {
      const b = l.box.map(([x, y]) => `${x},${y}`).join(' ');
      out.push(`  ${l.confidence.toFixed(3)}  [${b}]  ${l.text}`);
    }
  }
  out.push(`${images.length} image(s) in ${result.total_ms.toFixed(1)} ms: ` +
           `${result.images_per_s.toFixed(2)} images/s`);
  process.stdout.write(out.join('\n') + '\n');
  return result;
}
