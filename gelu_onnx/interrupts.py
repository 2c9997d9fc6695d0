"""Signals during a write never leave a temp file or a half-replaced output.

``unwinding()`` makes SIGINT, SIGTERM and SIGHUP (Ctrl-C, ``timeout``, CI
cancellation, ``docker stop``, a closed terminal) raise ``Interrupted`` in
the main thread, so every writer's cleanup runs on the way out. ``critical()``
marks the few steps that must not be cut in two (creating a temp file and
recording it for cleanup, the renames, a rollback): a signal that arrives
inside one is acted on when it ends. When the outermost ``unwinding()`` ends
with an ``Interrupted``, the signal's previous disposition is honoured: a
default SIGTERM/SIGHUP then still kills the process (after the cleanup), a
Python handler is called, SIGINT stays a KeyboardInterrupt. Signals a parent
set to "ignore" (nohup) stay ignored. Off the main thread nothing is
installed (Python runs handlers in the main thread only).

``fault(point)`` is the fault-injection hook of the tests: with
``GELU_ONNX_TEST_FAULT=point=SIGNAL[,point=SIGNAL...]`` in the environment the
process sends itself SIGNAL at that named point (SIGSTOP lets a test change
a file while the process waits). Points: read:opened, read:scanned,
write:start, write:copy (after the first chunk of a copy), write:data-copied
(after each data file), write:before-rename, write:data-renamed (data files
in place, the model not yet), write:checker, write:rollback, save:written
(docs/safety.md)."""
from __future__ import annotations

import importlib
import os
import signal

SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
FAULT_ENV = "GELU_ONNX_TEST_FAULT"


class Interrupted(KeyboardInterrupt):
    """A signal (``signum``) arrived: unwind, cleaning up on the way."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _State:
    depth = 0          # nested unwinding() blocks
    critical = 0       # nested critical() blocks
    pending: int | None = None
    old: dict = {}     # signal -> disposition before the outermost unwinding()


_s = _State()


def _handler(signum, _frame):
    if _s.critical:
        if _s.pending is None:
            _s.pending = signum
        return
    raise Interrupted(signum)


class unwinding:
    """Signals raise Interrupted inside this block (re-entrant)."""

    def __enter__(self):
        if _s.depth == 0:
            old = {}
            for sig in SIGNALS:
                prev = signal.getsignal(sig)
                if prev is signal.SIG_IGN or prev is None:  # ignored on purpose, or set outside Python
                    continue
                try:
                    signal.signal(sig, _handler)
                except ValueError:  # not the main thread: Python runs handlers there only
                    break
                old[sig] = prev
            _s.old = old
        _s.depth += 1
        return self

    def __exit__(self, et, e, tb):
        _s.depth -= 1
        if _s.depth:
            return False
        old, _s.old, _s.pending = _s.old, {}, None
        for sig, prev in old.items():
            signal.signal(sig, prev)
        if isinstance(e, Interrupted) and e.signum in old:
            prev = old[e.signum]
            if prev is signal.SIG_DFL:  # die of it, as without us (the cleanup is done)
                os.kill(os.getpid(), e.signum)
            elif callable(prev) and prev is not signal.default_int_handler:
                prev(e.signum, None)
        return False


class critical:
    """A step that a signal must not cut in two: a signal is acted on at its end."""

    def __enter__(self):
        _s.critical += 1
        return self

    def __exit__(self, et, e, tb):
        _s.critical -= 1
        if _s.critical == 0 and _s.pending is not None:
            sig, _s.pending = _s.pending, None
            if et is None:
                raise Interrupted(sig)
            # already unwinding from another error: deliver the signal again
            # so it is not lost (it is acted on outside this block)
            os.kill(os.getpid(), sig)
        return False


def preload(names) -> None:
    """Import these modules with signals deferred to the end: a signal that
    interrupts a C extension's initialisation (numpy, onnx, onnxruntime)
    surfaces as an ImportError ("initialization failed"), not as the signal.
    A missing optional module is left to the code that needs it."""
    with critical():
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError:
                pass


def fault(point: str) -> None:
    """The tests' fault-injection hook (see the module doc); free otherwise."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    for item in spec.split(","):
        where, _, name = item.rpartition("=")
        if where == point:
            os.kill(os.getpid(), getattr(signal, name))
            _checkpoint()


def _checkpoint() -> None:
    """Entering a Python function runs pending signal handlers: the signal
    sent above is acted on here, at the named point."""
