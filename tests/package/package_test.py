#!/usr/bin/env python3
"""The installed Kiln package as a user meets it.

Installs the build into a temporary prefix (`cmake --install`), checks what landed there
(headers, libkiln.so with its SONAME, only kiln* symbols exported, every kiln.h function
exported, every shared-library dependency resolvable, the CMake and pkg-config files, the
kiln command), then builds examples/c/classify.c against it twice, with find_package(kiln)
and with pkg-config, and runs both on a small classification model whose top-5 is
computed independently by PyTorch. A C++ program using <kiln/kiln.hpp> is built and run
against the package too, and classify's error paths are checked.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

TOP_K = 5
# Kiln's convolutions may sum in another order than PyTorch's: float32 rounding only.
RTOL = 1e-4
ATOL = 1e-5


def run(cmd, env=None, cwd=None, expect_ok=True):
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    if expect_ok and proc.returncode != 0:
        raise AssertionError("command failed (exit %d): %s\nstdout:\n%s\nstderr:\n%s" %
                             (proc.returncode, " ".join(cmd), proc.stdout, proc.stderr))
    return proc


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def api_functions(header, at_least=50):
    """Names of the functions a public header declares with KILN_API."""
    text = open(header).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    names = re.findall(r"KILN_API\s[^;{]*?\b(kiln\w+)\s*\(", text)
    check(len(names) > at_least, "found only %d KILN_API functions in %s" % (len(names), header))
    return sorted(set(names))


def check_install_tree(prefix, source_dir):
    for rel in ["include/kiln/kiln.h", "include/kiln/kiln.hpp", "include/kiln/kiln_op.h", "include/kiln/llm.h",
                "include/kiln/llm.hpp", "include/kiln/custom_op.h", "lib/libkiln.so",
                "lib/libkiln.so.0", "lib/libkiln.so.0.1.0", "lib/pkgconfig/kiln.pc",
                "lib/cmake/kiln/kilnConfig.cmake", "lib/cmake/kiln/kilnConfigVersion.cmake",
                "lib/cmake/kiln/kilnTargets.cmake", "bin/kiln", "lib/libkiln_apps.so"]:
        check(os.path.exists(os.path.join(prefix, rel)), "not installed: " + rel)
    lib = os.path.join(prefix, "lib/libkiln.so.0.1.0")

    dynamic = run(["readelf", "-d", lib]).stdout
    check("Library soname: [libkiln.so.0]" in dynamic, "SONAME is not libkiln.so.0:\n" + dynamic)

    # Only the C API is exported; every function kiln.h declares is among the exports.
    exported = set()
    for line in run(["nm", "-D", "--defined-only", lib]).stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            exported.add(fields[2].split("@")[0])
    foreign = sorted(s for s in exported if not s.startswith("kiln") and s != "KILN_0")
    check(not foreign, "libkiln.so exports non-API symbols: %s" % foreign[:20])
    missing = [f for f in api_functions(os.path.join(source_dir, "include/kiln/kiln.h"))
               if f not in exported]
    check(not missing, "kiln.h functions not exported by libkiln.so: %s" % missing)
    missing = [f for f in api_functions(os.path.join(source_dir, "include/kiln/kiln_op.h"), 10)
               if f not in exported]
    check(not missing, "kiln_op.h functions not exported by libkiln.so: %s" % missing)
    missing = [f for f in api_functions(os.path.join(source_dir, "include/kiln/llm.h"), 10)
               if f not in exported]
    check(not missing, "llm.h functions not exported by libkiln.so: %s" % missing)

    ldd = run(["ldd", lib]).stdout
    check("not found" not in ldd, "unresolved dependencies of libkiln.so:\n" + ldd)
    return len(exported - {"KILN_0"})


def make_model(work):
    """A small seeded conv classifier: ONNX file, a raw float32 input, PyTorch's scores."""
    import torch
    from torch import nn

    torch.manual_seed(20240401)
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 100))
    with torch.no_grad():  # non-trivial BatchNorm statistics
        bn = net[1]
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.2, 0.2)
    net.eval()
    x = torch.rand(1, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        scores = net(x)[0].numpy().astype(np.float64)
    onnx_path = os.path.join(work, "tiny_classifier.onnx")
    torch.onnx.export(net, x, onnx_path, input_names=["image"], output_names=["scores"],
                      opset_version=13)
    raw_path = os.path.join(work, "input.raw")
    x.numpy().astype(np.float32).tofile(raw_path)
    return onnx_path, raw_path, scores


def check_top5(output, reference, what):
    """classify prints `  INDEX SCORE` lines; they must be a top-5 of the reference."""
    rows = [(int(m.group(1)), float(m.group(2)))
            for m in re.finditer(r"^\s+(\d+)\s+(-?[0-9.]+(?:e[-+]?\d+)?)\s*$", output, re.M)]
    check(len(rows) == TOP_K, "%s printed %d top rows, not %d:\n%s" % (what, len(rows), TOP_K, output))
    tol = lambda ref: ATOL + RTOL * abs(ref)
    for index, score in rows:
        check(0 <= index < len(reference), "%s: class %d out of range" % (what, index))
        check(abs(score - reference[index]) <= tol(reference[index]) + 1e-6,  # printed with 6 decimals
              "%s: class %d score %.6f, PyTorch %.6f" % (what, index, score, reference[index]))
    printed = [i for i, _ in rows]
    check(len(set(printed)) == TOP_K, "%s printed a class twice: %s" % (what, printed))
    # Descending, and nothing left out scores higher (ties within tolerance allowed).
    for (i, a), (j, b) in zip(rows, rows[1:]):
        check(a >= b, "%s: top-5 not in descending order: %s" % (what, rows))
    lowest = min(reference[i] for i in printed)
    for c in range(len(reference)):
        if c not in printed:
            check(reference[c] <= lowest + tol(lowest),
                  "%s: class %d (PyTorch %.6f) belongs in the top 5 %s" %
                  (what, c, reference[c], printed))
    ref_top = list(np.argsort(-reference, kind="stable")[:TOP_K])
    return printed, ref_top


HPP_PROGRAM = r"""
// Built against the installed package: the C++ wrappers over libkiln.so.
#include <kiln/kiln.hpp>
#include <cstdio>
#include <vector>

int main() {
  try {
    kiln::Runtime runtime;
    kiln::Device device(0);
    kiln::Stream stream;
    std::vector<float> src(1000), dst(1000, 0.f);
    for (size_t i = 0; i < src.size(); ++i) src[i] = 0.5f * static_cast<float>(i);
    kiln::DeviceBuffer buffer(src.size() * sizeof(float));
    buffer.copy_from_host_async(src.data(), buffer.size(), stream);
    buffer.copy_to_host_async(dst.data(), buffer.size(), stream);
    stream.synchronize();
    if (dst != src) { std::printf("round trip mismatch\n"); return 1; }
    try {
      kiln::Model::load("no/such/model.kiln");
      std::printf("loading a missing model did not throw\n");
      return 1;
    } catch (const kiln::Error& e) {
      std::printf("expected error %d: %s\n", e.code(), e.what());
    }
    kiln::Version v = kiln::version();
    std::printf("kiln %d.%d.%d ok\n", v.major, v.minor, v.patch);
  } catch (const kiln::Error& e) {
    std::printf("kiln::Error %d: %s\n", e.code(), e.what());
    return 1;
  }
  return 0;
}
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--cmake", default="cmake")
    parser.add_argument("--generator", default="")
    parser.add_argument("--make-program", default="")
    parser.add_argument("--cc", default="cc")
    parser.add_argument("--cxx", default="c++")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="kiln_package_test_")
    try:
        prefix = os.path.join(work, "prefix")
        env = dict(os.environ)
        env.pop("KILN_DEVICES", None)

        # 1. Install and inspect the tree.
        run([args.cmake, "--install", args.build_dir, "--prefix", prefix])
        num_exported = check_install_tree(prefix, args.source_dir)
        print("installed into %s: libkiln.so.0 exports %d kiln* functions, dependencies resolve" %
              (prefix, num_exported))

        # 2. The model, compiled by the installed kiln command.
        onnx_path, raw_path, reference = make_model(work)
        model = os.path.join(work, "tiny_classifier.kiln")
        run([os.path.join(prefix, "bin/kiln"), "compile", onnx_path, "-o", model], env=env)
        # The installed kiln finds its apps module (tools/apps_module.h) beside libkiln.so.
        r = subprocess.run([os.path.join(prefix, "bin/kiln"), "quantize", "--help"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(r.returncode == 0 and "--calibration" in r.stdout,
              "the installed kiln cannot run `quantize --help`: " + r.stdout[-500:])

        # 3. classify built with find_package(kiln).
        example_src = os.path.join(args.source_dir, "examples/c")
        example_build = os.path.join(work, "classify-cmake")
        configure = [args.cmake, "-S", example_src, "-B", example_build,
                     "-DCMAKE_PREFIX_PATH=" + prefix, "-DCMAKE_C_COMPILER=" + args.cc,
                     "-DCMAKE_BUILD_TYPE=Release"]
        if args.generator:
            configure += ["-G", args.generator]
        if args.make_program:
            configure += ["-DCMAKE_MAKE_PROGRAM=" + args.make_program]
        run(configure, env=env)
        run([args.cmake, "--build", example_build], env=env)
        classify_cmake = os.path.join(example_build, "classify")

        # 4. classify built with pkg-config, as examples/c/README.md shows.
        pc_env = dict(env, PKG_CONFIG_PATH=os.path.join(prefix, "lib/pkgconfig"))
        flags = run(["pkg-config", "--cflags", "--libs", "kiln"], env=pc_env).stdout.split()
        libdir = run(["pkg-config", "--variable=libdir", "kiln"], env=pc_env).stdout.strip()
        check(os.path.realpath(libdir) == os.path.realpath(os.path.join(prefix, "lib")),
              "kiln.pc libdir %s is not under the prefix" % libdir)
        classify_pc = os.path.join(work, "classify-pkgconfig")
        run([args.cc, "-std=c99", "-Wall", "-Wextra", "-Werror",
             os.path.join(example_src, "classify.c")] + flags +
            ["-Wl,-rpath," + libdir, "-o", classify_pc], env=pc_env)

        # 5. Both on the model; the top-5 must match PyTorch's.
        for binary, what in [(classify_cmake, "classify (CMake)"), (classify_pc, "classify (pkg-config)")]:
            out = run([binary, model, raw_path], env=env).stdout
            printed, ref_top = check_top5(out, reference, what)
            print("%s: top-5 %s, PyTorch %s" % (what, printed, [int(i) for i in ref_top]))
            # Without an input file it runs the built-in pattern.
            out = run([binary, model], env=env).stdout
            check(len(re.findall(r"^\s+\d+\s", out, re.M)) == TOP_K, "%s pattern run:\n%s" % (what, out))

        # 6. Errors are reported with Kiln's message and exit status 1.
        missing = run([classify_pc, os.path.join(work, "missing.kiln")], env=env, expect_ok=False)
        check(missing.returncode == 1 and "kilnmdlLoadFromFile" in missing.stderr and
              "missing.kiln" in missing.stderr,
              "missing model: exit %d, stderr %r" % (missing.returncode, missing.stderr))
        short_input = os.path.join(work, "short.raw")
        np.zeros(10, np.float32).tofile(short_input)
        bad = run([classify_pc, model, short_input], env=env, expect_ok=False)
        check(bad.returncode == 1 and "40 bytes" in bad.stderr,
              "short input: exit %d, stderr %r" % (bad.returncode, bad.stderr))

        # 7. The C++ wrappers against the package.
        hpp_src = os.path.join(work, "hpp_check.cc")
        with open(hpp_src, "w") as f:
            f.write(HPP_PROGRAM)
        hpp_bin = os.path.join(work, "hpp_check")
        run([args.cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", hpp_src] + flags +
            ["-Wl,-rpath," + libdir, "-o", hpp_bin], env=pc_env)
        out = run([hpp_bin], env=env).stdout
        check("kiln 0.1.0 ok" in out and "expected error" in out, "C++ check printed:\n" + out)
        print("C++ wrappers: " + out.strip().replace("\n", " | "))
        print("package test passed")
    finally:
        if args.keep:
            print("kept " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print("FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)
