"""RankRecorder's rows: the bytes json.dumps gives their record (checked against json itself on seeded random rows:
strings with quotes, backslashes, %, control and non-ASCII characters, fields named like row keys, every JSON value
type), written once each however many threads record and flush, and never held without bound."""

import json
import random
import threading

from ddlsim.capture.recorder import RankRecorder

NAMES = ["peer", "bytes", "name", "layer", "tensor", "iteration", "rpc", "message", "x%d", "naïve", 'q"uote', "back\\slash",
         "id", "tab\there"]  # "id" shadows a row key; kind, deps, ready_ns are the methods' own parameters
TEXTS = ["fc3.weight", "conv1.bias", "", "%s %d %%", 'say "hi"', "a\\b", "line\nbreak", "ünïcödé", "\x01ctl", "日本"]


def _value(rng: random.Random):
    kind = rng.randrange(8)
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
    start = rng.randrange(0, 2**62)
    deps = None if rng.random() < 0.1 else [rng.randrange(0, 2**40) for _ in range(rng.randrange(4))]
    ready = None if rng.random() < 0.7 else rng.randrange(0, 2**62)
    names = rng.sample(NAMES, rng.randrange(len(NAMES)))
    fields = {n: _value(rng) for n in names}
    return kind, op, start, start + rng.randrange(10**9), ready, deps, fields


def _oracle(rid, kind, op, start, end, ready, deps, fields) -> str:
    record = {"id": rid, "kind": kind, "op": op, "start_ns": start, "end_ns": end, "deps": deps}
    if ready is not None:
        record["ready_ns"] = ready
    record.update(fields)
    return json.dumps(record, separators=(",", ":"))


def test_a_row_is_json_dumps_of_its_record_on_seeded_random_rows(tmp_path):
    rng = random.Random(20261127)
    rec = RankRecorder(tmp_path, 0, "worker")
    expected = []
    for _ in range(3000):
        kind, op, start, end, ready, deps, fields = _row(rng)
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
