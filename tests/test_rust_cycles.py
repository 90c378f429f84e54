"""The core crate's files depend on each other one way (tools/rust_cycles.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "rust_cycles.py"


def run_tool(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), str(src)], capture_output=True, text=True, timeout=120)


def write_crate(root: Path, files: dict[str, str]) -> Path:
    src = root / "src"
    for name, text in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return src


def test_the_core_crate_has_no_file_cycle():
    result = run_tool(ROOT / "crates" / "ddlsim-core" / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no dependency cycle" in result.stdout


def test_an_inline_path_inside_a_type_makes_a_cycle(tmp_path):
    # graph.rs names the collective only inside a field's type, as the core's graph.rs once did.
    src = write_crate(tmp_path, {
        "lib.rs": "pub mod collective;\npub mod graph;\n",
        "graph.rs": "pub struct Graph {\n    pub cost: Option<crate::collective::closed::Cost>,\n}\n",
        "collective/mod.rs": "pub mod closed;\n",
        "collective/closed.rs": "use crate::graph::Graph;\npub struct Cost;\npub fn f(_: &Graph) {}\n",
    })
    result = run_tool(src)
    assert result.returncode == 1, result.stdout
    assert "collective/closed.rs -> graph.rs -> collective/closed.rs" in result.stdout
    assert "graph.rs:2: crate::collective::closed::Cost" in result.stdout


@pytest.mark.parametrize("use_line", [
    "use crate::{log, b::{x, Y as Z}};",
    "use crate::{\n    b::{self, x},\n};",
    "fn g() { let _ = super::b::x(); }",
    "#[derive(Debug)] struct S(super::b::Y);",
])
def test_use_groups_and_inline_paths_are_read(tmp_path, use_line):
    src = write_crate(tmp_path, {
        "lib.rs": "pub mod a;\npub mod b;\npub mod log;\n",
        "a.rs": use_line + "\n",
        "b.rs": "pub struct Y;\npub fn x() { crate::a::nothing(); }\n",
        "log.rs": "",
    })
    result = run_tool(src)
    assert result.returncode == 1, result.stdout
    assert "a.rs -> b.rs -> a.rs" in result.stdout


def test_comments_strings_and_one_way_paths_make_no_cycle(tmp_path):
    src = write_crate(tmp_path, {
        "lib.rs": "pub mod a;\npub mod b;\n",
        "a.rs": "use crate::b::Y;\n",
        # The path back to a appears only in a comment, a doc comment, a string and a raw string.
        "b.rs": ('pub struct Y;\n// crate::a::x\n/// see [`crate::a`]\n/* crate::a::x /* nested */ */\n'
                 'const S: &str = "crate::a::x";\nconst R: &str = r#"super::a::x"#;\nconst C: char = \'"\';\n'
                 "fn f<'a>(_: &'a str) {}\n"),
    })
    result = run_tool(src)
    assert result.returncode == 0, result.stdout


def test_super_inside_an_inline_module_names_its_own_file(tmp_path):
    # `super::` in b.rs's `mod tests` is b itself, not the crate root; no edge to lib.rs or a.rs.
    src = write_crate(tmp_path, {
        "lib.rs": "pub mod a;\npub mod b;\n",
        "a.rs": "use crate::b::Y;\n",
        "b.rs": "pub struct Y;\n#[cfg(test)]\nmod tests {\n    use super::Y;\n    use super::super::b::Y as Z;\n}\n",
    })
    assert run_tool(src).returncode == 0
    # ... while a real `super::super::a` from inside it is a path to a.rs.
    (src / "b.rs").write_text("pub struct Y;\nmod tests {\n    use super::super::a::X;\n}\n")
    result = run_tool(src)
    assert result.returncode == 1 and "a.rs -> b.rs -> a.rs" in result.stdout


def test_a_directory_without_rust_files_is_refused(tmp_path):
    result = run_tool(tmp_path)
    assert result.returncode == 2
    assert "holds no .rs file" in result.stderr
