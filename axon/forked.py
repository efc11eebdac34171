"""`Forked(fn)`: compute `fn()` in a forked copy of this process while this one goes on.

A tune runs one trial at a time, and most of a trial is pure computation on the tuner's state
(lowering candidate points, tracing and simulating a kernel, drawing the best kernel's timeline).
Where two such pieces do not depend on each other, the second runs in a child forked at that
moment: it sees the whole state as it is then, without pickling it, and sends back only its
(small, picklable) result. Nothing a child does reaches the parent except that result, so a tune
decides exactly what it decides without children; `workers()` says how many processes a tune uses
(1: no child at all).

A child that fails for any reason (an exception, a signal, a result that does not pickle) makes
`result()` raise `ChildFailed`; the callers then compute the same thing themselves. `cancel()`
(or the parent's exit) never leaves a child running: the child also ends when its parent does.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import select
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from axon.errors import AxonError

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1


class ChildFailed(RuntimeError):
    """The forked child gave no result (it raised, was killed, or its result did not pickle)."""


def workers(requested: int | None = None) -> int:
    """Processes a tune may use: `requested` if given, else `AXON_CPUS`, else the CPUs this
    process may run on, capped at 2 (a trial has at most two independent pieces). 1 where the
    system cannot fork."""
    if not hasattr(os, "fork"):
        return 1
    if requested is None:
        env = os.environ.get("AXON_CPUS", "").strip()
        if env and not (env.isdigit() and int(env) >= 1):  # like --cpus 0: refused, not quietly replaced
            raise AxonError(f"AXON_CPUS={env!r}: expected a positive integer, the processes a tune may use")
        requested = int(env) if env else min(2, len(os.sched_getaffinity(0)))
    return max(1, requested)


def _die_with_parent() -> None:
    """Linux: the child gets SIGKILL when the parent exits (a killed tune leaves no child)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _spawn(send: Callable[[Any], None]) -> tuple[int, int]:
    """Fork a child that calls `send(pipe)` (a binary file it writes its result to) and leaves
    without running any of the parent's exit code; returns (pid, the read end of the pipe)."""
    read, write = os.pipe()
    parent = os.getpid()
    # Ctrl-C held off across the fork: it must not land in the child before it ignores it, nor in
    # this process before the caller knows the child (it is stopped here then)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            _die_with_parent()
            if os.getppid() != parent:  # the parent ended before the line above took effect
                os._exit(1)
            with os.fdopen(write, "wb") as out:
                send(out)
            code = 0
        except BaseException:  # noqa: BLE001 - any failure is the parent's ChildFailed
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a Ctrl-C held off is raised here
    except BaseException:
        _stop(pid, read)
        raise
    return pid, read


def _stop(pid: int, read: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    try:
        os.close(read)
    except OSError:
        pass


class _Child:
    """A forked child (`_spawn`) writing to a pipe this process reads; `cancel` stops and collects it."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        self.pid: int | None
        self.pid, self._read = _spawn(send)

    def cancel(self) -> None:
        """Stop the child, if it still runs, and collect it."""
        if self.pid is not None:
            pid, self.pid = self.pid, None
            _stop(pid, self._read)


class Forked(_Child, Generic[T]):
    """`fn()` computed in a forked child; `result()` waits for it."""

    def __init__(self, fn: Callable[[], T]) -> None:
        super().__init__(lambda out: out.write(pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)))

    def result(self, timeout: float | None = None) -> T:
        """The child's result (waiting for it, at most `timeout` seconds); ChildFailed if it has none
        by then (the child is stopped: a child that hangs never hangs the tune)."""
        if self.pid is None:
            raise ChildFailed("the child was cancelled or already collected")
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks = []
        try:
            while True:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not select.select([self._read], [], [], wait)[0]:
                    raise ChildFailed(f"forked child gave no result in {timeout:.0f} s")
                chunk = os.read(self._read, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
            os.close(self._read)
            _, status = os.waitpid(self.pid, 0)
        except BaseException:
            self.cancel()
            raise
        self.pid = None
        data = b"".join(chunks)
        if status != 0 or not data:
            raise ChildFailed(f"forked child ended with status {status}")
        try:
            return pickle.loads(data)
        except Exception as exc:  # noqa: BLE001 - a torn result is a failed child
            raise ChildFailed(f"forked child's result does not unpickle: {exc}") from None


class Stream(_Child, Generic[T]):
    """The items of `fn()` (an iterable), computed in a forked child and sent one by one as each is
    ready; `poll()` takes those that arrived, without waiting."""

    def __init__(self, fn: Callable[[], Iterable[T]]) -> None:
        def send(out: Any) -> None:
            for item in fn():
                data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
                out.write(len(data).to_bytes(8, "little") + data)
                out.flush()

        super().__init__(send)
        self._buf = b""
        self.ended = False  # the child sent everything it will send (or died)

    def poll(self) -> list[T]:
        """The items that arrived since the last call (none if the child was stopped)."""
        if self.pid is None:
            return []
        while not self.ended and select.select([self._read], [], [], 0)[0]:
            chunk = os.read(self._read, 1 << 20)
            self._buf += chunk
            self.ended = not chunk
        items = []
        while len(self._buf) >= 8:
            size = int.from_bytes(self._buf[:8], "little")
            if len(self._buf) < 8 + size:
                break
            items.append(pickle.loads(self._buf[8 : 8 + size]))
            self._buf = self._buf[8 + size :]
        return items


class Ahead(Generic[T]):
    """`make()`, started now in a forked child when there are two workers; `result()` is the child's,
    or `make()` computed here then (with one worker, or if the child failed)."""

    def __init__(self, make: Callable[[], T], n_workers: int, timeout: float = 900.0) -> None:
        self.make, self.timeout = make, timeout
        self.child = Forked(make) if n_workers > 1 else None

    def result(self) -> T:
        child, self.child = self.child, None
        if child is not None:
            try:
                return child.result(self.timeout)
            except ChildFailed:
                pass
        return self.make()

    def from_child(self) -> T | None:
        """The child's result, or None (no child, or it failed): nothing is computed here."""
        child, self.child = self.child, None
        try:
            return child.result(self.timeout) if child is not None else None
        except ChildFailed:
            return None

    def cancel(self) -> None:
        child, self.child = self.child, None
        if child is not None:
            child.cancel()
