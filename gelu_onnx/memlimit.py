"""Allocation failures named as such. Under an address-space limit
(``ulimit -v``, as HPC/SLURM jobs run) protobuf's parser reports a model it
could not allocate as unparsable, its serializer raises EncodeError, Python
MemoryError: each would read as a damaged file or an internal error. Here
they become one line, exit 3: "not enough memory", the limit, the size needed.
"""
from __future__ import annotations

import contextlib
import os
import resource

from .errors import UnsupportedError

MIB = 1 << 20
# what the command's imports need beyond the interpreter (numpy with one
# OpenBLAS thread, onnx): below it the command says so before importing them
START_BYTES = 112 * MIB


def limit() -> int | None:
    """The process's address-space limit in bytes (RLIMIT_AS, ``ulimit -v``),
    or None when there is none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def short_of(nbytes: int) -> bool:
    """Whether ``nbytes`` more cannot be had now under the limit: asked by
    reserving them (bytearray: an anonymous mapping, untouched pages cost
    nothing) and letting them go at once."""
    if limit() is None:
        return False
    try:
        probe = bytearray(nbytes)
    except MemoryError:
        return True
    del probe
    return False


# how ONNX Runtime and onnx's C++ say it (their exceptions carry only text)
_RUNTIME_WORDS = ("bad_alloc", "Failed to allocate memory", "failed to map segment", "Cannot allocate memory")


def allocation_failed(e: BaseException) -> bool:
    """Whether ``e`` is an allocation failure: MemoryError, or a runtime's
    error (ONNX Runtime's, also when wrapped in our one-line errors; a shared
    library the loader could not map) saying so."""
    return isinstance(e, MemoryError) or any(w in str(e) for w in _RUNTIME_WORDS)


def not_enough(what: str, need: int | None = None, models=()) -> UnsupportedError:
    """The one line: what could not be done, the size it needs (else the
    size of the ``models`` it worked on), the limit."""
    lim = limit()
    parts = [f"not enough memory to {what}"]
    if need:
        parts.append(f"it needs about {_mib(need)} more")
    sizes = []
    for m in models:
        with contextlib.suppress(OSError, TypeError, ValueError):
            sizes.append(f"{os.fsdecode(os.fspath(m))} is {_mib(os.stat(m).st_size)}")
    if sizes and not need:
        parts.append(", ".join(sizes) + " (it needs a few times that)")
    parts.append(f"this process's memory limit (ulimit -v) is {_mib(lim)}" if lim is not None
                 else "the machine is out of memory")
    return UnsupportedError("; ".join(parts) + ": raise the limit or run where more memory is free")


def _mib(n: int) -> str:
    return f"{n / MIB:,.1f} MiB" if n < 10 * MIB else f"{n / MIB:,.0f} MiB"
