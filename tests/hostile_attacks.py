"""The second hostile suite: attacks on the files a user owns, built at test
time, each an ``attack_judge.Attack`` judged by the same criteria
(tests/attack_judge.py). Groups: ``alias`` (every way an output path can
name something precious), ``save`` (check --save-inputs/--save-outputs),
``device`` (devices, FIFOs, sockets, /proc as inputs), ``fault`` (a full or
read-only tmpfs on the paths tests/test_fault_injection.py does not cover,
the > 2 GB ``.N.data`` rule), ``signal`` (SIGTERM/SIGINT/SIGHUP at named
points of a write, a file truncated while it is read), ``bomb`` (structural
bombs), ``const`` (read what the runtime reads), ``names`` (non-UTF-8 and
over-long paths), ``check`` (hostile feeds and golden files, bench), ``api``
(the Python API), ``race``, ``native``, ``quiet``, ``home``, ``bytes``,
``domain`` (tests/attacks_runtime.py). ``CASES`` maps "group/name" to a builder taking the
case's empty folder and returning the Attack."""
from __future__ import annotations

import attacks_faults  # noqa: F401 - each group module registers its cases
import attacks_inputs  # noqa: F401
import attacks_paths  # noqa: F401
import attacks_runtime  # noqa: F401
import attacks_structure  # noqa: F401
from attack_models import CASES, ROOT_ONLY

__all__ = ["CASES", "ROOT_ONLY"]
