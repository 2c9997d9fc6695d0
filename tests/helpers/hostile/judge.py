"""How the hostile suite (suite.py lists its groups) runs and judges a
case: the real CLI in a child process (or a Python snippet using the
library), with a signal delivered at a named point of the write
(GELU_ONNX_TEST_FAULT) or after a delay, or the child stopped at a point
while the test changes a file under it. Every case is held to the same
criteria:

- no traceback, no Python warning, no ONNX Runtime log line on stderr;
- exit 0 only for valid input, 1/2/3 otherwise (128 + n after signal n),
  exactly ``codes`` where the case knows them;
- a failure is exactly one stderr line, a success prints no error line
  (stderr the case closes, fills or breaks, ``streams``, is not judged);
- no byte, mode, link or kind of any pre-existing entry under the case's
  folder changed or removed, except what a successful run was asked to
  write (``may_change``); no new entry at all after a failure (no temp
  file, no half-written output, no folder made for data files);
- peak memory (the child's VmHWM, sampled while it runs) bounded by the model,
  not by what a file claims.
"""
from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


REPO = Path(__file__).resolve().parents[3]
EXIT_BAD = (1, 2, 3)


@dataclass
class Attack:
    argv: list                                  # CLI arguments (str, bytes or Path)
    valid: bool | None                          # True: exit 0; False: 1/2/3; None: either
    may_change: tuple = ()                      # paths a successful run writes
    env: dict = field(default_factory=dict)
    cwd: Path | None = None
    python: str | None = None                   # run this Python code instead of the CLI
    signal_after: float | None = None           # send ``signal_name`` after this many seconds
    signal_name: str = "SIGTERM"
    while_stopped: Callable | None = None       # run while the child is stopped (a SIGSTOP fault)
    mutated: tuple = ()                         # files the test itself changes (while_stopped)
    signalled: bool = False                     # a signal must end the run (exit 128 + n)
    max_rss_mib: int = 600
    warnings_ok: bool = False                   # a success may print "gelu-onnx: warning:" lines
    after: Callable | None = None               # extra check: after(result)
    preexec: Callable | None = None
    cleanup: Callable | None = None             # always run at the end (unmount, close)
    timeout: int = 120
    # {"stdin"|"stdout"|"stderr": "closed"|"full"|"broken"}: how the child's
    # standard streams are left (a stream not read here is not judged)
    streams: dict = field(default_factory=dict)
    codes: tuple | None = None                  # the exact exit codes allowed, when known


@dataclass
class Result:
    code: int
    stdout: bytes
    stderr: bytes
    rss_mib: float
    seconds: float


def snapshot(root: Path) -> dict:
    """Every entry under root (links not followed, FIFOs never opened): kind,
    permission bits and content hash; a sparse giant (> 256 MiB, never read)
    by size and mtime."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode) and st.st_size > 256 << 20:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns)
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                out[rel] = ("file", stat.S_IMODE(st.st_mode), h.hexdigest())
            else:
                out[rel] = (stat.filemode(st.st_mode), st.st_rdev)
    return out


def _env(extra: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    for k in ("GELU_ONNX_DEBUG", "GELU_ONNX_TEST_FAULT", "GELU_ONNX_ORT_LOG"):
        env.pop(k, None)
    env.update(extra)
    return env


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


_FD = {"stdin": 0, "stdout": 1, "stderr": 2}


def _streams(a: Attack) -> tuple[dict, list, list]:
    """Popen's stdin/stdout/stderr for ``a.streams``, the descriptors the
    child closes before exec, and what this process closes after the spawn."""
    std = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    shut, ours = [], []
    for name, how in a.streams.items():
        if how == "closed":
            std[name] = subprocess.DEVNULL
            shut.append(_FD[name])
        elif how == "full":
            std[name] = os.open("/dev/full", os.O_RDWR)
            ours.append(std[name])
        elif how == "broken":  # stdin: a writer gone (EOF); else a reader gone (EPIPE)
            r, w = os.pipe()
            std[name] = r if name == "stdin" else w
            os.close(w if name == "stdin" else r)
            ours.append(std[name])
        else:
            raise ValueError(how)
    return std, shut, ours


def run(a: Attack) -> Result:
    cmd = [sys.executable, "-c", a.python] if a.python else [sys.executable, "-m", "gelu_onnx", *map(_arg, a.argv)]
    t0 = time.monotonic()
    std, shut, ours = _streams(a)

    def preexec():
        for fd in shut:
            os.close(fd)
        if a.preexec is not None:
            a.preexec()
    try:
        p = subprocess.Popen(cmd, **std, env=_env(a.env), cwd=a.cwd,
                             preexec_fn=preexec if shut or a.preexec else None)
    finally:
        for fd in ours:
            os.close(fd)
    got: dict = {}
    readers = [threading.Thread(target=lambda k=k, s=s: got.__setitem__(k, s.read()), daemon=True)
               for k, s in (("out", p.stdout), ("err", p.stderr)) if s is not None]
    for t in readers:
        t.start()
    if a.while_stopped is not None:
        while _state(p.pid) not in ("T", "Z", "?") and time.monotonic() - t0 < a.timeout:
            time.sleep(0.005)
        if _state(p.pid) == "T":
            a.while_stopped()
        os.kill(p.pid, signal.SIGCONT)
    if a.signal_after is not None:
        time.sleep(a.signal_after)
        if _state(p.pid) not in ("Z", "?"):
            os.kill(p.pid, getattr(signal, a.signal_name))
    # the peak RSS is VmHWM of the child's own memory (wait4's ru_maxrss
    # would count this test process too: it is inherited across fork + exec)
    peak = 0
    while True:
        peak = max(peak, _hwm_kib(p.pid))
        pid, status, _ = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - t0 > a.timeout:
            p.kill()
            os.wait4(p.pid, 0)
            p.returncode = -9
            raise AssertionError(f"hung for {a.timeout} s")
        time.sleep(0.005)
    p.returncode = os.waitstatus_to_exitcode(status)
    for t in readers:
        t.join()
    return Result(p.returncode, got.get("out", b""), got.get("err", b""), peak / 1024, time.monotonic() - t0)


def _hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _arg(x):
    return x if isinstance(x, bytes) else str(x)


def judge(root: Path, a: Attack, before: dict, r: Result) -> list[str]:
    """The criteria (module doc); an empty list when the case is clean."""
    bad = []
    err = r.stderr.decode("utf-8", "backslashreplace")
    lines = [x for x in err.splitlines() if x.strip()]
    for marker in ("Traceback", "Warning:", "[W:onnxruntime", "[E:onnxruntime", "Exception ignored", "Fatal Python"):
        if marker in err:
            bad.append(f"stderr holds {marker!r}")
    # killed by a signal's default action (before Python or our handler ran, or
    # after the command ended: Python re-raises a late SIGINT) is fine, silently:
    # nothing is half-written then
    sig_codes = {128 + s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)} | {-signal.SIGTERM, -signal.SIGHUP,
                                                                                     -signal.SIGINT}
    if a.signalled:
        if r.code not in sig_codes:
            bad.append(f"exit {r.code}, expected a signal exit")
    elif a.signal_after is not None:  # finished first, or unwound (or died before it began)
        if r.code not in (0, *sig_codes):
            bad.append(f"exit {r.code}, expected 0 or a signal exit")
    elif r.code not in (0, *EXIT_BAD) or (a.valid is True and r.code != 0) or (a.valid is False and r.code == 0):
        bad.append(f"exit {r.code} (valid={a.valid})")
    if a.codes is not None and r.code not in a.codes:
        bad.append(f"exit {r.code}, expected one of {a.codes}")
    if "stderr" in a.streams:
        pass  # not seen here: the exit code and the files say what happened
    elif r.code == 0:
        extra = [x for x in lines if not (a.warnings_ok and x.startswith("gelu-onnx: warning:"))]
        if extra:
            bad.append(f"a success printed {len(extra)} stderr line(s)")
    elif r.code > 0 and len(lines) != 1:
        bad.append(f"{len(lines)} stderr lines")
    elif r.code < 0 and lines:
        bad.append(f"killed by signal {-r.code} with {len(lines)} stderr lines")
    after = snapshot(root)
    # a timed signal may land after the commit: then the output is complete (the after-check)
    done = r.code == 0 or a.signal_after is not None
    allowed = {os.path.relpath(os.path.abspath(p), root) for p in a.may_change} if done else set()
    for k in a.mutated:
        allowed.add(os.path.relpath(os.path.abspath(k), root))
    changed = sorted(k for k in before if k not in allowed and after.get(k) != before[k])
    added = sorted(k for k in after if k not in before and k not in allowed)
    if changed:
        bad.append(f"pre-existing entries changed or removed: {changed[:5]}")
    if added:
        bad.append(f"entries left behind: {added[:5]}")
    if r.rss_mib > a.max_rss_mib:
        bad.append(f"peak RSS {r.rss_mib:.0f} MiB > {a.max_rss_mib}")
    if a.after is not None and not bad:
        try:
            a.after(r)
        except Exception as e:  # noqa: BLE001 - any failure of the extra check is a finding
            bad.append(f"after: {type(e).__name__}: {e}")
    if bad:
        bad.append(f"stderr: {err[-800:]!r}")
    return bad
