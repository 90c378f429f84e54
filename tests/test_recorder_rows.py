"""RankRecorder's rows: the bytes json.dumps gives their record (checked against json itself on seeded random rows:
strings with quotes, backslashes, %, control, non-ASCII and astral characters and lone surrogates, fields named like
row keys, every JSON value type, ints beyond 64 bits, subclasses of int and str, numpy integers and floats as times),
written once each however many threads record and flush, and never held without bound."""

import enum
import json
import random
import threading

import numpy as np

from ddlsim.capture.recorder import RankRecorder

NAMES = ["peer", "bytes", "name", "layer", "tensor", "iteration", "rpc", "message", "x%d", "naïve", 'q"uote', "back\\slash",
         "id", "tab\there"]  # "id" shadows a row key; kind, deps, ready_ns are the methods' own parameters
TEXTS = ["fc3.weight", "conv1.bias", "", "%s %d %%", 'say "hi"', "a\\b", "line\nbreak", "ünïcödé", "\x01ctl", "日本",
         "\x7f\x1f\x08\x0c\r\t", "emoji \U0001f600 \U0010ffff", "lone \ud800 and \udfff", "\u2028\ufeff~ "]


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


def _int_like(rng: random.Random, low: int, high: int):
    """An integer time or id as a job may pass it: int, numpy int64, a float with its fraction, or a bool."""
    value = rng.randrange(low, high)
    kind = rng.randrange(6)
    if kind == 0:
        return np.int64(value)
    if kind == 1:
        return float(value) + 0.75
    if kind == 2:
        return rng.random() < 0.5
    return value


def _value(rng: random.Random):
    kind = rng.randrange(12)
    if kind == 8:
        return rng.choice([2**64 + rng.randrange(10), -2**70, 2**63, -2**63 - 1])
    if kind == 9:
        return Level.HIGH
    if kind == 10:
        return Name(rng.choice(TEXTS))
    if kind == 11:
        return rng.choice([float("nan"), float("inf"), -0.0, 1e300, 5e-324])
    if kind == 0:
        return rng.randrange(-2**40, 2**63)
    if kind == 1:
        return rng.choice(TEXTS)
    if kind == 2:
        return rng.uniform(-1e6, 1e6)
    if kind == 3:
        return None
    if kind == 4:
        return rng.random() < 0.5
    if kind == 5:
        return [rng.randrange(100), rng.choice(TEXTS)]
    if kind == 6:
        return {"k": rng.randrange(5)}
    return rng.randrange(0, 1000)


def _row(rng: random.Random):
    kind, op = rng.choice(["send", "recv", "compute", 'w"e%ird']), rng.choice(["push_request", "update", "apply", "ö%p"])
    start = _int_like(rng, 0, 2**62)
    deps = None if rng.random() < 0.1 else [_int_like(rng, 0, 2**40) for _ in range(rng.randrange(4))]
    if deps is not None and rng.random() < 0.2:
        deps = tuple(deps) if rng.random() < 0.5 else iter(deps)
    ready = None if rng.random() < 0.7 else _int_like(rng, 0, 2**62)
    names = rng.sample(NAMES, rng.randrange(len(NAMES)))
    fields = {n: _value(rng) for n in names}
    return kind, op, start, int(start) + rng.randrange(10**9), ready, deps, fields


def _oracle(rid, kind, op, start, end, ready, deps, fields) -> str:
    """json.dumps of the row's record, its times, id and deps taken through int() (the recorder's contract)."""
    record = {"id": int(rid), "kind": kind, "op": op, "start_ns": int(start), "end_ns": int(end),
              "deps": None if deps is None else [int(d) for d in deps]}
    if ready is not None:
        record["ready_ns"] = int(ready)
    record.update(fields)
    return json.dumps(record, separators=(",", ":"))


def test_a_row_is_json_dumps_of_its_record_on_seeded_random_rows(tmp_path):
    rng = random.Random(20261127)
    rec = RankRecorder(tmp_path, 0, "worker")
    expected = []
    for _ in range(3000):
        kind, op, start, end, ready, deps, fields = _row(rng)
        if isinstance(deps, type(iter([]))):  # an iterator is read once: the oracle and format_row get a list
            deps = list(deps)
            rid = rec.row(kind, op, start, end, ready_ns=ready, deps=iter(deps), **fields)
        else:
            rid = rec.row(kind, op, start, end, ready_ns=ready, deps=deps, **fields)
        line = _oracle(rid, kind, op, start, end, ready, deps, fields)
        assert rec.format_row(kind, op, start, end, ready_ns=ready, deps=deps, row_id=rid, **fields) == line
        expected.append(line)
    rec.close()
    lines = (tmp_path / "0.rank.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines[1:-1] == expected
    assert json.loads(lines[-1])["end"]["rows"] == 3000


def test_rows_from_several_threads_are_each_written_once(tmp_path):
    rec = RankRecorder(tmp_path, 1, "server")

    def record(t: int) -> None:
        for i in range(4000):
            rec.row("compute", "update", i, i + 1, deps=[i], thread=t, i=i)
            if i % 97 == 0:
                rec.flush()

    threads = [threading.Thread(target=record, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rec.close()
    rows = [json.loads(line) for line in (tmp_path / "1.rank.jsonl").read_text().splitlines()[1:]]
    end = rows.pop()
    assert end["end"]["rows"] == 16000 == len(rows)
    assert sorted((r["thread"], r["i"]) for r in rows) == [(t, i) for t in range(4) for i in range(4000)]
    assert len({r["id"] for r in rows}) == 16000


def test_a_job_that_never_flushes_does_not_hold_its_rows_without_bound(tmp_path):
    rec = RankRecorder(tmp_path, 2, "worker")
    for i in range(1500):
        rec.row("compute", "forward", i, i + 1)
    on_disk = sum(1 for line in (tmp_path / "2.rank.jsonl").read_text().splitlines() if line.startswith('{"id"'))
    assert 1024 <= on_disk < 1500  # the first 1024 went to the file (buffered there), the rest are held
    rec.close()
    assert sum(1 for line in (tmp_path / "2.rank.jsonl").read_text().splitlines() if line.startswith('{"id"')) == 1500


def test_a_row_is_written_as_its_arguments_were_when_it_was_recorded(tmp_path):
    """Rows are held as their parts until they are written (flush or idle) and formatted then: deps are copied when
    the row is recorded, and a row whose field holds a value that can change (a list, a dict) is formatted when it
    is recorded, so changing the caller's list or dict afterwards changes nothing on disk."""
    rec = RankRecorder(tmp_path, 3, "worker")
    deps, shape, extra = [1, 2], [4, 5], {"k": 1}
    first = rec.row("compute", "forward", 10, 20, deps=deps, shape=shape, layer=3)
    second = rec.row("send", "push_request", 30, 40, deps=deps, peer=1, extra=extra, name="fc.weight")
    third = rec.row("compute", "backward", 50, 60, deps=deps, layer=2, scale=0.5)
    expected = [_oracle(first, "compute", "forward", 10, 20, None, [1, 2], {"shape": [4, 5], "layer": 3}),
                _oracle(second, "send", "push_request", 30, 40, None, [1, 2],
                        {"peer": 1, "extra": {"k": 1}, "name": "fc.weight"}),
                _oracle(third, "compute", "backward", 50, 60, None, [1, 2], {"layer": 2, "scale": 0.5})]
    deps.append(99)
    shape[0] = -1
    extra["k"] = 7
    assert rec.held() == 3
    assert (tmp_path / "3.rank.jsonl").read_text().count("\n") == 1  # the header only: the rows are held
    rec.flush()
    assert rec.held() == 0
    rec.close()
    assert (tmp_path / "3.rank.jsonl").read_text().splitlines()[1:-1] == expected


def test_idle_formats_the_rows_held_and_the_flush_hands_them_on(tmp_path):
    """idle() formats the rows held into the file's buffer (the same bytes a flush writes), without handing them to
    the operating system; the next flush does. With nothing held it writes nothing."""
    rec = RankRecorder(tmp_path, 4, "worker")
    rec.idle()
    ids = [rec.row("compute", "forward", i, i + 1, deps=[i], layer=i) for i in range(5)]
    assert rec.held() == 5
    rec.idle()
    assert rec.held() == 0
    rec.row("compute", "backward", 9, 10, deps=ids[-1:], layer=0)
    rec.flush()
    lines = (tmp_path / "4.rank.jsonl").read_text().splitlines()[1:]
    assert lines == [_oracle(rid, "compute", "forward", i, i + 1, None, [i], {"layer": i}) for i, rid in enumerate(ids)] \
        + [_oracle(ids[-1] + 1, "compute", "backward", 9, 10, None, [ids[-1]], {"layer": 0})]
    rec.close()


def _atomic(rng: random.Random):
    """A value held_row's caller may hand over: an int (any size, a subclass), a string, a float, a bool or None."""
    return rng.choice([rng.randrange(-2**40, 2**63), 2**64 + rng.randrange(10), Level.HIGH, rng.choice(TEXTS),
                       Name(rng.choice(TEXTS)), rng.uniform(-1e6, 1e6), float("inf"), None, rng.random() < 0.5])


def test_a_held_row_is_json_dumps_of_its_record_and_interleaves_with_row_on_seeded_random_rows(tmp_path):
    """held_row(kind, op, start, end, deps, fields, columns, row_id) writes json.dumps of {id, kind, op, start_ns,
    end_ns, deps, **fields, **columns}, in the order the rows were recorded among row()'s rows, with columns dicts
    shared by many rows, deps None or a list, a given row id or a new one, fields named like row keys, and fields
    named like a column (the column's value, in the field's place, as {**fields, **columns} has it)."""
    rng = random.Random(20261128)
    rec = RankRecorder(tmp_path, 5, "worker")
    shared = [{n: _atomic(rng) for n in rng.sample(["iteration", "tensor", "layer", "name", "id"], rng.randrange(5))}
              for _ in range(4)]
    expected = []
    for i in range(3000):
        kind, op, start, end = rng.choice(["send", "recv", "compute"]), rng.choice(["push_request", "ack", "ö%p"]), \
            rng.randrange(2**62), rng.randrange(2**62)
        deps = None if rng.random() < 0.1 else [rng.randrange(2**40) for _ in range(rng.randrange(4))]
        if rng.random() < 0.3:  # one of row()'s rows in between
            fields = {n: _atomic(rng) for n in rng.sample(NAMES, rng.randrange(4))}
            rid = rec.row(kind, op, start, end, deps=deps, **fields)
            expected.append(_oracle(rid, kind, op, start, end, None, deps, fields))
            continue
        columns = rng.choice(shared + [None])
        names = NAMES if rng.random() < 0.2 else [n for n in NAMES if n not in (columns or {})]  # some share a column's
        fields = {n: _atomic(rng) for n in rng.sample(names + (list(columns or {}) if names is NAMES else []),
                                                        rng.randrange(5))}
        given = rng.randrange(2**40) if rng.random() < 0.3 else None
        rid = rec.held_row(kind, op, start, end, deps, fields, columns, given)
        assert given is None or rid == given
        expected.append(_oracle(rid, kind, op, start, end, None, deps, {**fields, **(columns or {})}))
        if i % 401 == 0:
            rec.idle()
    rec.close()
    lines = (tmp_path / "5.rank.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines[1:-1] == expected
    assert json.loads(lines[-1])["end"]["rows"] == 3000
