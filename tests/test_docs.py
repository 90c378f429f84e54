"""The scenario reference names every field a scenario file can hold, so a
new field cannot ship undocumented."""

from pathlib import Path

from pydantic import BaseModel

from ddlsim.simulation import scenario as S

DOC = (Path(__file__).resolve().parent.parent / "docs" / "scenario.md").read_text(encoding="utf-8")


def _fields(model: type[BaseModel]) -> set[str]:
    return {name for name in model.model_fields if name != "base_dir"}


def test_every_scenario_field_is_in_the_reference():
    sections = {
        "": S.Scenario, "model": S.ModelConfig, "network": S.NetworkConfig, "ring": S.RingStrategy,
        "ps": S.PSStrategy, "synthetic": S.SyntheticConfig, "packet": S.PacketConfig, "tenant": S.TenantConfig,
        "job": S.JobConfig,
    }
    missing = sorted(f"{where}.{name}" for where, model in sections.items() for name in _fields(model)
                     if f"{name} =" not in DOC and f"`{name}`" not in DOC and f"[{name}]" not in DOC
                     and f"model.{name}]" not in DOC)
    assert not missing, f"document these in docs/scenario.md: {missing}"


def test_no_merge_conflict_markers_in_docs_or_sources():
    root = Path(__file__).resolve().parents[1]
    files = [root / "README.md", *(root / "docs").rglob("*.md"), *(root / "python").rglob("*.py"), *(root / "tests").glob("*.py"),
             *(root / "crates").rglob("*.rs"), root / "Makefile", root / "pyproject.toml"]
    markers = ("<" * 7 + " ", "=" * 7 + "\n", ">" * 7 + " ")
    found = [f"{path.relative_to(root)}:{n}" for path in files for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(True), 1)
             if line.startswith(markers)]
    assert found == []
