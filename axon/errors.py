"""Typed errors shared by every package.

Each error carries the context a user needs to fix the problem (file, field, op, shapes, kernel
line). The CLI turns any `AxonError` into one line on stderr and exit code 2; anything else is a bug.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator


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


# what the machine did, not the code: a full disk, a quota, a read-only file system
_FULL_OR_READ_ONLY = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def storage_failure(exc: BaseException, resumable: bool = True) -> str | None:
    """One line for a write that failed because the disk is full or read-only, found anywhere in
    `exc`'s chain (an OSError, or SQLite's "database or disk is full" under SQLAlchemy or MLflow),
    else None: the CLI prints it as a user's problem (exit 2) instead of a traceback. `resumable`: the
    command keeps its work in a workdir (tune, sweep), so the line says the same command resumes.

    >>> storage_failure(RuntimeError("x"))
    >>> storage_failure(OSError(errno.ENOSPC, "No space left on device", "/w/records.db"))
    'No space left on device: /w/records.db (free some space, or pass another --workdir; the same command resumes)'
    """
    then = ", or pass another --workdir; the same command resumes" if resumable else ""
    for current in _chain(exc):
        if isinstance(current, OSError) and current.errno in _FULL_OR_READ_ONLY:
            where = f": {current.filename}" if current.filename else ""
            room = "write elsewhere" if current.errno == errno.EROFS else "free some space"
            return f"{current.strerror}{where} ({room}{then})"
        if "database or disk is full" in str(current):
            return f"a database of the workdir could not be written: database or disk is full (free some space{then})"
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and the exceptions it was raised from or while handling, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def path_too_long(exc: BaseException) -> str | None:
    """One line for a path the system refuses as too long (a name over 255 bytes, often a variable
    expanded twice), found anywhere in `exc`'s chain, else None: `--out`, `--workdir`, a spec or kernel
    file given such a path was an OSError traceback from the first stat of it.

    >>> path_too_long(OSError(errno.ENAMETOOLONG, "File name too long", "a" * 8))
    'File name too long: aaaaaaaa (names of up to 255 bytes, paths of up to 4096: give a shorter path)'
    """
    for current in _chain(exc):
        if isinstance(current, OSError) and current.errno == errno.ENAMETOOLONG:
            where = f": {current.filename}" if current.filename else ""
            return f"{current.strerror}{where} (names of up to 255 bytes, paths of up to 4096: give a shorter path)"
    return None


def symlink_loop(exc: BaseException) -> str | None:
    """One line for a path whose symbolic links lead back to themselves (Python 3.11's Path.resolve
    raises RuntimeError('Symlink loop from ...'), the system ELOOP), found in `exc`'s chain, else None.

    >>> symlink_loop(RuntimeError("Symlink loop from '/w/a'"))
    "Symlink loop from '/w/a': its symbolic links lead back to themselves: give another path"
    """
    for current in _chain(exc):
        if isinstance(current, OSError) and current.errno == errno.ELOOP:
            return f"{current.strerror}: {current.filename}: give another path"
        if type(current) is RuntimeError and str(current).startswith("Symlink loop from "):
            return f"{current}: its symbolic links lead back to themselves: give another path"
    return None
