"""Flow-size CDFs of background tenants: the built-in tables, the mean formula
against Monte-Carlo sampling by the engine's rule, the engine form of a CDF,
and a user's CSV with every kind of mistake refused in one line (exit 2)."""

import os
from pathlib import Path

import numpy as np
import forked_cli
import pytest

from ddlsim.errors import ScenarioError
from ddlsim.workload import flow_sizes as fs

ROOT = Path(__file__).resolve().parent.parent


def test_websearch_mean_is_about_1_7_MB_by_hand():
    # (cum_i - cum_{i-1}) x (b_{i-1} + b_i) / 2 over the DCTCP table's segments, added up on paper
    by_hand = (0.15 * 5_000 + 0.05 * 15_000 + 0.10 * 25_000 + 0.10 * 40_000 + 0.13 * 65_000 + 0.07 * 140_000
               + 0.10 * 600_000 + 0.10 * 1_500_000 + 0.10 * 3_500_000 + 0.07 * 7_500_000 + 0.03 * 20_000_000)
    assert by_hand == pytest.approx(1_711_250)
    assert fs.mean_bytes(fs.WEBSEARCH) == pytest.approx(by_hand, rel=1e-12)
    assert 1.65e6 < fs.mean_bytes(fs.WEBSEARCH) < 1.75e6  # the "about 1.7 MB" of the thesis and the DCTCP paper
    # the engine form (first point at 1 byte) differs by a fraction of a byte
    assert abs(fs.mean_bytes(fs.engine_points(fs.WEBSEARCH)) - 1_711_250) < 1


def test_datamining_table_shape():
    pts = fs.DATAMINING
    assert pts[0] == (0, 0.0) and pts[-1] == (1_000_000_000, 1.0)
    assert dict(pts)[10_000] == 0.8  # VL2: most flows are small...
    assert 12e6 < fs.mean_bytes(pts) < 13e6  # ...and most bytes are in flows of 100 MB to 1 GB


def test_the_first_points_size_has_probability_cum0():
    pts = [(100, 0.5), (200, 1.0)]  # half exactly 100 bytes, half uniform on [100, 200]
    s = fs.sample(pts, np.random.default_rng(3), 200_000)
    assert np.mean(s == 100) == pytest.approx(0.5, abs=0.01)
    assert fs.mean_bytes(pts) == 0.5 * 100 + 0.5 * 150
    upper = s[s > 100]
    assert upper.min() > 100 and upper.max() < 200 and np.mean(upper) == pytest.approx(150, abs=1)


def _random_cdf(rng):
    n = int(rng.integers(2, 12))
    sizes = np.cumsum(rng.integers(1, 10**6, size=n))
    cums = np.sort(rng.random(n))
    cums[rng.random(n) < 0.2] = cums[0]  # some flat segments (probability 0)
    cums = np.maximum.accumulate(np.clip(cums, 1e-3, 1))
    cums[-1] = 1.0
    return [(int(b), float(c)) for b, c in zip(sizes, cums)]


@pytest.mark.parametrize("name", ["websearch", "datamining", "random"])
def test_mean_formula_matches_monte_carlo(name):
    rng = np.random.default_rng(12345)
    tables = [fs.engine_points(fs.BUILTIN[name])] if name in fs.BUILTIN else [_random_cdf(rng) for _ in range(20)]
    for points in tables:
        s = fs.sample(points, rng, 1_000_000)
        bytes_ = [p[0] for p in points]
        assert s.min() >= bytes_[0] and s.max() <= bytes_[-1]
        stderr = s.std() / np.sqrt(len(s))
        assert abs(s.mean() - fs.mean_bytes(points)) < 5 * stderr + 1e-9, (points, s.mean(), fs.mean_bytes(points))


def test_engine_points_keep_the_published_cdf_on_whole_bytes():
    for name, pts in fs.BUILTIN.items():
        e = fs.engine_points(pts)
        (b1, c1), (b2, c2) = pts[1], e[1]
        assert all(0 < c <= 1 for _, c in e) and e[-1][1] == 1.0
        assert e[0][0] == 1 and e[0][1] == pytest.approx(pts[1][1] / pts[1][0])  # F(1) of the published CDF
        assert e[1:] == [list(p) for p in pts[1:]]
    assert fs.engine_points([(0, 0.0), (1, 0.4), (5, 1.0)]) == [[1, 0.4], [5, 1.0]]  # F(1) is the next point itself
    assert fs.engine_points([(10, 0.2), (20, 1.0)]) == [[10, 0.2], [20, 1.0]]  # no leading zero: unchanged


def test_builtin_names_and_aliases():
    assert fs.resolve("WebSearch").points == fs.WEBSEARCH
    assert fs.resolve("data-mining").points == fs.DATAMINING
    assert fs.resolve("vl2").name == "datamining"
    with pytest.raises(ValueError, match="did you mean 'websearch'"):
        fs.check_sizes_name("websearh")


def test_csv_reader_accepts_header_comments_and_a_leading_zero_row(tmp_path):
    p = tmp_path / "sizes.csv"
    p.write_text("bytes,cdf\n# from my cluster\n0,0\n\n1000, 0.5\n3e3,1\n", encoding="utf-8")
    assert fs.read_cdf_csv(p) == ((0, 0.0), (1000, 0.5), (3000, 1.0))
    p.write_text("1000,0.5\n3000,1.0000000001\n", encoding="utf-8")
    assert fs.read_cdf_csv(p) == ((1000, 0.5), (3000, 1.0))
    # relative to the scenario's directory
    assert fs.resolve("sizes.csv", str(tmp_path)).points == ((1000, 0.5), (3000, 1.0))


BAD = {
    "non_numeric": ("100,0.5\n200,abc\n", ":2: 'abc' is not a number"),
    "code_is_text": ("__import__('os').system('false'),0.5\n200,1\n", "is not a number"),
    "bytes_not_increasing": ("100,0.5\n100,1\n", ":2: size 100 is not larger than the previous row's 100"),
    "bytes_decreasing": ("bytes,cum\n200,0.5\n100,1\n", ":3: size 100 is not larger"),
    "cum_decreasing": ("100,0.6\n200,0.5\n300,1\n", ":2: cumulative fraction 0.5 is below the previous row's 0.6"),
    "cum_percent": ("10000,15\n30000000,100\n", ":1: cumulative fraction 15 is outside (0, 1] (percent? divide by 100)"),
    "cum_negative": ("100,-0.1\n200,1\n", ":1: cumulative fraction -0.1 is outside (0, 1]"),
    "cum_zero_later": ("100,0.5\n200,0\n300,1\n", ":2: cumulative fraction 0 is only allowed on the first row"),
    "last_not_one": ("100,0.5\n200,0.97\n", ":2: the last cumulative fraction is 0.97, but a CDF ends at 1"),
    "one_row": ("bytes,cum\n100,1\n", ":2: only one row; a flow-size CDF needs at least two rows"),
    "empty": ("", ": no data rows"),
    "header_only": ("bytes,cum\n", ": no data rows"),
    "three_columns": ("0 1 0\n100,2,0.5\n", ":1: 1 column"),
    "fractional_bytes": ("100.5,0.5\n200,1\n", ":1: size 100.5 is not a whole number of bytes"),
    "zero_bytes_with_mass": ("0,0.1\n200,1\n", ":1: size 0 with cumulative fraction 0.1"),
    "nan": ("100,nan\n200,1\n", ":1: 'nan' is not a number"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_csv_is_one_line_error(kind, tmp_path):
    text, expected = BAD[kind]
    p = tmp_path / f"{kind}.csv"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError) as info:
        fs.read_cdf_csv(p)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(p)) and expected in message, message


def test_not_utf8_and_directory_and_missing(tmp_path):
    p = tmp_path / "bin.csv"
    p.write_bytes(b"\xff\xfe100,0.5\n")
    with pytest.raises(ScenarioError, match="not UTF-8"):
        fs.read_cdf_csv(p)
    with pytest.raises(ScenarioError, match="is a directory, not a flow-size CDF file"):
        fs.read_cdf_csv(tmp_path)
    with pytest.raises(ScenarioError, match="not found"):
        fs.read_cdf_csv(tmp_path / "nope.csv")


def _cli(args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "COLUMNS": "200"}
    return forked_cli.run([*args], cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("kind", ["non_numeric", "bytes_not_increasing", "cum_decreasing", "cum_percent", "last_not_one",
                                  "one_row", "empty"])
def test_bad_csv_through_the_cli_exits_2_without_traceback(kind, tmp_path):
    text, expected = BAD[kind]
    (tmp_path / "sizes.csv").write_text(text, encoding="utf-8")
    run = _cli(["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", "--out", "out",
                "--background", "cdf=sizes.csv:load=0.2"], tmp_path)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and expected in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_file_digest_follows_the_csv_bytes(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("1000,0.5\n3000,1\n", encoding="utf-8")
    first = fs.file_digest("s.csv", str(tmp_path))
    p.write_text("1000,0.4\n3000,1\n", encoding="utf-8")
    assert fs.file_digest(str(p)) != first and len(first) == 64
    assert fs.file_digest("websearch") is None
    with pytest.raises(ScenarioError, match="cannot read"):
        fs.file_digest(str(tmp_path / "gone.csv"))
