"""Typed errors shared by every package.

Each error carries the context a user needs to fix the problem (file, field, op, shapes, kernel
line). The CLI turns any `AxonError` into one line on stderr and exit code 2; anything else is a bug.
"""

from __future__ import annotations


class AxonError(Exception):
    """Base of every error that is the user's to fix (bad input, impossible request)."""

    exit_code = 2


class SpecError(AxonError):
    """A tensor-program spec is malformed: shapes that do not fit, unbound dims, bad ops."""


class HardwareError(AxonError):
    """A hardware description file is missing, malformed or inconsistent."""


class NKIError(AxonError):
    """An NKI kernel broke a language or hardware rule (raised by the emulator)."""


class BackendError(AxonError):
    """A measurement backend cannot run (missing SDK, failed compile)."""


class StoreError(AxonError):
    """A record database or tracking store cannot be used (corrupt, locked, wrong schema)."""
