"""The hostile suite: attacks on the files a user owns, built at test time,
each a ``judge.Attack`` run by tests/test_hostile_suite.py and judged by the
same criteria (judge.py). Groups: ``corpus`` (every malformed or unsafe
model file of malformed.py through fuse, inspect and check: corpus.py),
``alias`` (every way an output path can name something precious), ``save``
(check --save-inputs/--save-outputs), ``device`` (devices, FIFOs, sockets,
/proc as inputs) (paths.py); ``fault`` (a full or read-only tmpfs on the
paths tests/test_fault_injection.py does not cover, the > 2 GB ``.N.data``
rule), ``signal`` (SIGTERM/SIGINT/SIGHUP at named points of a write, a file
truncated while it is read) (faults.py); ``bomb`` (structural bombs),
``const`` (read what the runtime reads), ``names`` (non-UTF-8 and over-long
paths) (structure.py); ``check`` (hostile feeds and golden files, bench),
``api`` (the Python API) (inputs.py); ``race``, ``native``, ``quiet``,
``home``, ``bytes``, ``domain`` (runtime.py); ``streams``, ``nolink``,
``swap``, ``memory``, ``args``, ``training``, ``cache`` (environment.py). ``CASES`` maps "group/name"
to a builder taking the case's empty folder and returning the Attack."""
from __future__ import annotations

from helpers.hostile import corpus, environment, faults, inputs, paths, runtime, structure  # noqa: F401 - each registers its cases
from helpers.hostile.cases import CASES, OPT_IN, ROOT_ONLY

__all__ = ["CASES", "OPT_IN", "ROOT_ONLY"]
