"""Every error a doc shows (a `$ ddlsim ...` line in a fenced block followed by `error: ...`) is what the command
prints: each is run as written, in a scratch directory, after the files it needs are made, and its standard error
compared with the doc's text (whitespace aside; `...` and `…` in the doc stand for any text). Found by this test
when it was written: docs/cli.md's `--model resnet51` suggested resnet101 where ddlsim suggests resnet18."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "reproduction").glob("*.md"))]
RUN = "ddlsim simulate -m lenet5 -n 2 -i 1 --network analytic -q --out run"

# (doc, command) -> shell lines that make what the command reads; every transcript is here or in REASONS.
SETUP = {
    ("docs/cli.md", "ddlsim simulate --workers 65536"): [],
    ("docs/cli.md", "ddlsim export run/events.parquet --format csv --out notes"): [RUN, "mkdir notes"],
    ("docs/cli.md", "ddlsim export run/events.parquet --format csv --out run/events.parquet"): [RUN],
    ("docs/cli.md", "ddlsim convert run/events.parquet pipe --to chrome"): [RUN, "mkfifo pipe"],
    ("docs/cli.md", "ddlsim models > /dev/full"): [],
    ("docs/cli.md", "ddlsim simulate --model resnet51 --out x"): [],
    ("docs/cli.md", "ddlsim simulate typo.toml"): ["printf '[network]\\nbandwith = \"10Gbps\"\\n' > typo.toml"],
    ("docs/cli.md", "mkfifo pipe.parquet && ddlsim analyze pipe.parquet"): [],
    ("docs/cli.md", "ddlsim capture ddp --plan edited.json --out run"): [
        "ddlsim plan -m lenet5 -n 2 --network analytic --bucket-caps 1,5 --out plan.json > /dev/null",
        "\"$PY\" -c 'import json; p = json.load(open(\"plan.json\")); p[\"ddp\"][\"iteration_time_s\"] = \"fast\"; "
        "json.dump(p, open(\"edited.json\", \"w\"))'"],
    ("docs/cli.md", "ddlsim simulate --workers 0 --latency -1us"): [],
    ("docs/cli.md", "ddlsim simulate --collective-model closed-form --strategy ps"): [],
    ("docs/cli.md", "ddlsim sweep --set model.name=lenet5,resnet51 --out results"): [],
    ("docs/cli.md", "ddlsim plan --model lenet5 --workers 2 --bucket-caps 1,,5"): [],
    ("docs/sweep.md", "ddlsim sweep --set workers=2,4 --out results --ray-address headnode:6379"): [],
}

# Transcripts whose input takes more than a shell line to make: the message is checked where that input is made.
REASONS = {
    ("docs/cli.md", "ddlsim replay edited/events.parquet"): "tests/test_capture_metadata_errors.py",
    ("docs/cli.md", "ddlsim reproduce thesis-network --quick --runs runs --out report"):
        "tests/test_thesis_network_runs_errors.py",
    ("docs/tenants.md", "ddlsim simulate overload.toml"): "tests/test_tenant_overload_hint.py",
}

# Text of a doc's transcript that depends on the machine (the memory budget is half of its RAM; the resolver's
# words for a name it cannot find): any text matches there.
MACHINE = {
    ("docs/cli.md", "ddlsim simulate --workers 65536"): ["12.64 GB"],
    ("docs/sweep.md", "ddlsim sweep --set workers=2,4 --out results --ray-address headnode:6379"):
        ["Name or service not known"],
}


def _transcripts() -> dict[tuple[str, str], str]:
    found = {}
    for doc in DOCS:
        name = str(doc.relative_to(ROOT))
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", doc.read_text(encoding="utf-8"), flags=re.S | re.M):
            for command, output in re.findall(r"^\$ (.*)\n((?:(?!\$ ).*\n)*)", block, flags=re.M):
                if "ddlsim" in command and output.startswith("error:"):
                    found[(name, command.strip())] = output
    return found


TRANSCRIPTS = _transcripts()


def test_every_error_transcript_is_run_or_has_a_reason():
    assert set(TRANSCRIPTS) == set(SETUP) | set(REASONS), \
        "a doc's error transcript was added or changed: list it in SETUP (with the files it needs) or REASONS"
    assert not set(SETUP) & set(REASONS)


def _pattern(doc_text: str, machine: list[str]) -> str:
    text = " ".join(doc_text.split())
    for part in machine:
        assert part in text, f"{part!r} is not in the transcript any more"
        text = text.replace(part, "\0")
    pieces = re.split(r"\.\.\.|…|\0", text)
    return ".*?".join(re.escape(p) for p in pieces)


@pytest.mark.parametrize("key", sorted(SETUP), ids=[c for _, c in sorted(SETUP)])
def test_the_transcript_prints_what_the_doc_shows(tmp_path, key):
    doc_text = TRANSCRIPTS[key]
    shell = "\n".join(['ddlsim() { "$PY" -m ddlsim "$@"; }', "set -e", *SETUP[key], "set +e", key[1]])
    env = {**os.environ, "PY": sys.executable, "HOME": str(tmp_path), "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "python"), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run(["bash", "-c", shell], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 2, (run.returncode, run.stderr)
    printed = " ".join(run.stderr.split())
    assert re.fullmatch(_pattern(doc_text, MACHINE.get(key, [])), printed, flags=re.S), \
        f"{key[0]} shows:\n{' '.join(doc_text.split())}\nddlsim prints:\n{printed}"
