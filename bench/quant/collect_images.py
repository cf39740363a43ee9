#!/usr/bin/python3
"""Real images for INT8 calibration and evaluation (issue 28), from Debian packages.

Installs (apt-get, when run as root and a package is missing) and gathers:

  photos    desktop wallpapers (gnome-backgrounds, mate-backgrounds, plasma-workspace-wallpapers,
            ukui-wallpapers, lomiri-wallpapers*, sway-backgrounds, xfdesktop4-data, desktop-base):
            photographs and artwork; scikit-image's sample images (python3-skimage); darknet's
            sample photographs (dog, horses, eagle, giraffe, kite, person, The Scream)
  drawings  openclipart-png: clip art, alpha composited on white

Sources are assigned to a split (calibration / evaluation) with a fixed seed BEFORE any sample
is made, so no source image (and no crop of it) is in both splits. Each split is about half
photo samples and half drawing samples (--photo-fraction). There are far fewer distinct photos
than samples wanted, so each photo gives its centre crop (shorter side to 256, centre 224x224:
the torchvision ImageNet evaluation transform) and then deterministic random crops (area 10% to
60% of the image, aspect 3/4 to 4/3, horizontal flip with probability 1/2, resized to 224x224),
round-robin over the split's photos, until the split's photo quota is met. Drawings are padded
to a white square (the whole drawing stays in view) and resized; each drawing is used once.

Writes into OUT (default models/quant-data, relative to the repository root):

  OUT/calibration/000000.npy ...     float32 [1,3,224,224] NCHW, RGB, (x/255 - mean) / std
  OUT/evaluation/000000.npy ...      with the ImageNet mean/std
  OUT/calibration-png/000000.png ... the same samples as 224x224 RGB PNGs
  OUT/evaluation-png/000000.png ...
  OUT/manifest.json                  parameters, and per sample its source, kind and crop

The .npy folders are `kiln quantize --calibration` layout 2 (plain .npy files); the -png folders
are its image layout (with --preprocess
resize=224,224:mean=0.485,0.456,0.406:std=0.229,0.224,0.225). Idempotent: a second run with the
same parameters finds the manifest and its files and does nothing; other parameters rebuild.

usage: collect_images.py [OUT] [--calibration 200] [--evaluation 600] [--seed 28]
                         [--photo-fraction 0.5] [--no-install] [--jobs 2]
"""

import argparse
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))

PACKAGES = [
    "gnome-backgrounds", "mate-backgrounds", "plasma-workspace-wallpapers", "ukui-wallpapers",
    "lomiri-wallpapers", "lomiri-wallpapers-16.04", "lomiri-wallpapers-20.04",
    "sway-backgrounds", "xfdesktop4-data", "desktop-base", "python3-skimage", "darknet",
    "openclipart-png",
]
PHOTO_DIRS = [
    "/usr/share/backgrounds", "/usr/share/wallpapers", "/usr/share/desktop-base",
    "/usr/lib/python3/dist-packages/skimage/data", "/usr/share/darknet/data",
]
CLIPART_DIR = "/usr/share/openclipart/png"
EXTS = (".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".bmp")
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
SIZE = 224
MIN_PHOTO_SIDE = 256   # skimage's tiny test images and theme icons are left out
MIN_CLIP_SIDE = 200
MIN_STD = 12.0         # random crops flatter than this (pixel std, 0..255) are re-drawn
MIN_INK = 0.05         # drawings with less than 5% non-white pixels after padding are skipped
VERSION = 2            # bump when the sample recipe changes
Image.MAX_IMAGE_PIXELS = None   # some wallpapers are > 100 megapixels


def install(packages):
    missing = [p for p in packages
               if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"missing Debian packages (run as root, or install them): {' '.join(missing)}")
    print(f"apt-get install {' '.join(missing)}", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends"] + missing, env=env,
                       stdout=subprocess.DEVNULL)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends"] + missing,
                       env=env, stdout=subprocess.DEVNULL, check=True)


def image_size(path):
    try:
        with Image.open(path) as im:
            return im.size
    except Exception:
        return None


RES_NAME = re.compile(r"^\d+x\d+\.\w+$")


def photo_sources():
    """Distinct photos: of a folder of one image in several resolutions (WxH.png, as plasma
    and desktop-base ship them) only the largest; exact duplicates (same bytes) once."""
    found = []
    for top in PHOTO_DIRS:
        for root, dirs, files in os.walk(top):
            dirs.sort()
            imgs = sorted(f for f in files if f.lower().endswith(EXTS))
            res = [f for f in imgs if RES_NAME.match(f)]
            if res:   # keep the largest resolution only
                best = max(res, key=lambda f: int(f.split("x")[0]) * int(f.split("x")[1].split(".")[0]))
                imgs = [f for f in imgs if f not in res] + [best]
            for f in imgs:
                p = os.path.join(root, f)
                if os.path.islink(p):
                    continue
                sz = image_size(p)
                if sz and min(sz) >= MIN_PHOTO_SIDE:
                    found.append(p)
    return dedupe(found)


def clipart_sources():
    found = []
    for root, dirs, files in os.walk(CLIPART_DIR):
        dirs.sort()
        for f in sorted(files):
            if f.lower().endswith(".png"):
                p = os.path.join(root, f)
                if os.path.getsize(p) < 8000:
                    continue
                sz = image_size(p)
                if sz and min(sz) >= MIN_CLIP_SIDE and max(sz) <= 4 * min(sz):
                    found.append(p)
    return dedupe(found)


def dedupe(paths):
    seen, out = set(), []
    for p in paths:
        with open(p, "rb") as f:
            h = hashlib.sha1(f.read()).hexdigest()
        if h not in seen:
            seen.add(h)
            out.append(p)
    return out


def to_rgb(im, background=(255, 255, 255)):
    if im.mode in ("RGBA", "LA", "P", "PA") or "transparency" in im.info:
        im = im.convert("RGBA")
        bg = Image.new("RGBA", im.size, background + (255,))
        im = Image.alpha_composite(bg, im)
    if im.mode in ("I;16", "I;16B", "I", "F"):   # 16-bit / float greyscale TIFFs
        a = np.asarray(im, np.float64)
        a = (a - a.min()) / max(a.max() - a.min(), 1e-12) * 255.0
        im = Image.fromarray(a.astype(np.uint8))
    return im.convert("RGB")


def centre_crop(im):
    w, h = im.size
    s = 256.0 / min(w, h)
    im = im.resize((max(SIZE, round(w * s)), max(SIZE, round(h * s))), Image.BILINEAR)
    w, h = im.size
    l, t = (w - SIZE) // 2, (h - SIZE) // 2
    return im.crop((l, t, l + SIZE, t + SIZE)), {"crop": "centre"}


def random_crop(im, rng):
    """A random crop; up to 10 tries for one that is not flat (pixel std >= MIN_STD)."""
    for _ in range(10):
        out, meta = random_crop_once(im, rng)
        if np.asarray(out, np.float32).std() >= MIN_STD:
            break
    return out, meta


def random_crop_once(im, rng):
    w, h = im.size
    for _ in range(20):
        area = w * h * rng.uniform(0.10, 0.60)
        ar = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        cw, ch = int(round(np.sqrt(area * ar))), int(round(np.sqrt(area / ar)))
        if 0 < cw <= w and 0 < ch <= h:
            break
    else:
        cw = ch = min(w, h)
    l, t = int(rng.randint(0, w - cw + 1)), int(rng.randint(0, h - ch + 1))
    flip = bool(rng.rand() < 0.5)
    out = im.crop((l, t, l + cw, t + ch)).resize((SIZE, SIZE), Image.BILINEAR)
    if flip:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    return out, {"crop": [l, t, cw, ch], "flip": flip}


def pad_square(im):
    w, h = im.size
    s = max(w, h)
    bg = Image.new("RGB", (s, s), (255, 255, 255))
    bg.paste(im, ((s - w) // 2, (s - h) // 2))
    return bg.resize((SIZE, SIZE), Image.BILINEAR), {"crop": "pad-square"}


def normalise(im):
    a = np.asarray(im, np.float32) / 255.0
    a = (a - MEAN) / STD
    return np.ascontiguousarray(a.transpose(2, 0, 1)[None])


def make_source(job):
    """One source image -> its samples [(split, index, meta)], written to disk."""
    path, kind, samples, out, seed = job
    im = Image.open(path)
    if im.format == "JPEG" and min(im.size) > 3200:   # decode big JPEGs at reduced scale
        im.draft("RGB", (im.size[0] // 2, im.size[1] // 2))
    im = to_rgb(im)
    if min(im.size) > 1600:   # decode once, work on a 1600-px version (crops stay >= 224 px)
        s = 1600.0 / min(im.size)
        im = im.resize((round(im.size[0] * s), round(im.size[1] * s)), Image.BILINEAR)
    rng = np.random.RandomState(seed)
    metas = []
    for (split, idx, n) in samples:
        if kind == "drawing":
            crop, meta = pad_square(im)
            ink = (np.abs(np.asarray(crop, np.int16) - 255).max(axis=2) > 32).mean()
            if ink < MIN_INK:
                return [{"index": idx, "split": split, "source": path, "rejected": True}]
        elif n == 0:
            crop, meta = centre_crop(im)
        else:
            crop, meta = random_crop(im, rng)
        name = f"{idx:06d}"
        np.save(os.path.join(out, split, name + ".npy"), normalise(crop))
        crop.save(os.path.join(out, split + "-png", name + ".png"), optimize=False)
        meta.update(index=idx, split=split, source=path, kind=kind)
        metas.append(meta)
    return metas


def plan(photos, drawings, args):
    rng = np.random.RandomState(args.seed)
    photos = [photos[i] for i in rng.permutation(len(photos))]
    drawings = [drawings[i] for i in rng.permutation(len(drawings))]
    total = args.calibration + args.evaluation
    n_cal_photo_src = max(1, round(len(photos) * args.calibration / total))
    photo_split = {"calibration": photos[:n_cal_photo_src], "evaluation": photos[n_cal_photo_src:]}
    jobs = {}   # path -> (kind, [(split, index, n-th sample of the source)])
    d_next = 0
    for split, n in (("calibration", args.calibration), ("evaluation", args.evaluation)):
        n_photo = round(n * args.photo_fraction)
        n_draw = n - n_photo
        if d_next + n_draw > len(drawings):
            sys.exit(f"only {len(drawings)} distinct drawings; ask for fewer samples")
        src = photo_split[split]
        kinds = [("photo", src[k % len(src)], k // len(src)) for k in range(n_photo)]
        kinds += [("drawing", drawings[d_next + k], 0) for k in range(n_draw)]
        d_next += n_draw
        order = rng.permutation(len(kinds))   # photos and drawings interleaved in index order
        for idx, k in enumerate(order):
            kind, path, nth = kinds[k]
            jobs.setdefault(path, (kind, []))[1].append((split, idx, nth))
    return jobs, drawings, d_next


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", default=os.path.join(SRC, "models", "quant-data"))
    p.add_argument("--calibration", type=int, default=200)
    p.add_argument("--evaluation", type=int, default=600)
    p.add_argument("--seed", type=int, default=28)
    p.add_argument("--photo-fraction", type=float, default=0.5)
    p.add_argument("--no-install", action="store_true")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    params = {"version": VERSION, "calibration": args.calibration, "evaluation": args.evaluation,
              "seed": args.seed, "photo_fraction": args.photo_fraction, "size": SIZE,
              "mean": MEAN.tolist(), "std": STD.tolist()}

    man_path = os.path.join(out, "manifest.json")
    if os.path.exists(man_path):
        with open(man_path) as f:
            old = json.load(f)
        if old.get("params") == params and all(
                os.path.exists(os.path.join(out, s["split"], f"{s['index']:06d}.npy"))
                for s in old["samples"]):
            print(f"{out}: up to date ({old['counts']})")
            print(json.dumps({"out": out, **old["counts"]}))
            return 0

    if not args.no_install:
        install(PACKAGES)
    photos, drawings = photo_sources(), clipart_sources()
    print(f"distinct sources: {len(photos)} photos / wallpapers, {len(drawings)} drawings",
          flush=True)
    if not photos or not drawings:
        sys.exit("no source images found (are the Debian packages installed?)")
    jobs, drawings, d_next = plan(photos, drawings, args)

    for split in ("calibration", "evaluation"):
        for d in (split, split + "-png"):
            shutil.rmtree(os.path.join(out, d), ignore_errors=True)
            os.makedirs(os.path.join(out, d))
    if os.path.exists(man_path):
        os.remove(man_path)
    work = [(path, kind, samples, out, args.seed * 1000003 + i)
            for i, (path, (kind, samples)) in enumerate(sorted(jobs.items()))]
    work.sort(key=lambda j: -len(j[2]))   # the big multi-crop photos first
    metas = []
    with multiprocessing.Pool(max(1, args.jobs)) as pool:
        while work:
            rejected = []
            for m in pool.imap_unordered(make_source, work, chunksize=4):
                for x in m:
                    (rejected if x.get("rejected") else metas).append(x)
            # a nearly blank drawing: its index gets the next unused drawing, in order
            rejected.sort(key=lambda x: (x["split"], x["index"]))
            if d_next + len(rejected) > len(drawings):
                sys.exit("ran out of drawings")
            work = [(drawings[d_next + i], "drawing", [(x["split"], x["index"], 0)], out,
                     args.seed * 1000003 + 999983 + d_next + i) for i, x in enumerate(rejected)]
            d_next += len(rejected)
    metas.sort(key=lambda m: (m["split"], m["index"]))

    counts = {}
    for split in ("calibration", "evaluation"):
        ms = [m for m in metas if m["split"] == split]
        counts[split] = len(ms)
        counts[split + "_photo_samples"] = sum(m["kind"] == "photo" for m in ms)
        counts[split + "_drawing_samples"] = sum(m["kind"] == "drawing" for m in ms)
        counts[split + "_photo_sources"] = len({m["source"] for m in ms if m["kind"] == "photo"})
    counts["photo_sources_found"] = len(photos)
    counts["drawing_sources_found"] = len(drawings)
    with open(man_path + ".tmp", "w") as f:
        json.dump({"params": params, "counts": counts, "samples": metas}, f, indent=0)
    os.replace(man_path + ".tmp", man_path)
    for split in ("calibration", "evaluation"):
        print(f"{split}: {counts[split]} samples = {counts[split + '_photo_samples']} photo crops "
              f"from {counts[split + '_photo_sources']} photos + "
              f"{counts[split + '_drawing_samples']} drawings  -> {os.path.join(out, split)}")
    print(json.dumps({"out": out, **counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
