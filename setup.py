"""Builds and installs the Python package kiln (docs/python.md) with CMake.

Offline, with Debian's pip and setuptools (no build isolation, which would download
setuptools):

    python3 -m pip install --no-build-isolation --break-system-packages .

(or, in a virtual environment made with --system-site-packages, without
--break-system-packages). CMake is configured as the release preset (Ninja, -O3
-march=native) in a temporary build folder with tests, benchmarks and examples off, and
builds only the extension target _kiln. KILN_CMAKE_ARGS adds CMake arguments;
KILN_BUILD_DIR keeps the CMake build folder between installs.
"""

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(kiln VERSION ([0-9.]+)", text).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # KILN_BUILD_DIR: a CMake build folder kept between installs (else a temporary one).
        build = pathlib.Path(os.environ.get("KILN_BUILD_DIR") or pathlib.Path(self.build_temp) / "cmake").resolve()
        build.mkdir(parents=True, exist_ok=True)
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        configure = ["cmake", "-S", str(ROOT), "-B", str(build), *generator,
                     "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_FLAGS=-march=native",
                     "-DKILN_BUILD_TESTS=OFF", "-DKILN_BUILD_BENCH=OFF", "-DKILN_BUILD_EXAMPLES=OFF",
                     "-DKILN_BUILD_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}",
                     *shlex.split(os.environ.get("KILN_CMAKE_ARGS", ""))]
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "_kiln"], check=True)
        built = next((build / "python" / "kiln").glob("_kiln*.so"))
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


setup(
    name="kiln",
    version=version(),
    description="Kiln: an inference stack for the CPU (ONNX Runtime-shaped and pyACL-shaped Python APIs)",
    python_requires=">=3.9",
    install_requires=["numpy"],
    packages=["kiln"],
    package_dir={"kiln": "python/kiln"},
    package_data={"kiln": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("kiln._kiln", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
