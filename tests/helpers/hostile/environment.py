"""The hostile suite, the environment a command is started in (issue 33):
groups ``streams`` (every command with stdin, stdout or stderr closed, on
/dev/full or a pipe whose other end left), ``nolink`` (a filesystem without
hard links nor flock: link() refused as vfat/exFAT/SMB refuse it), ``swap`` (the
output folder renamed or swapped for a link to the input's folder
mid-write), ``memory`` (an address-space limit, ``ulimit -v``, on a 74 MB
model of random weights), ``args`` (numeric arguments out of range),
``training`` (training_info reading what fusion removes), ``cache``
(something other than a file at the IR cache's path)."""
from __future__ import annotations

import os
import resource
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from helpers.hostile.cases import cached, big_model, case, ext, plain, register, runs_in_ort
from helpers.hostile.judge import Attack
from helpers.model_helpers import gelu_model, matmul_gelu_model



def _cli(argv) -> str:
    """Python code running the command with ``argv`` (str paths)."""
    return ("import runpy, sys\n"
            f"sys.argv = ['gelu-onnx', *{[str(a) for a in argv]!r}]\n"
            "runpy.run_module('gelu_onnx', run_name='__main__')\n")


# --- streams: every command x stdin/stdout/stderr x closed/full/broken ---------------

def _fused(root: Path) -> tuple[Path, Path]:
    src = plain(root / "m")
    out = root / "m" / "fused.onnx"
    import gelu_onnx

    gelu_onnx.fuse_file(src, out)
    return src, out


def _command(cmd: str, root: Path, ok: bool, as_json: bool) -> tuple[list, tuple]:
    """(argv, files a success writes) of one run of ``cmd``: a valid one, or
    one that fails on bad input (a missing model; an unknown option for info)."""
    missing = root / "missing.onnx"
    if cmd == "fuse":
        src = plain(root / "m")
        argv, writes = ["fuse", src if ok else missing, "-o", root / "out.onnx"], (root / "out.onnx",)
    elif cmd == "inspect":
        argv, writes = ["inspect", plain(root / "m") if ok else missing], ()
    elif cmd in ("check", "bench"):
        src, out = _fused(root)
        argv, writes = [cmd, src if ok else missing, out], ()
        if cmd == "bench":
            argv += ["--warmup", "0", "--repeats", "2", "--opt-levels", "all"]
    else:
        argv, writes = ["info"] if ok else ["info", "--no-such-option"], ()
    return argv + (["--json"] if as_json else []), writes


def _stream_case(cmd: str, stream: str, how: str, ok: bool, as_json: bool):
    def build(root):
        argv, writes = _command(cmd, root, ok, as_json)
        return Attack(argv, ok, may_change=writes, streams={stream: how}, codes=(0,) if ok else (2,),
                      warnings_ok=True)
    return build


_SCENARIOS = ((True, False), (False, False), (False, True), (True, True))  # (valid, --json)
_COMMANDS = ("fuse", "inspect", "check", "bench", "info")
for _k, (_stream, _how) in enumerate((s, w) for s in ("stdin", "stdout", "stderr") for w in ("closed", "full", "broken")):
    # by default each stream state once, the commands and scenarios in turn (9 runs);
    # every command x scenario with GELU_ONNX_FULL_HOSTILE=1 (180)
    for _cmd in _COMMANDS:
        for _ok, _json in _SCENARIOS:
            default = _cmd == _COMMANDS[_k % len(_COMMANDS)] and (_ok, _json) == _SCENARIOS[_k % len(_SCENARIOS)]
            register(f"streams/{_cmd}_{'valid' if _ok else 'bad_input'}{'_json' if _json else ''}_{_stream}_{_how}",
                     _stream_case(_cmd, _stream, _how, _ok, _json), opt_in=not default)


# --- nolink: link() refused (vfat, exFAT, many SMB/FUSE mounts) -----------------------

def _nolink(argv) -> str:
    """link() refused as vfat refuses it, flock() as some SMB/FUSE mounts do."""
    return ("import errno, fcntl, os\n"
            "def _refused(*a, **k):\n    raise OSError(errno.EPERM, 'Operation not permitted')\n"
            "def _no_lock(*a, **k):\n    raise OSError(errno.EOPNOTSUPP, 'Operation not supported')\n"
            "os.link = _refused\nfcntl.flock = _no_lock\n") + _cli(argv)


def _previous(root: Path) -> tuple[Path, Path]:
    src = ext(root / "m")
    out = root / "out" / "f.onnx"
    out.parent.mkdir()
    plain(out.parent, "f.onnx")
    return src, out


@case("nolink")
def _fuse_twice_into_one_output(root):
    """The second write replaces the first: its backup is a copy, not a link."""
    src = plain(root / "m")
    out = root / "out.onnx"
    import gelu_onnx

    gelu_onnx.fuse_file(src, out, target="standard")
    return Attack([], True, python=_nolink(["fuse", src, "-o", out]), may_change=(out,),
                  after=lambda r: runs_in_ort(out))


@case("nolink")
def _external_data_into_another_folder_over_a_previous_output(root):
    src, out = _previous(root)
    return Attack([], True, python=_nolink(["fuse", src, "-o", out]), may_change=(out, out.parent / "w.bin"),
                  after=lambda r: runs_in_ort(out))


@case("nolink")
def _overwrite_input(root):
    src = plain(root / "m")
    return Attack([], True, python=_nolink(["fuse", src, "-o", src, "--overwrite-input"]), may_change=(src,),
                  after=lambda r: runs_in_ort(src))


for _point in ("write:checker", "write:data-renamed", "write:rollback"):
    def _signalled(root, point=_point):
        """A signal after the previous output was set aside (a copy): it is put back."""
        src, out = _previous(root)
        faults = f"write:checker=SIGTERM,{point}=SIGTERM" if point == "write:rollback" else f"{point}=SIGTERM"
        return Attack([], None, python=_nolink(["fuse", src, "-o", out]), signalled=True,
                      env={"GELU_ONNX_TEST_FAULT": faults})
    register(f"nolink/sigterm_at_{_point.split(':')[1].replace('-', '_')}_keeps_the_previous_output", _signalled)


# --- swap: the output folder renamed, or swapped for a link, mid-write ----------------

def _swap_to_input(root: Path, src: Path, point: str, big: bool = False) -> Attack:
    """The output has the input's name; while the write is stopped at
    ``point``, out/ is moved to moved/ and out becomes a link to the input's
    folder. The write ends in moved/ (the folder it opened), never over the input."""
    out = root / "out" / src.name
    out.parent.mkdir()
    moved = root / "moved"

    def swap():
        os.rename(root / "out", moved)
        os.symlink(src.parent, root / "out")

    writes = [moved / src.name] + ([] if big else [moved / "w.bin"])
    return Attack(["fuse", src, "-o", out], True, env={"GELU_ONNX_TEST_FAULT": f"{point}=SIGSTOP"},
                  while_stopped=swap, mutated=(root / "out", moved), may_change=tuple(writes),
                  after=lambda r: runs_in_ort(moved / src.name), max_rss_mib=900)


@case("swap")
def _output_folder_swapped_for_a_link_to_the_input_folder(root):
    return _swap_to_input(root, ext(root / "m"), "write:data-copied")


@case("swap")
def _output_folder_swapped_on_the_splice_path(root):
    return _swap_to_input(root, big_model(root / "m"), "write:copy", big=True)


@case("swap")
def _output_folder_moved_away_then_a_signal_leaves_no_temp_file(root):
    src, out = _previous(root)
    moved = root / "moved"
    return Attack(["fuse", src, "-o", out], None, signalled=True,
                  env={"GELU_ONNX_TEST_FAULT": "write:data-copied=SIGSTOP,write:before-rename=SIGTERM"},
                  while_stopped=lambda: os.rename(root / "out", moved),
                  mutated=(root / "out", root / "out" / "f.onnx", moved, moved / "f.onnx"),
                  after=lambda r: _only(moved, ["f.onnx"]))


def _only(folder: Path, names: list) -> None:
    assert sorted(os.listdir(folder)) == names, os.listdir(folder)


# --- memory: ulimit -v --------------------------------------------------------------

def _random_74mb(folder: Path) -> Path:
    """74 MB single-file model, random weights (made once per session)."""
    w = lambda d: matmul_gelu_model(np.random.default_rng(3).standard_normal((4300, 4300)).astype(np.float32),  # noqa: E731
                                    d / "model.onnx")
    return cached("random74", w, folder, ("model.onnx",))


def _limited(mib: int):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))


def _says_memory(r) -> None:
    assert b"not enough memory" in r.stderr and b"ulimit -v" in r.stderr and b"MiB" in r.stderr, r.stderr


def _memory_case(argv_of, mib: int, env=None, ok=False):
    def build(root):
        src = _random_74mb(root / "m")
        argv, writes = argv_of(root, src)
        return Attack(argv, ok, env=env or {}, preexec=_limited(mib), codes=(0,) if ok else (3,),
                      may_change=writes, after=None if ok else _says_memory)
    return build


_fuse_it = lambda root, src: (["fuse", src, "-o", root / "out.onnx"], (root / "out.onnx",))  # noqa: E731
register("memory/fuse_parsing_the_whole_model_under_300_mib", _memory_case(_fuse_it, 300, {"GELU_ONNX_SPLICE": "0"}))
register("memory/fuse_on_the_splice_path_fits_in_400_mib", _memory_case(_fuse_it, 400, ok=True))
register("memory/inspect_under_250_mib", _memory_case(lambda root, src: (["inspect", src], ()), 250,
                                                      {"GELU_ONNX_SPLICE": "0"}))
# check of the 74 MB model fits in 450-600 MiB of address space since its
# reference keeps the big weights in their file (it needed more than 600 before)
register("memory/check_under_300_mib", _memory_case(lambda root, src: (["check", src, src], ()), 300))
register("memory/start_under_80_mib", _memory_case(_fuse_it, 80))


# --- args: numbers argparse must refuse ---------------------------------------------

_BAD_NUMBERS = {"check": (["--seed", "-1"], ["--scale", "nan"], ["--scale", "inf"], ["--iterations", "0"],
                          ["--dim-default", "-1"], ["--seed", "1e3"]),
                "bench": (["--seed", "-1"], ["--threads", "0"], ["--threads", "100000"], ["--warmup", "-1"], ["--repeats", "0"],
                          ["--dim-default", "x"])}
for _cmd, _bad in _BAD_NUMBERS.items():
    for _extra in _bad:
        def _bad_number(root, cmd=_cmd, extra=_extra):
            src = plain(root / "m")
            return Attack([cmd, src, src, *extra], False, codes=(2,))
        register(f"args/{_cmd}_{_extra[0].lstrip('-').replace('-', '_')}_{_extra[1].replace('-', 'minus_')}",
                 _bad_number)


# --- training: training_info and what fusion removes ---------------------------------

def _training(reads: str) -> onnx.ModelProto:
    m = gelu_model()
    alg = h.make_graph([h.make_node("Identity", [reads], ["t"])], "algorithm", [],
                       [h.make_tensor_value_info("t", T.FLOAT, None)])
    ti = onnx.TrainingInfoProto()
    ti.algorithm.CopyFrom(alg)
    if reads.startswith("c_"):  # an initializer: the algorithm updates it
        b = ti.update_binding.add()
        b.key, b.value = reads, "t"
    m.training_info.append(ti)
    return m


@case("training")
def _algorithm_updates_the_gelus_half(root):
    """Fusion deletes c_half: its binding would name nothing (exit 3, one line)."""
    (root / "m.onnx").write_bytes(_training("c_half").SerializeToString())
    return Attack(["fuse", root / "m.onnx", "-o", root / "out.onnx"], False, codes=(3,))


@case("training")
def _algorithm_reads_the_input_only(root):
    (root / "m.onnx").write_bytes(_training("x").SerializeToString())
    out = root / "out.onnx"

    def kept(_r):
        m = onnx.load(str(out))
        assert len(m.training_info) == 1 and m.training_info[0].algorithm.node[0].input == ["x"]
    return Attack(["fuse", root / "m.onnx", "-o", out], True, may_change=(out,), after=kept)


# --- cache: the IR cache's path is not a file ----------------------------------------

def _cache_case(make):
    def build(root):
        cache = root / "cache"
        cache.mkdir()
        make(cache / "ort-max-ir.json")
        src = plain(root / "m")
        out = root / "out.onnx"
        return Attack(["fuse", src, "-o", out], True, env={"GELU_ONNX_CACHE": str(cache)}, may_change=(out,),
                      timeout=60)
    return build


register("cache/fifo_at_the_cache_path", _cache_case(os.mkfifo))
register("cache/link_to_dev_zero_at_the_cache_path", _cache_case(lambda p: os.symlink("/dev/zero", p)))
register("cache/folder_at_the_cache_path", _cache_case(os.mkdir))
register("cache/dangling_link_at_the_cache_path", _cache_case(lambda p: os.symlink(p.parent / "gone", p)))
