"""The PS capture's server sends a response before it records the request's rows (their ids are taken first, so the
deps are the same): a worker waits for the response, not for the server's bookkeeping (docs/capture-ps.md,
"Inside one run"). Checked by a recorder that notes, at each row, whether the responses were already sent."""

import pytest

torch = pytest.importorskip("torch", reason="the PS capture needs PyTorch")
ps_server = pytest.importorskip("ddlsim.capture.ps_server", reason="the PS capture needs torch.distributed.rpc")


class _Spy:
    """new_id / new_message / row / held_row as RankRecorder's; each row notes which requests' futures were done then."""

    def __init__(self):
        self.next_id, self.messages, self.rows, self.requests = 100, 0, [], []

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def new_message(self) -> int:
        self.messages += 1
        return self.messages

    def row(self, kind, op, start_ns, end_ns, *, deps=(), row_id=None, **fields) -> int:
        rid = self.new_id() if row_id is None else row_id
        done = [r.future.done() for r in self.requests]
        self.rows.append({"id": rid, "kind": kind, "op": op, "start": start_ns, "end": end_ns, "deps": list(deps),
                          "done": done, **fields})
        return rid

    def held_row(self, kind, op, start_ns, end_ns, deps, fields, columns=None, row_id=None) -> int:
        return self.row(kind, op, start_ns, end_ns, deps=deps, row_id=row_id, **fields, **(columns or {}))


class _Model:
    def __init__(self, keys: int):
        self.keys = [_Key(k) for k in range(keys)]
        self.values = {k: torch.zeros(3) for k in range(keys)}

    def value(self, key):
        return self.values[key]

    def assign(self, key, value):
        self.values[key] = value


class _Key:
    def __init__(self, key):
        self.key, self.layer, self.name, self.server = key, 0, f"w{key}", 0


def _request(op, worker, key, rpc, arrival, count=1, payload=None):
    return ps_server.Request(op, worker, key, 0, 1000 + rpc, rpc, count, payload, arrival, torch.futures.Future())


def _server(spy, workers, sync=True):
    return ps_server.Server(spy, _Model(2), {"sync": sync, "lr": 0.5}, workers)


def test_a_pull_is_answered_before_its_rows_are_recorded():
    spy = _Spy()
    server = _server(spy, workers=1)
    req = _request("pull", 0, 1, rpc=7, arrival=5)
    spy.requests = [req]
    server._serve(req)
    assert req.future.done() and req.future.wait()[1].tolist() == [0.0, 0.0, 0.0]
    by_op = {r["op"]: r for r in spy.rows}
    assert set(by_op) == {"pull_request", "read", "pull_response"}
    assert all(r["done"] == [True] for r in spy.rows)  # before: the recv and read rows came before the response
    recv, read, send = by_op["pull_request"], by_op["read"], by_op["pull_response"]
    assert (recv["kind"], recv["start"], recv["end"], recv["deps"]) == ("recv", 5, 5, [])
    assert read["deps"] == [recv["id"]] and send["deps"] == [read["id"]]
    assert read["start"] <= read["end"] <= send["start"] <= send["end"]
    assert len({recv["id"], read["id"], send["id"]}) == 3


def test_a_synchronous_update_answers_every_push_before_recording():
    spy = _Spy()
    server = _server(spy, workers=2)
    first = _request("push", 0, 1, rpc=1, arrival=10, payload=torch.ones(3))
    second = _request("push", 1, 1, rpc=2, arrival=20, payload=3 * torch.ones(3))
    spy.requests = [first, second]
    server._serve(first)  # waits for the other worker's push: its recv row only, its future still pending
    assert [(r["op"], r["done"]) for r in spy.rows] == [("push_request", [False, False])]
    server._serve(second)
    later = spy.rows[1:]
    assert sorted(r["op"] for r in later) == ["push_request", "push_response", "push_response", "update"]
    assert all(r["done"] == [True, True] for r in later)  # before: the second recv row and the update's came first
    update = next(r for r in later if r["op"] == "update")
    recvs = [r["id"] for r in spy.rows if r["op"] == "push_request"]
    assert sorted(update["deps"]) == sorted(recvs)
    assert [r["deps"] for r in later if r["op"] == "push_response"] == [[update["id"]], [update["id"]]]
    assert server.model.values[1].tolist() == [-1.0, -1.0, -1.0]  # 0 - 0.5 x mean(1, 3)
    assert len({r["id"] for r in spy.rows}) == len(spy.rows)


def test_an_asynchronous_push_is_answered_before_its_rows():
    spy = _Spy()
    server = _server(spy, workers=2, sync=False)
    req = _request("push", 1, 0, rpc=4, arrival=30, payload=torch.ones(3))
    spy.requests = [req]
    server._serve(req)
    assert sorted(r["op"] for r in spy.rows) == ["push_request", "push_response", "update"]
    assert all(r["done"] == [True] for r in spy.rows)
    update = next(r for r in spy.rows if r["op"] == "update")
    assert update["rpc"] == 4 and update["deps"] == [next(r["id"] for r in spy.rows if r["op"] == "push_request")]
