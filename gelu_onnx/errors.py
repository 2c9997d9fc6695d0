"""Errors the CLI turns into one clear line and a documented exit code.

Exit codes (also in the README):
  0  success
  1  parity check failed (``check``) / a fusion left a model that differs
  2  bad input: unreadable, malformed or unsafe model, bad arguments
  3  unsupported: a valid request this tool cannot carry out (e.g. an opset
     upgrade with no verified path)
  4  internal error (a bug: please report it)

Each also subclasses the built-in a Python caller would catch: bad input is a
ValueError (a missing file a FileNotFoundError too), an unsupported request a
NotImplementedError, a failed parity check an AssertionError.
"""
from __future__ import annotations


class GeluOnnxError(Exception):
    exit_code = 4

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InputError(GeluOnnxError, ValueError):
    """The input (model file, npz, arguments) is unreadable, malformed or unsafe."""

    exit_code = 2


class MissingFileError(InputError, FileNotFoundError):
    """A path the caller named does not exist."""


class UnsafeModelError(InputError):
    """The model points outside its folder (external data escaping, symlinks)."""


class UnsupportedError(GeluOnnxError, NotImplementedError):
    exit_code = 3
