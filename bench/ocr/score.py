#!/usr/bin/python3
"""Scores OCR results (the JSON of `kiln ocr --json`) against a ground_truth.json.

Usage:
    bench/ocr/score.py --truth DIR/ground_truth.json --results RESULTS.json [--json] [--show-errors]
    bench/ocr/score.py --self-test

ground_truth.json (bench/ocr/make_dataset.py, assets/ocr_samples.json):
    {"images": [{"file": "name.png", "lines": ["text", ...], "kind": "..." (optional)}]}
RESULTS.json (`kiln ocr --json`):
    {"images": [{"path": "DIR/name.png", "lines": [{"text": "...", "confidence": 0.97,
                 "box": [[x, y] x 4]}], "ms": 12.3}]}        (or "error": "..." for "lines")
A result belongs to the truth entry whose "file" its path ends with (the path's base name), so
the images may have been passed to the OCR with any directory prefix.

Matching. Per image, ground-truth and predicted lines are paired one to one so that the total
edit distance is least (the assignment problem, solved exactly by the Hungarian method; an
image has a few dozen lines at most). Pairing by content rather than by position means the
figures do not depend on the order the OCR lists its lines in. A truth line left without a
partner costs its length (deletions), a predicted line left over costs its length
(insertions), e.g. text found on a blank image or a line the detector split in two.

Figures:
  line accuracy   truth lines whose partner is exactly equal / truth lines
  CER             (edit distances of pairs + lengths of unpaired lines on both sides)
                  / truth characters; can pass 100% when the OCR invents text
Both under two normalisations: the primary one is Unicode NFKC with ALL white space removed,
because PP-OCR's Chinese recogniser often drops or adds spaces between words and NFKC folds
full-width forms (，：１) into ASCII ones; the second keeps spaces (NFKC, runs of white
space collapsed to one space, ends stripped). --json gives them as nospace/spaces dicts and
flat as exact_line_match, cer, exact_line_match_spaces, cer_spaces.

An image missing from the results, or with an "error", counts as predicting no lines. Exit
status is 0 whatever the scores (1 only for unreadable input), so a script can collect the
figures of a bad run too.
"""

import argparse
import itertools
import json
import random
import sys
import unicodedata

# ---- normalisation and distances --------------------------------------------------------------


def norm_nospace(text):
    """Primary normalisation: NFKC, then every white space character removed."""
    return "".join(unicodedata.normalize("NFKC", text).split())


def norm_spaces(text):
    """Secondary normalisation: NFKC, white space runs collapsed to one space, ends stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


NORMS = {"nospace": norm_nospace, "spaces": norm_spaces}


def edit_distance(a, b):
    """Levenshtein distance (insert, delete, substitute each cost 1) over code points."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def hungarian(cost):
    """Minimum-cost perfect assignment of a square matrix (list of lists of numbers).

    Returns assign with assign[row] = column. The O(n^3) shortest augmenting path form of the
    Hungarian method (Kuhn-Munkres with potentials).
    """
    n = len(cost)
    inf = float("inf")
    u = [0.0] * (n + 1)  # row potentials (1-based; index 0 is a sentinel)
    v = [0.0] * (n + 1)  # column potentials
    match = [0] * (n + 1)  # match[column] = row
    way = [0] * (n + 1)
    for row in range(1, n + 1):
        match[0] = row
        col0 = 0
        minv = [inf] * (n + 1)
        used = [False] * (n + 1)
        while True:
            used[col0] = True
            r0, delta, col1 = match[col0], inf, 0
            for col in range(1, n + 1):
                if not used[col]:
                    reduced = cost[r0 - 1][col - 1] - u[r0] - v[col]
                    if reduced < minv[col]:
                        minv[col], way[col] = reduced, col0
                    if minv[col] < delta:
                        delta, col1 = minv[col], col
            for col in range(n + 1):
                if used[col]:
                    u[match[col]] += delta
                    v[col] -= delta
                else:
                    minv[col] -= delta
            col0 = col1
            if match[col0] == 0:
                break
        while col0:  # flip the augmenting path
            col1 = way[col0]
            match[col0] = match[col1]
            col0 = col1
    assign = [0] * n
    for col in range(1, n + 1):
        assign[match[col] - 1] = col - 1
    return assign


def match_lines(truth, pred):
    """Pairs truth and predicted lines (already normalised) with least total edit distance.

    Returns (pairs, unmatched_pred): pairs holds (truth index, pred index or None, distance) for
    every truth line; unmatched_pred lists predicted indices left over. The square matrix has a
    "nobody" column per truth line (cost: its length) and a "nobody" row per predicted line
    (cost: its length), so leaving a line out is priced like deleting or inserting it.
    """
    nt, np_ = len(truth), len(pred)
    n = nt + np_
    if n == 0:
        return [], []
    dist = [[edit_distance(t, p) for p in pred] for t in truth]
    big = float(sum(len(s) for s in truth) + sum(len(s) for s in pred) + 1)
    cost = [[big] * n for _ in range(n)]
    for i in range(nt):
        for j in range(np_):
            cost[i][j] = dist[i][j]
        cost[i][np_ + i] = len(truth[i])  # truth line i unmatched
    for j in range(np_):
        cost[nt + j][j] = len(pred[j])  # predicted line j unmatched
        for k in range(nt):
            cost[nt + j][np_ + k] = 0  # dummy to dummy: free
    assign = hungarian(cost)
    pairs, used = [], set()
    for i in range(nt):
        j = assign[i]
        if j < np_:
            pairs.append((i, j, dist[i][j]))
            used.add(j)
        else:
            pairs.append((i, None, len(truth[i])))
    return pairs, [j for j in range(np_) if j not in used]


# ---- scoring ----------------------------------------------------------------------------------


def result_key(path):
    """Base name of a result path, whichever separator the OCR wrote."""
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def score(truth_doc, results_doc):
    """Scores a results document against a truth document; returns the report dict."""
    by_name = {}
    for entry in results_doc.get("images", []):
        by_name.setdefault(result_key(entry.get("path", "")), entry)

    report = {"images": 0, "truth_lines": 0, "missing_images": [], "error_images": [],
              "kinds": {}, "errors": []}
    totals = {name: {"chars": 0, "edits": 0, "exact": 0, "insertions": 0, "deletions": 0}
              for name in NORMS}
    ms = []
    for entry in truth_doc["images"]:
        name = entry["file"]
        result = by_name.get(result_key(name))
        if result is None:
            report["missing_images"].append(name)
            pred_raw = []
        elif "error" in result:
            report["error_images"].append({"file": name, "error": result["error"]})
            pred_raw = []
        else:
            pred_raw = [line.get("text", "") for line in result.get("lines", [])]
            if isinstance(result.get("ms"), (int, float)):
                ms.append(result["ms"])
        report["images"] += 1
        report["truth_lines"] += len(entry["lines"])
        kind = report["kinds"].setdefault(entry.get("kind", "all"),
                                          {"images": 0, "lines": 0, "chars": 0, "edits": 0, "exact": 0})
        kind["images"] += 1
        kind["lines"] += len(entry["lines"])
        for norm_name, norm in NORMS.items():
            truth = [norm(t) for t in entry["lines"]]
            # A box with no text read is not an insertion of text: drop empties, keeping the
            # raw text next to each normalised one for the error listing.
            kept = [(raw, norm(raw)) for raw in pred_raw if norm(raw)]
            pred = [n for _, n in kept]
            pairs, extra = match_lines(truth, pred)
            t = totals[norm_name]
            edits = sum(d for _, _, d in pairs) + sum(len(pred[j]) for j in extra)
            exact = sum(1 for i, j, d in pairs if j is not None and d == 0)
            t["chars"] += sum(len(s) for s in truth)
            t["edits"] += edits
            t["exact"] += exact
            t["insertions"] += len(extra)
            t["deletions"] += sum(1 for _, j, _ in pairs if j is None)
            if norm_name == "nospace":
                kind["chars"] += sum(len(s) for s in truth)
                kind["edits"] += edits
                kind["exact"] += exact
                # Mismatches, in the raw text as written, for --show-errors.
                for i, j, d in pairs:
                    if d:
                        report["errors"].append({"file": name, "truth": entry["lines"][i],
                                                 "pred": None if j is None else kept[j][0],
                                                 "distance": d})
                for j in extra:
                    report["errors"].append({"file": name, "truth": None,
                                             "pred": kept[j][0],
                                             "distance": len(pred[j])})

    lines = report["truth_lines"]
    for norm_name, t in totals.items():
        report[norm_name] = {
            "line_accuracy": t["exact"] / lines if lines else 1.0,
            "cer": t["edits"] / t["chars"] if t["chars"] else float(t["edits"] > 0),
            "exact_lines": t["exact"], "edits": t["edits"], "truth_chars": t["chars"],
            "unmatched_truth_lines": t["deletions"], "unmatched_pred_lines": t["insertions"],
        }
    for kind in report["kinds"].values():
        kind["line_accuracy"] = kind["exact"] / kind["lines"] if kind["lines"] else None
        kind["cer"] = kind["edits"] / kind["chars"] if kind["chars"] else None
    report["mean_ms"] = sum(ms) / len(ms) if ms else None
    # The headline figures again under flat names, for scripts that collect them.
    report["exact_line_match"] = report["nospace"]["line_accuracy"]
    report["cer"] = report["nospace"]["cer"]
    report["exact_line_match_spaces"] = report["spaces"]["line_accuracy"]
    report["cer_spaces"] = report["spaces"]["cer"]
    return report


def print_table(report, show_errors):
    p, s = report["nospace"], report["spaces"]
    print(f"images {report['images']}, truth lines {report['truth_lines']}, "
          f"truth characters {p['truth_chars']} (without spaces)")
    if report["missing_images"]:
        print(f"missing from the results: {len(report['missing_images'])} "
              f"({', '.join(report['missing_images'][:5])}{', ...' if len(report['missing_images']) > 5 else ''})")
    if report["error_images"]:
        print(f"images with an error: {len(report['error_images'])}")
    print()
    print(f"{'':24}{'line acc':>10}{'CER':>9}{'edits':>8}{'unmatched truth':>17}{'extra pred':>12}")
    for label, f in (("NFKC, no white space", p), ("NFKC, spaces kept", s)):
        print(f"{label:24}{f['line_accuracy']:>10.1%}{f['cer']:>9.2%}{f['edits']:>8}"
              f"{f['unmatched_truth_lines']:>17}{f['unmatched_pred_lines']:>12}")
    if len(report["kinds"]) > 1:
        print()
        print(f"{'by kind (no white space)':24}{'images':>8}{'lines':>7}{'line acc':>10}{'CER':>9}")
        for name, k in report["kinds"].items():
            acc = f"{k['line_accuracy']:.1%}" if k["line_accuracy"] is not None else "-"
            cer = f"{k['cer']:.2%}" if k["cer"] is not None else f"+{k['edits']} ch"
            print(f"{name:24}{k['images']:>8}{k['lines']:>7}{acc:>10}{cer:>9}")
    if report["mean_ms"] is not None:
        print(f"\nmean time per image: {report['mean_ms']:.1f} ms")
    if show_errors:
        print(f"\nmismatches (no white space compare): {len(report['errors'])}")
        for e in report["errors"]:
            truth = "(none)" if e["truth"] is None else repr(e["truth"])
            pred = "(none)" if e["pred"] is None else repr(e["pred"])
            print(f"  {e['file']}: truth {truth}  pred {pred}  distance {e['distance']}")
        for e in report["error_images"]:
            print(f"  {e['file']}: error {e['error']}")


# ---- self-test --------------------------------------------------------------------------------


def self_test():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "") == 3
    assert edit_distance("abc", "abc") == 0
    assert edit_distance("价格12元", "价格13元") == 1
    assert edit_distance("ab", "ba") == 2  # no transpositions in Levenshtein
    assert norm_nospace(" Ｔｏｔａｌ：  １２ ") == "Total:12"
    assert norm_spaces(" Ｔｏｔａｌ：  １２ \t") == "Total: 12"
    assert norm_nospace("价格，12元") == "价格,12元"

    # The assignment is optimal: compare with brute force over every pairing on random cases.
    rng = random.Random(1)
    for _ in range(300):
        truth = ["".join(rng.choice("abc") for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(0, 4))]
        pred = ["".join(rng.choice("abcd") for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(0, 4))]
        pairs, extra = match_lines(truth, pred)
        got = sum(d for _, _, d in pairs) + sum(len(pred[j]) for j in extra)
        best = float("inf")
        slots = list(range(len(pred))) + [None] * len(truth)
        for perm in itertools.permutations(slots, len(truth)):
            used = {j for j in perm if j is not None}
            cost = sum(len(t) if j is None else edit_distance(t, pred[j]) for t, j in zip(truth, perm))
            cost += sum(len(pred[j]) for j in range(len(pred)) if j not in used)
            best = min(best, cost)
        assert got == best, (truth, pred, got, best)
        assert sorted([j for _, j, _ in pairs if j is not None] + extra) == list(range(len(pred)))

    # End to end: out-of-order lines, one typo, one extra line, a missing image, an error.
    truth_doc = {"images": [
        {"file": "a.png", "lines": ["Hello world", "foo"]},
        {"file": "b.png", "lines": ["价格 12 元"]},
        {"file": "c.png", "lines": ["gone"]},
        {"file": "d.png", "lines": ["broken"]},
        {"file": "e.png", "lines": []},
    ]}
    results_doc = {"images": [
        {"path": "some/dir/a.png", "lines": [{"text": "fo0"}, {"text": "Hello  world"}, {"text": "xyz"}], "ms": 10},
        {"path": "C:\\data\\b.png", "lines": [{"text": "价格12元"}], "ms": 20},
        {"path": "d.png", "error": "decode failed"},
        {"path": "e.png", "lines": [{"text": "  "}]},
    ]}
    r = score(truth_doc, results_doc)
    p, s = r["nospace"], r["spaces"]
    # truth chars without spaces: 10 + 3 + 5 + 4 + 6 = 28; edits: 0 + 1 + 3 (xyz) + 0 + 4 + 6 = 14
    assert p["truth_chars"] == 28 and p["edits"] == 14, p
    assert p["exact_lines"] == 2 and abs(p["line_accuracy"] - 2 / 5) < 1e-12, p
    assert abs(p["cer"] - 14 / 28) < 1e-12
    assert p["unmatched_pred_lines"] == 1 and p["unmatched_truth_lines"] == 2, p
    # spaces kept: "价格 12 元" vs "价格12元" now differ by 2; truth chars 11 + 3 + 7 + 4 + 6 = 31
    assert s["truth_chars"] == 31 and s["edits"] == 16 and s["exact_lines"] == 1, s
    assert r["missing_images"] == ["c.png"] and r["error_images"][0]["file"] == "d.png"
    assert r["mean_ms"] == 15
    assert r["cer"] == p["cer"] and r["exact_line_match_spaces"] == s["line_accuracy"]
    print("score.py self-test: OK")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--truth", help="ground_truth.json")
    parser.add_argument("--results", help="output of kiln ocr --json")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--show-errors", action="store_true", help="list every mismatched line")
    parser.add_argument("--self-test", action="store_true", help="check the scoring logic and exit")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    if not args.truth or not args.results:
        parser.error("--truth and --results are required (or --self-test)")
    try:
        with open(args.truth, encoding="utf-8") as f:
            truth_doc = json.load(f)
        with open(args.results, encoding="utf-8") as f:
            results_doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"score.py: {e}", file=sys.stderr)
        return 1
    report = score(truth_doc, results_doc)
    if args.json:
        if not args.show_errors:
            del report["errors"]
        json.dump(report, sys.stdout, ensure_ascii=False, indent=1)
        print()
    else:
        print_table(report, args.show_errors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
