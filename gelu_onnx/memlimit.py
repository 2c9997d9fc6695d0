"""Allocation failures named as such. Under an address-space limit
(``ulimit -v``, as HPC/SLURM jobs run) protobuf's parser reports a model it
could not allocate as unparsable, its serializer raises EncodeError, Python
MemoryError: each would read as a damaged file or an internal error. Here
they become one line, exit 3: "not enough memory", the limit, the size needed.
"""
from __future__ import annotations

import resource

from .errors import UnsupportedError

MIB = 1 << 20


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


def not_enough(what: str, need: int | None = None) -> UnsupportedError:
    """The one line: what could not be done, the size it needs, the limit."""
    lim = limit()
    parts = [f"not enough memory to {what}"]
    if need:
        parts.append(f"it needs about {_mib(need)} more")
    parts.append(f"this process's memory limit (ulimit -v) is {_mib(lim)}" if lim is not None
                 else "the machine is out of memory")
    return UnsupportedError("; ".join(parts) + ": raise the limit or run where more memory is free")


def _mib(n: int) -> str:
    return f"{n / MIB:,.0f} MiB"
