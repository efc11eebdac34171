"""`axon.forked`: a result computed in a forked child, and every way a child can fail."""

from __future__ import annotations

import os
import threading
import time

import pytest

from axon.forked import Ahead, ChildFailed, Forked, Stream, workers


def test_the_result_is_computed_in_another_process_that_sees_this_ones_state():
    state = {"big": list(range(100_000))}
    got = Forked(lambda: (os.getpid(), sum(state["big"]))).result()
    assert got[0] != os.getpid() and got[1] == sum(range(100_000))


def test_a_child_that_raises_or_returns_what_does_not_pickle_is_a_failed_child():
    def boom():
        raise ValueError("no")

    with pytest.raises(ChildFailed):
        Forked(boom).result()
    with pytest.raises(ChildFailed):
        Forked(lambda: threading.Lock()).result()  # a lock does not pickle
    child = Forked(lambda: 1)
    assert child.result() == 1
    with pytest.raises(ChildFailed):  # collected once
        child.result()


def test_cancel_kills_and_collects_a_running_child():
    child = Forked(lambda: time.sleep(60))
    pid = child.pid
    start = time.perf_counter()
    child.cancel()
    assert time.perf_counter() - start < 5
    with pytest.raises(ChildProcessError):  # already collected: no zombie left
        os.waitpid(pid, os.WNOHANG)


def test_ahead_computes_here_what_the_child_could_not():
    parent = os.getpid()

    def only_here():
        if os.getpid() != parent:
            raise RuntimeError("not in a child")
        return "here"

    assert Ahead(only_here, 2).result() == "here"
    assert Ahead(only_here, 2).from_child() is None
    assert Ahead(lambda: os.getpid() != parent, 2).result() is True
    assert Ahead(lambda: os.getpid() != parent, 1).result() is False  # one worker: no child


def test_workers_takes_the_request_then_the_environment_then_the_cpus(monkeypatch):
    assert workers(3) == 3
    monkeypatch.setenv("AXON_CPUS", "1")
    assert workers() == 1
    monkeypatch.delenv("AXON_CPUS")
    assert 1 <= workers() <= 2


def test_a_child_that_gives_nothing_in_time_is_stopped_and_failed():
    child = Forked(lambda: time.sleep(60))
    pid = child.pid
    start = time.perf_counter()
    with pytest.raises(ChildFailed, match="no result in 1 s"):
        child.result(timeout=1)
    assert time.perf_counter() - start < 5
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_a_stream_sends_each_item_when_it_is_ready():
    stream = Stream(lambda: ((i, time.sleep(0.2))[0] for i in range(5)))
    assert stream.poll() == []  # nothing ready yet, and no waiting for it
    got = []
    deadline = time.perf_counter() + 20
    while not stream.ended and time.perf_counter() < deadline:
        got += stream.poll()
        time.sleep(0.05)
    assert got == [0, 1, 2, 3, 4]
    stream.cancel()
    slow = Stream(lambda: (time.sleep(60) for _ in range(3)))
    pid = slow.pid
    slow.cancel()
    assert slow.poll() == []
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
