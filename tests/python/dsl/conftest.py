"""Shared setup of the kiln.dsl tests (ctest python.dsl): a fresh DSL kernel cache per run, so
that every kernel is compiled from its source here, and the kiln binary for the CLI tests."""

import os
import pathlib

import pytest


@pytest.fixture(scope="session", autouse=True)
def dsl_cache(tmp_path_factory):
    """KILN_DSL_CACHE_DIR for this process and the kiln commands it runs."""
    cache = tmp_path_factory.mktemp("dsl_cache")
    os.environ["KILN_DSL_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture(scope="session")
def kiln_binary():
    """PYTEST_KILN_BINARY (set by CTest), else tools/kiln next to the build tree's package."""
    path = os.environ.get("PYTEST_KILN_BINARY")
    if not path:
        import kiln
        path = str(pathlib.Path(kiln.__file__).resolve().parents[2] / "tools" / "kiln")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no kiln binary at {path}")
    return path
