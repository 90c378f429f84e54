"""A sweep's grid: a base scenario and axes (dotted scenario keys, each with a
list of values), expanded to their cartesian product.

Axes come from the scenario file's ``[sweep]`` table and from ``--set
KEY=V1,V2`` on the command line (docs/sweep.md)::

    [sweep]
    workers = [2, 4, 8]
    network.bandwidth = ["10Gbps", "25Gbps"]     # a TOML dotted key
    "network.packet.transport" = ["newreno", "dctcp"]

A key is a path into the scenario (``network.packet.transport``), or one of the
flat names ``ddlsim simulate`` takes as flags (``bandwidth`` for
``network.bandwidth``, ``transport`` for ``network.packet.transport``).
The last axis varies fastest; an axis set on the command line replaces the
file's axis of the same key.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from ..errors import ScenarioError
from ..simulation.scenario import (
    FLAT_KEYS, PACKET_KEYS, SHARED_STRATEGY_FIELDS, Scenario, one_line, read_scenario_toml, scenario_from_dict,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass
class Axis:
    key: str  # as the user wrote it: the column name in the results
    values: list[Any]
    origin: str  # where it was given, for errors: "--set" or "FILE [sweep]"

    @property
    def path(self) -> tuple[str, ...]:
        return scenario_path(self.key)

    @property
    def kind(self) -> str:
        """The type of its results column: bool, int, float or str where every
        value has it (ints and floats make float), else json (each value's JSON)."""
        values = self.values
        if all(isinstance(v, bool) for v in values):
            return "bool"
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return "int"
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return "float"
        if all(isinstance(v, str) for v in values):
            return "str"
        return "json"

    def column(self, value: Any) -> Any:
        """`value` as it goes into the results column."""
        kind = self.kind
        if kind == "float":
            return float(value)
        if kind == "json":
            return json.dumps(value, sort_keys=True, default=str)
        return value

    def arrow_type(self):
        import pyarrow as pa

        return {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64()}.get(self.kind, pa.string())


@dataclass
class GridPoint:
    values: dict[str, Any]  # axis key -> value
    scenario: Scenario
    key: str = ""  # the results key (ddlsim.sweep.store.scenario_key), filled by Grid.keyed()

    @property
    def label(self) -> str:
        return " ".join(f"{k}={_show(v)}" for k, v in self.values.items()) or "base scenario"


@dataclass
class Grid:
    base: Scenario
    axes: list[Axis]
    points: list[GridPoint]
    source: Optional[str] = None  # the scenario file
    notes: list[str] = field(default_factory=list)

    def keyed(self) -> "Grid":
        """Fills each point's results key; points that are the same scenario
        (e.g. "10Gbps" and "10 Gbit/s") are run once: the first is kept."""
        from .store import scenario_key

        seen: dict[str, GridPoint] = {}
        kept = []
        for point in self.points:
            point.key = scenario_key(point.scenario)
            if point.key in seen:
                self.notes.append(f"{point.label} is the same scenario as {seen[point.key].label}: run once")
                continue
            seen[point.key] = point
            kept.append(point)
        self.points = kept
        return self

    def manifest(self) -> dict[str, Any]:
        """What `ddlsim sweep --status DIR` rebuilds the grid from (sweep.json)."""
        return {
            "format": 1,
            "scenario_file": self.source,
            "base_dir": self.base.base_dir,
            "base": self.base.model_dump(mode="json", exclude={"base_dir"}, exclude_unset=True),
            "axes": [{"key": a.key, "values": a.values} for a in self.axes],
            "runs": [{"key": p.key, "values": p.values} for p in self.points],
        }


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def scenario_path(key: str) -> tuple[str, ...]:
    """The path into the scenario of an axis key (a flat name is mapped as the CLI flags do)."""
    if "." not in key:
        if key in FLAT_KEYS:
            return FLAT_KEYS[key]
        if key in PACKET_KEYS:
            return ("network", "packet", PACKET_KEYS[key])
    return tuple(key.split("."))


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in patch.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def apply_settings(scenario: Scenario, settings: dict[str, Any], origin: str = "sweep") -> Scenario:
    """`scenario` with the values of `settings` (axis key -> value) set at their
    dotted paths (nested tables merged, not replaced). A strategy kind that
    changes starts a fresh [strategy] table (only the fields every kind has
    carry over), and a fidelity other than packet drops [network.packet]
    unless packet options are set too, as `with_overrides` does. An invalid
    result is a one-line ScenarioError starting with `origin`."""
    patch: dict[str, Any] = {}
    for key, value in settings.items():
        path = scenario_path(key)
        node = patch
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ScenarioError(f"{origin}: {key} sets a value inside {part}, which another axis sets as a whole")
        node[path[-1]] = value
    data = scenario.model_dump(exclude={"base_dir"}, exclude_unset=True)
    strategy = patch.get("strategy")
    if isinstance(strategy, dict) and "kind" in strategy:
        current = data.get("strategy", {"kind": scenario.strategy.kind})
        if str(strategy["kind"]).strip().lower() != scenario.strategy.kind:
            data["strategy"] = {k: v for k, v in current.items() if k in SHARED_STRATEGY_FIELDS}
    network = patch.get("network")
    if isinstance(network, dict) and isinstance(network.get("fidelity"), str) and "packet" not in network \
            and network["fidelity"].strip().lower() != "packet" and isinstance(data.get("network"), dict):
        data["network"] = {k: v for k, v in data["network"].items() if k != "packet"}
    data.setdefault("strategy", {"kind": scenario.strategy.kind})
    try:
        result = scenario_from_dict(_merge(data, patch), origin=origin)
    except ScenarioError as exc:
        raise ScenarioError(one_line(str(exc))) from None
    result._migration_notes = scenario.migration_notes + result.migration_notes
    return result.model_copy(update={"base_dir": scenario.base_dir})


def parse_value(text: str) -> Any:
    """One value of `--set`: a TOML value (2, 2.5, true, "a,b", [1, 2]) where it
    reads as one, else the text itself (flow, 10Gbps)."""
    text = text.strip()
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        return text


def _split_values(text: str) -> list[str]:
    """Splits at commas outside double quotes and brackets."""
    parts, current, depth, quoted = [], [], 0, False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "[{":
            depth += 1
        elif not quoted and ch in "]}":
            depth -= 1
        if ch == "," and not quoted and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_set(option: str) -> Axis:
    """`KEY=V1,V2,...` (one --set) as an axis; a malformed one is a one-line ScenarioError."""
    key, sep, rest = option.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ScenarioError(f"--set {option!r}: expected KEY=V1,V2,... (e.g. --set workers=2,4 or "
                            f"--set network.bandwidth=10Gbps,25Gbps)")
    if not _KEY.match(key):
        raise ScenarioError(f"--set {option!r}: {key!r} is not a scenario key; write a dotted key such as network.bandwidth")
    texts = _split_values(rest)
    if not rest.strip() or any(not t.strip() for t in texts):
        raise ScenarioError(f"--set {option!r}: an empty value; give one or more values separated by commas, "
                            f"e.g. --set {key}=V1,V2")
    return Axis(key, [parse_value(t) for t in texts], "--set")


def _axes_of_table(table: dict[str, Any], origin: str, prefix: str = "") -> list[Axis]:
    axes = []
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):  # a TOML dotted key (network.bandwidth = [...]) or a sub-table
            if not value:
                raise ScenarioError(f"{origin}: {key} has no values; give a list, e.g. {key}.field = [V1, V2]")
            axes.extend(_axes_of_table(value, origin, prefix=f"{key}."))
        elif not isinstance(value, list):
            raise ScenarioError(f"{origin}: {key} = {_show(value)} is one value; an axis is a list, e.g. {key} = [{_show(value)}]")
        elif not value:
            raise ScenarioError(f"{origin}: {key} = [] is an empty axis; give at least one value")
        else:
            if not _KEY.match(key.removeprefix("sweep.")):
                raise ScenarioError(f"{origin}: {key!r} is not a scenario key; write a dotted key such as network.bandwidth")
            axes.append(Axis(key.removeprefix("sweep."), list(value), origin))
    return axes


def read_sweep_file(path: "str | Path") -> tuple[Scenario, list[Axis]]:
    """A scenario file with an optional [sweep] table: the base scenario and the file's axes."""
    path = Path(path)
    data = read_scenario_toml(path)
    table = data.pop("sweep", {})
    origin = str(path)
    if not isinstance(table, dict):
        raise ScenarioError(f"{path}: sweep must be a table ([sweep]) of axes, e.g. workers = [2, 4]")
    axes = _axes_of_table(table, origin, prefix="sweep.")
    try:
        base = scenario_from_dict(data, origin=str(path))
    except ScenarioError as exc:
        raise ScenarioError(one_line(str(exc))) from None
    copy = base.model_copy(update={"base_dir": str(path.resolve().parent)})
    copy._migration_notes = base.migration_notes
    return copy, axes


def expand(base: Scenario, axes: Sequence[Axis], source: Optional[str] = None) -> Grid:
    """The cartesian product of the axes over `base` (the last axis fastest);
    a --set axis replaces a file axis of the same scenario key. Every point is
    validated here, before anything runs: a point the scenario refuses is a
    one-line error naming the point (its axis values) and the field."""
    merged: dict[tuple[str, ...], Axis] = {}
    for axis in axes:
        merged[axis.path] = axis  # a later axis of the same key replaces it, in its place
    ordered = list(merged.values())
    paths = [a.path for a in ordered]
    for i, p in enumerate(paths):
        for q in paths[i + 1:]:
            if p[:len(q)] == q or q[:len(p)] == p:
                raise ScenarioError(f"sweep axes {'.'.join(p)} and {'.'.join(q)}: one is inside the other; keep one of them")
    points = []
    for combo in itertools.product(*(a.values for a in ordered)):
        values = {a.key: v for a, v in zip(ordered, combo)}
        label = " ".join(f"{k}={_show(v)}" for k, v in values.items())
        scenario = apply_settings(base, values, origin=f"sweep point {label}") if values else base
        points.append(GridPoint(values, scenario))
    return Grid(base=base, axes=ordered, points=points, source=source)


def load_grid(scenario_file: "str | Path | None", sets: Sequence[str] = ()) -> Grid:
    """The grid of a scenario file (its [sweep] axes) and --set options."""
    if scenario_file is None:
        base, axes = Scenario(), []
    else:
        base, axes = read_sweep_file(scenario_file)
    axes = axes + [parse_set(s) for s in sets]
    return expand(base, axes, source=str(scenario_file) if scenario_file is not None else None).keyed()


def grid_from_manifest(manifest: dict[str, Any], origin: str) -> Grid:
    """The grid a sweep.json describes (keys recomputed for this engine build)."""
    def refuse(why: str) -> ScenarioError:
        return ScenarioError(f"{origin}: not a sweep manifest ({why}); was it written by ddlsim sweep?")

    try:
        base = scenario_from_dict(manifest["base"], origin=origin)
        axes_given = manifest["axes"]
    except (KeyError, TypeError) as exc:
        raise refuse(str(exc)) from None
    for field in ("base_dir", "scenario_file"):  # paths: a string, or absent
        if not isinstance(manifest.get(field), (str, type(None))):
            raise refuse(f"{field} = {manifest[field]!r:.60} is not a path")
    if not isinstance(axes_given, list):
        raise refuse(f"axes = {axes_given!r:.60} is not a list")
    for a in axes_given:  # found by tools/fuzz_readers.py: an axis key of 0 was a TypeError
        if not (isinstance(a, dict) and isinstance(a.get("key"), str) and isinstance(a.get("values"), list)):
            raise refuse(f"the axis {a!r:.60} is not a key and a list of values")
    base = base.model_copy(update={"base_dir": manifest.get("base_dir")})
    axes = [Axis(a["key"], list(a["values"]), origin) for a in axes_given]
    return expand(base, axes, source=manifest.get("scenario_file")).keyed()
