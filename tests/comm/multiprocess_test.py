#!/usr/bin/env python3
"""Multi-process tests of the communication library, one rank per process.

Starts worlds of tests/comm/worker/comm_worker:
  - shared memory between processes: 2, 3, 4 and 8 ranks (KILN_RANK / KILN_WORLD_SIZE /
    KILN_ROOT_ADDR), each running the correctness matrix (every collective x dtype x reduce op,
    counts 0, 1, 7, 1031 and larger, in-place and out-of-place, against a serial computation);
  - TCP (KILN_COMM_TRANSPORT=tcp): 2, 3, 4 and 8 ranks;
  - `mpirun -np 4` (OpenMPI's environment only);
  - faults: a rank SIGKILLed or SIGSTOPped in the middle of an AllReduce, or hung (alive,
    its stream blocked in a host callback); every other rank must fail within
    KILN_COMM_TIMEOUT with a message naming that rank and the operation.
Every process has a deadline and is killed (its whole process group) when it passes it.

usage: multiprocess_test.py COMM_WORKER [CASE ... | matrix | faults | hangs]   (no CASE: all;
       "matrix": the worlds running the correctness matrix, "faults": killed and stopped
       ranks, "hangs": hung ranks)
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import time

WORKER = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
FAULT_TIMEOUT = 2  # KILN_COMM_TIMEOUT of the fault tests, seconds
SLACK = 1.5  # allowed past the timeout: scheduling on 2 busy cores


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(extra):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("OMPI_", "PMIX_", "KILN_RANK", "KILN_WORLD_SIZE", "KILN_ROOT_ADDR", "KILN_COMM_")):
            del env[k]
    env.update(extra)
    return env


def kill_group(p):
    try:
        os.killpg(p.pid, 9)
    except ProcessLookupError:
        pass


def wait_all(procs, deadline, last=None):
    """Waits for every process until `deadline` and kills those still running then; the
    process `last` (an index) is waited for after the others and killed as soon as they are
    done. Returns ([(returncode, stdout, stderr)], timed_out)."""
    timed_out = False
    outs = [None] * len(procs)
    order = [i for i in range(len(procs)) if i != last] + ([last] if last is not None else [])
    for i in order:
        p = procs[i]
        left = max(0.1, deadline - time.monotonic())
        if i == last:
            left = min(left, 1.0)
        try:
            out, err = p.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            if i != last:
                timed_out = True
                for q in procs:
                    kill_group(q)
            kill_group(p)
            out, err = p.communicate()
        outs[i] = (p.returncode, out, err)
    return outs, timed_out


def launch(n, args, extra_env, timeout, last=None):
    """Starts ranks 0..n-1 of a world through KILN_RANK/KILN_WORLD_SIZE/KILN_ROOT_ADDR."""
    addr = "127.0.0.1:%d" % free_port()
    procs = []
    for r in range(n):
        env = base_env(dict(extra_env, KILN_RANK=str(r), KILN_WORLD_SIZE=str(n), KILN_ROOT_ADDR=addr))
        procs.append(subprocess.Popen([WORKER] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, start_new_session=True))
    return wait_all(procs, time.monotonic() + timeout, last)


def mpirun_cmd(n):
    cmd = ["mpirun", "-np", str(n), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def check_matrix(name, n, outs, timed_out):
    problems = []
    if timed_out:
        problems.append("timed out (processes killed)")
    for r, (rc, out, err) in enumerate(outs):
        if rc != 0:
            problems.append("process %d exited with %s:\n%s%s" % (r, rc, out[-2000:], err[-4000:]))
    summaries = [line for _, out, _ in outs for line in out.splitlines() if " cases, " in line]
    if not problems and len(summaries) != n:
        problems.append("expected %d summary lines, got %d" % (n, len(summaries)))
    for line in summaries[:1]:
        print("    " + line)
    return problems


def transport_env(transport):
    """shm: shared memory on the host; shm1c: the same with large sends read out of the
    sender's memory (KILN_COMM_SHM_SINGLE_COPY; where the kernel refuses, the ring again);
    tcp: TCP between all ranks."""
    return {"shm": {}, "shm1c": {"KILN_COMM_SHM_SINGLE_COPY": "1"},
            "tcp": {"KILN_COMM_TRANSPORT": "tcp"}}[transport]


def matrix_case(n, transport, quick):
    def run():
        env = {"KILN_COMM_TIMEOUT": "20", **transport_env(transport)}
        args = ["matrix"] + (["--quick"] if quick else [])
        outs, timed_out = launch(n, args, env, timeout=90)
        return check_matrix("%s%d" % (transport, n), n, outs, timed_out)
    return run


def mpirun_case(n):
    def run():
        if shutil.which("mpirun") is None:
            return "SKIP: mpirun not found (install openmpi-bin)"
        env = base_env({"KILN_COMM_TIMEOUT": "20"})
        p = subprocess.Popen(mpirun_cmd(n) + [WORKER, "matrix", "--quick"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        outs, timed_out = wait_all([p], time.monotonic() + 120)
        rc, out, err = outs[0]
        problems = []
        if timed_out:
            problems.append("timed out (mpirun killed)")
        if rc != 0:
            problems.append("mpirun exited with %s:\n%s%s" % (rc, out[-3000:], err[-4000:]))
        summaries = [line for line in out.splitlines() if " cases, " in line]
        if not problems and len(summaries) != n:
            problems.append("expected %d summary lines, got %d:\n%s" % (n, len(summaries), out[-2000:]))
        for line in summaries[:1]:
            print("    " + line)
        return problems
    return run


FAULT_LINE = re.compile(r"^FAULT rank=(\d+) code=(-?\d+) async=(-?\d+) seconds=([0-9.]+) epoch=[0-9.]+ message=(.*)$")


def fault_case(n, transport, kind, victim, count=None):
    """Every survivor must fail within the timeout with an error naming the victim and the
    operation. A hung victim (alive and running, its stream blocked) never starts the
    collective: over shared memory its peers see that in the links' control blocks, over TCP
    by asking its status channel (docs/comm.md, "Faults"). The first survivor to time out must
    have seen it so ("has not started this operation"); the others may instead hear the culprit
    from a rank that gave up before them. (Naming alone would not show that the counts work:
    a rank waiting on the victim directly names it anyway and passes the name on.)"""
    def run():
        env = {"KILN_COMM_TIMEOUT": str(FAULT_TIMEOUT), **transport_env(transport)}
        start = time.monotonic()
        # The stalled victim never exits by itself: it is killed once the others are done.
        args = ["fault", kind, str(victim)] + ([str(count)] if count else [])
        outs, timed_out = launch(n, args, env, timeout=FAULT_TIMEOUT + 25, last=victim)
        wall = time.monotonic() - start
        problems = ["timed out: a surviving rank hung (processes killed)"] if timed_out else []
        saw_behind = False
        for r, (rc, out, err) in enumerate(outs):
            if r == victim:
                continue
            m = [FAULT_LINE.match(line) for line in out.splitlines()]
            m = [x for x in m if x]
            if rc != 0 or not m:
                problems.append("rank %d: exit %s, no fault report:\n%s%s" % (r, rc, out[-1500:], err[-3000:]))
                continue
            code, seconds, message = int(m[0].group(2)), float(m[0].group(4)), m[0].group(5)
            print("    rank %d: %.2f s, error %d: %s" % (r, seconds, code, message[:160]))
            if code == 0:
                problems.append("rank %d: the AllReduce did not fail" % r)
            if not re.search(r"\brank %d\b" % victim, message):
                problems.append("rank %d: the message does not name rank %d: %s" % (r, victim, message))
            saw_behind = saw_behind or "has not started this operation" in message
            if "AllReduce" not in message:
                problems.append("rank %d: the message does not name the operation (AllReduce): %s" % (r, message))
            if seconds > FAULT_TIMEOUT + SLACK:
                problems.append("rank %d: failed after %.2f s, the timeout is %d s" % (r, seconds, FAULT_TIMEOUT))
        if kind == "hang" and not saw_behind:
            problems.append("no survivor saw that rank %d has not started the AllReduce" % victim)
        vrc = outs[victim][0]
        if kind == "kill" and vrc != -9:
            problems.append("the victim (rank %d) exited with %s, not by SIGKILL:\n%s" % (victim, vrc,
                                                                                         outs[victim][2][-2000:]))
        print("    whole world done in %.1f s" % wall)
        return problems
    return run


CASES = [
    ("shm2", matrix_case(2, "shm", False)),
    ("shm3", matrix_case(3, "shm", False)),
    ("shm4", matrix_case(4, "shm", False)),
    ("shm8", matrix_case(8, "shm", True)),
    ("shm1c3", matrix_case(3, "shm1c", False)),
    ("tcp2", matrix_case(2, "tcp", False)),
    ("tcp3", matrix_case(3, "tcp", False)),
    ("tcp4", matrix_case(4, "tcp", True)),
    ("tcp8", matrix_case(8, "tcp", True)),
    ("mpirun4", mpirun_case(4)),
    ("kill_shm4", fault_case(4, "shm", "kill", 2)),
    ("kill_shm1c4", fault_case(4, "shm1c", "kill", 2)),
    ("stall_shm3", fault_case(3, "shm", "stall", 1)),
    # 8-byte AllReduces back to back: the one-shot path through the links' mailboxes.
    ("kill_shm4_small", fault_case(4, "shm", "kill", 2, count=2)),
    ("stall_shm4_small", fault_case(4, "shm", "stall", 3, count=2)),
    ("kill_tcp3", fault_case(3, "tcp", "kill", 1)),
    ("stall_tcp2", fault_case(2, "tcp", "stall", 0)),
    ("stall_tcp4", fault_case(4, "tcp", "stall", 2)),
    ("hang_shm4", fault_case(4, "shm", "hang", 1)),
    ("hang_tcp3", fault_case(3, "tcp", "hang", 2)),
    ("hang_tcp4", fault_case(4, "tcp", "hang", 1)),
]


def main():
    if WORKER is None or not os.access(WORKER, os.X_OK):
        print(__doc__)
        return 2
    wanted = sys.argv[2:]
    if wanted == ["matrix"]:
        wanted = [c for c, _ in CASES if not c.startswith(("kill_", "stall_", "hang_"))]
    elif wanted == ["faults"]:
        wanted = [c for c, _ in CASES if c.startswith(("kill_", "stall_"))]
    elif wanted == ["hangs"]:
        wanted = [c for c, _ in CASES if c.startswith("hang_")]
    unknown = [w for w in wanted if w not in dict(CASES)]
    if unknown:
        print("unknown case(s) %s; cases: %s" % (", ".join(unknown), ", ".join(c for c, _ in CASES)))
        return 2
    failed = []
    t0 = time.monotonic()
    for name, run in CASES:
        if wanted and name not in wanted:
            continue
        start = time.monotonic()
        print("[ RUN  ] %s" % name, flush=True)
        result = run()
        took = time.monotonic() - start
        if isinstance(result, str):
            print("[ SKIP ] %s: %s" % (name, result), flush=True)
        elif result:
            failed.append(name)
            for p in result:
                print("    " + p.replace("\n", "\n    "))
            print("[ FAIL ] %s (%.1f s)" % (name, took), flush=True)
        else:
            print("[  OK  ] %s (%.1f s)" % (name, took), flush=True)
    print("%d cases, %d failed%s, %.1f s" % (len(wanted) or len(CASES), len(failed),
                                             (": " + ", ".join(failed)) if failed else "", time.monotonic() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
