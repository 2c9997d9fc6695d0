"""Fixtures shared by the test files. Shared helpers that are not fixtures
live in the package tests/helpers/ (tests/README.md lists its modules;
imported as ``helpers.<module>``). No test module imports another."""
from __future__ import annotations

import signal

import pytest

from helpers.kernel_helpers import kernel_library

# The write-safety tests send SIGHUP / SIGINT to the processes they start and
# expect the default action. A suite started under nohup, or as a background
# job of a script, inherits those signals ignored and would pass that on to
# every child (which then rightly keeps running): give them back their defaults.
if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def lib():
    """The custom-op library's kernels through their C ABI (ctypes)."""
    return kernel_library()


@pytest.fixture(scope="session")
def deep_folder(tmp_path_factory):
    """Where tests/helpers/deep_models.py writes its exports: one folder for the
    session, as its export cache is per process (the verdict tests share it)."""
    return tmp_path_factory.mktemp("deep_models")
