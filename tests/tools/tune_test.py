#!/usr/bin/env python3
"""`kiln tune --op` (docs/dsl.md, "Tuning"): random search over a DSL example's schedule knobs is
reproducible with a seed and bounded by --trials, records one entry per (op, shape, target) in a
JSON database, and `kiln dsl --schedule tuned --tuning-db` lowers the recorded schedule. Bad
databases and arguments are errors with messages. No timing is asserted.

usage: tune_test.py KILN_BINARY WORK_DIR
"""
import json
import os
import re
import subprocess
import sys
import unittest

KILN = None
WORK = None


def kiln(*args, check=0):
    r = subprocess.run([KILN] + list(args), capture_output=True, text=True, timeout=300,
                       env={**os.environ, "KILN_DSL_CACHE_DIR": os.path.join(WORK, "dsl_cache")})
    if check is not None and r.returncode != check:
        raise AssertionError(f"kiln {' '.join(args)} exited {r.returncode}, expected {check}:\n{r.stdout}\n{r.stderr}")
    return r


def trials(stdout):
    """The knobs of each trial of the seeded random phase, in order (without the times). The local
    phase's (marked "local") follow the measured best, which timing noise may change."""
    return re.findall(r"^trial \d+: ([^:]+): [0-9.]+ us$", stdout, re.M)


def all_trials(stdout):
    return re.findall(r"^trial \d+: ([^:]+):", stdout, re.M)


class TuneTest(unittest.TestCase):
    def test_seeded_search_and_database(self):
        db = os.path.join(WORK, "db.json")
        if os.path.exists(db):
            os.remove(db)
        a = kiln("tune", "--op", "gelu_bias_add", "--shape", "8,64", "--trials", "3", "--seed", "7", "--reps", "3",
                 "--db", db)
        self.assertEqual(len(all_trials(a.stdout)), 3, a.stdout)
        self.assertEqual(len(trials(a.stdout)), 2, a.stdout)  # random phase: half the trials, rounded up
        self.assertIn("(local: a neighbour of the best)", a.stdout)
        self.assertEqual(len(set(all_trials(a.stdout))), 3, a.stdout)  # no point measured twice
        self.assertIn("best: ", a.stdout)
        b = kiln("tune", "--op", "gelu_bias_add", "--shape", "8,64", "--trials", "3", "--seed", "7", "--reps", "3",
                 "--db", db)
        self.assertEqual(trials(a.stdout), trials(b.stdout))  # the same seed, the same schedules
        c = kiln("tune", "--op", "gelu_bias_add", "--shape", "8,64", "--trials", "3", "--seed", "8", "--reps", "3")
        self.assertNotEqual(trials(a.stdout), trials(c.stdout))
        kiln("tune", "--op", "softmax", "--shape", "4,32", "--trials", "2", "--reps", "3", "--db", db)
        with open(db) as f:
            entries = json.load(f)["entries"]
        # One entry per (op, shape, target): the second gelu run replaced the first.
        self.assertEqual(sorted(e["op"] for e in entries), ["gelu_bias_add", "softmax"])
        gelu = next(e for e in entries if e["op"] == "gelu_bias_add")
        self.assertEqual(gelu["shape"], [8, 64])
        self.assertEqual(gelu["seed"], 7)
        best = re.search(r"^best: ([^:]+):", b.stdout, re.M).group(1)
        k = gelu["knobs"]
        self.assertEqual(best, f"fuse_rows={int(k['fuse_rows'])} keep={int(k['keep'])} row_split={k['row_split']} "
                               f"col_split={k['col_split']} lanes={k['lanes']} vec={k['vec']}")
        # kiln dsl lowers the recorded schedule (and times it).
        r = kiln("dsl", "--example", "gelu_bias_add", "--shape", "8,64", "--schedule", "tuned", "--tuning-db", db,
                 "--time", "3")
        self.assertIn("parallel for", r.stdout)
        self.assertIn("tuned schedule", r.stdout)
        # No entry for this shape: an error naming the way out.
        r = kiln("dsl", "--example", "gelu_bias_add", "--shape", "8,65", "--schedule", "tuned", "--tuning-db", db,
                 check=1)
        self.assertIn("run kiln tune --op gelu_bias_add first", r.stderr)

    def test_op_from_a_file(self):
        # An element-wise op of one's own: its compute in the custom-op text form. Only the knobs
        # that change its one loop nest are searched (fuse_rows, keep and lanes stay at 0/1/0).
        op = os.path.join(WORK, "pswish.expr")
        with open(op, "w") as f:
            f.write("(mul x0 (sigmoid (mul 1.5 x0)))\n")
        db = os.path.join(WORK, "db_file_op.json")
        if os.path.exists(db):
            os.remove(db)
        r = kiln("tune", "--op", op, "--shape", "4,64", "--trials", "4", "--reps", "3", "--db", db)
        self.assertIn("elementwise/1 (mul x0 (sigmoid (mul 1.5 x0))) [4, 64]", r.stdout)
        for knobs in all_trials(r.stdout):
            self.assertIn("fuse_rows=0 keep=1 ", knobs)
            self.assertIn(" lanes=0 ", knobs)
        with open(db) as f:
            (entry,) = json.load(f)["entries"]
        self.assertEqual(entry["op"], "elementwise/1 (mul x0 (sigmoid (mul 1.5 x0)))")
        self.assertEqual(entry["shape"], [4, 64])
        # Bad files: missing, not a compute, an attribute left unbound.
        r = kiln("tune", "--op", os.path.join(WORK, "missing.expr"), check=2)
        self.assertIn("neither an example", r.stderr)
        with open(op, "w") as f:
            f.write("(mul x0")
        r = kiln("tune", "--op", op, check=2)
        self.assertIn(op, r.stderr)
        with open(op, "w") as f:
            f.write("(mul x0 beta)")
        r = kiln("tune", "--op", op, check=2)
        self.assertIn("give numbers, not attribute names", r.stderr)

    def test_errors(self):
        bad = os.path.join(WORK, "bad.json")
        with open(bad, "w") as f:
            f.write("{\"entries\": [{\"op\": 3}]}")
        r = kiln("tune", "--op", "softmax", "--shape", "4,32", "--trials", "1", "--db", bad, check=1)
        self.assertIn("tuning database entry 0", r.stderr)
        with open(bad, "w") as f:
            f.write("not json")
        r = kiln("dsl", "--example", "softmax", "--schedule", "tuned", "--tuning-db", bad, check=1)
        self.assertIn("not JSON of the form", r.stderr)
        kiln("dsl", "--example", "softmax", "--schedule", "tuned", check=2)
        kiln("tune", "--shape", "4,32", check=2)
        kiln("tune", "--op", "softmax", "--shape", "4", check=2)
        kiln("tune", "--op", "softmax", "--trials", "0", check=2)
        kiln("tune", "--op", "conv", check=2)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    KILN, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    del sys.argv[1:]
    unittest.main(verbosity=2)
