#!/usr/bin/env python3
"""`kiln comm-bench` as a user runs it: every collective with --ranks 3 (threads) and the data
check on, several types and reduce ops, one rank per process under `mpirun -np 2` and with
KILN_RANK / KILN_WORLD_SIZE / KILN_ROOT_ADDR, and bad arguments (exit code 2, one-line error
naming the argument). Checks the table: the sizes of the sweep, #wrong 0, and busbw = algbw x
nccl-tests' factor; the time itself is not checked (it depends on the machine).

usage: comm_bench_test.py KILN
"""
import os
import shutil
import socket
import subprocess
import sys
import time

KILN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
FACTORS = {  # busbw / algbw for n ranks
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1,
    "reduce": lambda n: 1,
}
failures = []


def env_clean(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "KILN_RANK", "KILN_WORLD_SIZE", "KILN_ROOT_ADDR"))}
    env["KILN_COMM_TIMEOUT"] = "20"
    env.update(extra or {})
    return env


def run(cmd, timeout=60, env=None):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or env_clean(),
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        return None, out, err
    return p.returncode, out, err


def check(name, ok, detail=""):
    print("[%s] %s%s" % ("  OK  " if ok else " FAIL ", name, ("\n    " + detail.replace("\n", "\n    ")) if not ok and detail else ""),
          flush=True)
    if not ok:
        failures.append(name)


def rows(out):
    table = []
    for line in out.splitlines():
        f = line.split()
        if line.startswith("#") or len(f) != 9:
            continue
        table.append({"size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3], "root": int(f[4]),
                      "time": float(f[5]), "algbw": float(f[6]), "busbw": float(f[7]), "wrong": int(f[8])})
    return table


def check_table(name, out, coll, n, sizes, dtype, redop, elem):
    t = rows(out)
    problems = []
    if [r["size"] for r in t] != sizes:
        problems.append("sizes %s, expected %s" % ([r["size"] for r in t], sizes))
    for r in t:
        if r["wrong"] != 0:
            problems.append("%d wrong elements at size %d" % (r["wrong"], r["size"]))
        if r["type"] != dtype or r["redop"] != redop:
            problems.append("type/redop %s/%s, expected %s/%s" % (r["type"], r["redop"], dtype, redop))
        if r["count"] * elem != r["size"]:
            problems.append("count %d of %d-byte elements is not size %d" % (r["count"], elem, r["size"]))
        if r["time"] <= 0:
            problems.append("time %.2f at size %d" % (r["time"], r["size"]))
        # algbw and busbw are printed with 2 decimals.
        if abs(r["busbw"] - r["algbw"] * FACTORS[coll](n)) > 0.011 + 0.01 * r["busbw"]:
            problems.append("busbw %.2f is not algbw %.2f x %.3f" % (r["busbw"], r["algbw"], FACTORS[coll](n)))
    check(name, not problems, "\n".join(problems) + "\n" + out[-1500:])


def sweep(lo, hi, f, n, divide):
    sizes, s = [], lo
    while True:
        sizes.append(s)
        if s == 0 or s > hi // f:
            break
        s *= f
    # Collectives that split the buffer round it down to a multiple of n elements (fp32 here).
    return [(x // 4 // n) * n * 4 if divide else x for x in sizes]


def main():
    if KILN is None or not os.access(KILN, os.X_OK):
        print(__doc__)
        return 2
    start = time.monotonic()
    n = 3
    for coll in FACTORS:
        rc, out, err = run([KILN, "comm-bench", coll, "--ranks", str(n), "-b", "8", "-e", "256K", "-f", "8", "-n", "3",
                            "-w", "1", "-c", "1", "--root", "2"])
        name = "threads %s --ranks %d -c 1" % (coll, n)
        if rc != 0:
            check(name, False, "exit %s\n%s%s" % (rc, out[-1500:], err[-1500:]))
            continue
        divide = coll in ("allgather", "reducescatter", "alltoall")
        redop = "sum" if coll in ("allreduce", "reducescatter", "reduce") else "none"
        check_table(name, out, coll, n, sweep(8, 256 << 10, 8, n, divide), "fp32", redop, 4)
        if coll in ("broadcast", "reduce"):
            check(name + " root column", all(r["root"] == 2 for r in rows(out)), out[-800:])

    for dtype, op, elem in [("int8", "prod", 1), ("bf16", "max", 2), ("fp16", "sum", 2), ("uint64", "min", 8),
                            ("fp64", "sum", 8), ("int32", "prod", 4)]:
        rc, out, err = run([KILN, "comm-bench", "allreduce", "--ranks", "4", "-b", "64", "-e", "64K", "-f", "32",
                            "-n", "2", "-w", "1", "-c", "1", "-d", dtype, "-o", op])
        name = "threads allreduce --ranks 4 -d %s -o %s -c 1" % (dtype, op)
        if rc != 0:
            check(name, False, "exit %s\n%s%s" % (rc, out[-1500:], err[-1500:]))
            continue
        check_table(name, out, "allreduce", 4, [64, 2048, 65536], dtype, op, elem)

    if shutil.which("mpirun"):
        cmd = ["mpirun", "-np", "2", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
        rc, out, err = run(cmd + [KILN, "comm-bench", "allreduce", "-b", "8", "-e", "1M", "-f", "4", "-n", "3",
                                  "-w", "1", "-c", "1"], timeout=90)
        name = "mpirun -np 2 comm-bench allreduce -c 1"
        if rc != 0:
            check(name, False, "exit %s\n%s%s" % (rc, out[-1500:], err[-1500:]))
        else:
            check_table(name, out, "allreduce", 2, sweep(8, 1 << 20, 4, 2, False), "fp32", "sum", 4)
            check(name + " prints once", out.count("# Avg bus bandwidth") == 1, out[-800:])
    else:
        print("[ SKIP ] mpirun not found")

    # Two processes through KILN_RANK / KILN_WORLD_SIZE / KILN_ROOT_ADDR.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        env = env_clean({"KILN_RANK": str(r), "KILN_WORLD_SIZE": "2", "KILN_ROOT_ADDR": "127.0.0.1:%d" % port})
        procs.append(subprocess.Popen([KILN, "comm-bench", "reducescatter", "-b", "64", "-e", "64K", "-f", "32",
                                       "-n", "2", "-w", "1", "-c", "1", "-o", "max"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, start_new_session=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=60) + (p.returncode,))
        except subprocess.TimeoutExpired:
            for q in procs:
                os.killpg(q.pid, 9)
            outs.append(p.communicate() + (None,))
    name = "KILN_RANK processes reducescatter -o max -c 1"
    if any(o[2] != 0 for o in outs):
        check(name, False, "\n".join("exit %s: %s%s" % (o[2], o[0][-800:], o[1][-800:]) for o in outs))
    else:
        check_table(name, outs[0][0], "reducescatter", 2, [64, 2048, 65536], "fp32", "max", 4)
        check(name + ": rank 1 prints nothing", rows(outs[1][0]) == [], outs[1][0][-500:])

    for args, needle in [(["allreduc"], "unknown collective 'allreduc'"), (["allreduce", "-d", "fp31"], "-d fp31"),
                         (["allreduce", "-o", "avg"], "-o avg"), (["allreduce", "-b", "1M", "-e", "8"], "-b 1M"),
                         (["allreduce", "-e", "12X"], "-e 12X"), (["allreduce", "-f", "1"], "-f 1"),
                         (["allreduce", "-n", "0"], "-n 0"), (["allreduce", "-c", "2"], "-c 2"),
                         (["broadcast", "--ranks", "2", "--root", "5"], "--root 5"),
                         (["allreduce", "--ranks", "0"], "--ranks 0")]:
        rc, out, err = run([KILN, "comm-bench"] + args, timeout=20)
        check("bad arguments: %s" % " ".join(args),
              rc == 2 and needle in err and err.startswith("kiln comm-bench: error:") and err.count("\n") == 1,
              "exit %s, stderr %r" % (rc, err))
    rc, out, err = run([KILN, "comm-bench", "allreduce", "-e", "64"], timeout=20)
    check("no launcher environment and no --ranks", rc == 1 and "KILN_RANK" in err and "--ranks" in err,
          "exit %s, stderr %r" % (rc, err))

    print("%d failed, %.1f s" % (len(failures), time.monotonic() - start))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
