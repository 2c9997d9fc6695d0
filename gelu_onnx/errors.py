"""Errors the CLI turns into one clear line and the exit code of its class
(the README's table: 0 ok, 1 parity failed, 2 bad input, 3 unsupported, 4 a bug).
Each also subclasses the built-in a Python caller would catch: bad input is a
ValueError (a missing file a FileNotFoundError too), an unsupported request a
NotImplementedError, a failed parity check an AssertionError.
"""
from __future__ import annotations


class GeluOnnxError(Exception):
    exit_code = 4  # internal error

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
    """A valid request this tool cannot carry out (e.g. an opset upgrade with no verified path)."""

    exit_code = 3
