"""The PS capture's worker formats its rows while its loop would wait anyway for a response (RankRecorder.idle);
a response already there is taken at once (docs/capture-ps.md, "Inside one run"). The server does not: its thread
formatting rows holds the GIL that the RPC threads need to send its responses, so it formats them at its 200 ms
flush."""

import queue

import pytest

pytest.importorskip("torch", reason="the PS capture needs PyTorch")


class _Recorder:
    """Counts idle() calls, and notes when each came: after how many rows."""

    def __init__(self):
        self.calls, self.rows, self.flushes = [], 0, 0

    def idle(self) -> None:
        self.calls.append(self.rows)

    def row(self, *args, **kwargs) -> int:
        self.rows += 1
        return self.rows

    held_row = row

    def held(self) -> int:
        return 0

    def flush(self) -> None:
        self.flushes += 1


class _Queue:
    """get_nowait() answers from `ready` (queue.Empty for an entry None); get() from `later`."""

    def __init__(self, ready, later):
        self.ready, self.later, self.blocking = list(ready), list(later), 0

    def get_nowait(self):
        item = self.ready.pop(0)
        if item is None:
            raise queue.Empty
        return item

    def get(self, timeout=None):
        self.blocking += 1
        item = self.later.pop(0)
        if item is queue.Empty:
            raise queue.Empty
        return item


class _Future:
    def __init__(self, value):
        self.value = value

    def wait(self):
        return self.value


def _worker(responses):
    from ddlsim.capture import ps

    class Key:
        layer, name, server = 0, "fc.weight", 0

    class Model:
        keys = {0: Key(), 1: Key()}

        def assign(self, key, value):
            pass

    worker = ps._Worker.__new__(ps._Worker)
    worker.rec, worker.model, worker.responses, worker.timeout = _Recorder(), Model(), responses, 1.0
    worker._send = lambda *args, **kwargs: None
    return worker


def test_the_worker_formats_its_rows_only_when_it_would_wait_for_a_response():
    # two pull responses: the first is not there yet (idle, then wait for it), the second is already queued
    first = (1, "pull", 0, 3, 2, 11, _Future((101, None)))
    second = (2, "pull", 1, 3, 2, 12, _Future((102, None)))
    worker = _worker(_Queue(ready=[None, second], later=[first]))
    worker.model.assign = lambda key, value: None
    pulled = worker._drain(2, 3)
    assert len(pulled) == 2
    assert worker.rec.calls == [0]  # once, before any row of the drain: the second response was waiting
    assert worker.responses.blocking == 1
