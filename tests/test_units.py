import math

import pytest

from ddlsim import ScenarioError
from ddlsim.simulation.scenario import scenario_from_dict
from ddlsim.units import parse_bandwidth, parse_duration_ns, parse_size_bytes


@pytest.mark.parametrize(
    "text, bps",
    [
        ("10Gbps", 10e9), ("10Gbit/s", 10e9), ("10Gb/s", 10e9), ("100 Gbit/s", 100e9), ("25Mbps", 25e6),
        ("10gbps", 10e9), ("1Tbps", 1e12), ("1kbps", 1e3),
        # uppercase B is bytes: 8 bits each
        ("10GBps", 80e9), ("10GB/s", 80e9), ("1.25GB/s", 10e9), ("20GB/s", 160e9), ("1MB/s", 8e6),
        ("1GiB/s", 8 * 2**30), ("1Gibps", 2**30), ("1e3Gbps", 1e12), (" 10 Gbps ", 10e9),
    ],
)
def test_bandwidth_bits_vs_bytes_by_case(text, bps):
    assert parse_bandwidth(text) == bps


@pytest.mark.parametrize(
    "text, ns",
    [
        ("10us", 10_000), ("0.01ms", 10_000), ("5ns", 5), ("1s", 10**9), ("1.5s", 1_500_000_000),
        ("0.1us", 100), ("0.3us", 300), ("0.7ms", 700_000), ("5µs", 5_000), ("5μs", 5_000),
        # exact decimal, nearest ns, halves away from zero
        ("1.0000000001s", 1_000_000_000), ("1.0000000006s", 1_000_000_001), ("2.5ns", 3), ("0.4ns", 0),
        ("1e6s", 10**15), ("0s", 0),
    ],
)
def test_durations_are_exact_integer_nanoseconds(text, ns):
    got = parse_duration_ns(text)
    assert got == ns and isinstance(got, int)


def test_float_multiplication_would_be_wrong_but_parsing_is_exact():
    # 1.0000000015 s is exactly 1_000_000_001.5 ns -> 1_000_000_002 (half away from zero);
    # the float product lands just below the half and would round down
    assert math.floor(1.0000000015 * 1e9 + 0.5) == 1_000_000_001
    assert parse_duration_ns("1.0000000015s") == 1_000_000_002


@pytest.mark.parametrize(
    "text, n",
    [
        ("100MB", 100_000_000), ("1MiB", 2**20), ("6.28MB", 6_280_000), (4096, 4096), ("4096", 4096),
        ("0.5KiB", 512), ("1kB", 1000), ("1KB", 1000), ("1GiB", 2**30), ("2TB", 2 * 10**12), ("10 B", 10), (1e8, 10**8),
    ],
)
def test_sizes_are_decimal_unless_binary_suffix_and_bare_is_bytes(text, n):
    got = parse_size_bytes(text)
    assert got == n and isinstance(got, int)


@pytest.mark.parametrize(
    "parse, bad, hint",
    [
        (parse_bandwidth, "fast", "write e.g."),
        (parse_bandwidth, "10 furlongs/s", "use Gbps"),
        (parse_bandwidth, "10", 'add a unit: "10Gbps" (bits/s) or "10GB/s" (bytes/s)'),
        (parse_bandwidth, 10, 'add a unit: "10Gbps"'),
        (parse_bandwidth, 40e9, "add a unit"),
        (parse_bandwidth, "0Gbps", "must be positive"),
        (parse_bandwidth, "-10Gbps", "must be positive"),
        (parse_bandwidth, "inf", "finite"),
        (parse_bandwidth, math.nan, "finite"),
        (parse_bandwidth, "2e15bps", "absurdly large"),
        (parse_bandwidth, "1bps", "below 1 kbit/s"),
        (parse_size_bytes, "10 parsecs", "use B, KB"),
        (parse_size_bytes, "10Mb", "lowercase 'b' means bits"),
        (parse_size_bytes, "2PB", "unknown size unit"),
        (parse_size_bytes, "2e15", "absurdly large"),
        (parse_size_bytes, "-1MB", "must not be negative"),
        (parse_duration_ns, "3 fortnights", "unknown duration unit"),
        (parse_duration_ns, "1.5", 'add a unit: "1.5s"'),
        (parse_duration_ns, 10, "add a unit"),
        (parse_duration_ns, "-1us", "must not be negative"),
        (parse_duration_ns, "NaN", "finite"),
        (parse_duration_ns, "2e6s", "absurdly long"),
        (parse_duration_ns, "1e10s", "overflows 64-bit nanoseconds"),
        (parse_duration_ns, "1e999999999s", "absurdly large"),
        (parse_duration_ns, True, "cannot read"),
    ],
)
def test_bad_quantities_say_what_to_write(parse, bad, hint):
    with pytest.raises(ValueError) as exc:
        parse(bad)
    assert hint in str(exc.value)


@pytest.mark.parametrize(
    "data, field, fix",
    [
        ({"network": {"bandwidth": 10}}, "network.bandwidth", "add a unit"),
        ({"network": {"bandwidth": "10"}}, "network.bandwidth", '"10GB/s" (bytes/s)'),
        ({"network": {"bandwidth": "inf"}}, "network.bandwidth", "finite"),
        ({"network": {"bandwidth": "0Gbps"}}, "network.bandwidth", "must be positive"),
        ({"network": {"bandwidth": "5Pbps"}}, "network.bandwidth", "unknown bandwidth unit"),
        ({"network": {"bandwidth": "2000000Gbps"}}, "network.bandwidth", "absurdly large"),
        ({"network": {"latency": "10"}}, "network.latency", "add a unit"),
        ({"network": {"latency": "-1us"}}, "network.latency", "must not be negative"),
        ({"network": {"latency": "1e10s"}}, "network.latency", "overflows 64-bit"),
        ({"network": {"latency": "nan"}}, "network.latency", "finite"),
        ({"network": {"intra_host_bandwidth": "0GB/s"}}, "network.intra_host_bandwidth", "must be positive"),
        ({"network": {"intra_host_latency": 1}}, "network.intra_host_latency", "add a unit"),
        ({"network": {"topology": "leaf-spine", "oversubscription": math.inf}}, "network.oversubscription", "finite"),
        ({"strategy": {"kind": "ps", "update_bandwidth": 20}}, "strategy.update_bandwidth", "add a unit"),
        ({"model": {"name": "synthetic", "synthetic": {"model_size": "2e15"}}}, "model.synthetic.model_size", "absurdly large"),
        ({"model": {"name": "synthetic", "synthetic": {"model_size": "0MB"}}}, "model.synthetic.model_size", "must be positive"),
        ({"model": {"name": "synthetic", "synthetic": {"compute": "2e6s"}}}, "model.synthetic.compute", "absurdly long"),
        ({"model": {"name": "synthetic", "synthetic": {"compute": 0.9}}}, "model.synthetic.compute", "add a unit"),
    ],
)
def test_every_unit_error_names_the_field_once(data, field, fix):
    with pytest.raises(ScenarioError) as exc:
        scenario_from_dict(data)
    msg = str(exc.value)
    assert f"'{field}'" in msg and fix in msg
    # one message per fault: the input is shown once, not "(got x) (got x)"
    assert msg.count("(got") <= 1 and msg.count("got ") <= 1
    assert len(msg.strip().splitlines()) == 2  # header + one fault line


def test_quantities_are_stored_as_written_and_read_through_properties():
    s = scenario_from_dict({"network": {"bandwidth": "10GB/s", "latency": "0.1us"},
                            "strategy": {"kind": "ps", "update_bandwidth": "1Gbps"}})
    assert s.network.bandwidth == "10GB/s"
    assert s.network.bandwidth_bps == 80e9
    assert s.network.latency_ns == 100
    assert s.strategy.update_bandwidth_bps == 1e9
    assert s.network.intra_host_bandwidth_bps == 300e9 * 8 and s.network.intra_host_latency_ns == 1000



def test_format_binary_size_uses_the_largest_unit_that_divides_exactly():
    from ddlsim.units import format_binary_size

    sizes = (1 << 20, 16 << 20, 3 << 30, 2048, 1536, 1500, 0)
    assert [format_binary_size(n) for n in sizes] == ["1 MiB", "16 MiB", "3 GiB", "2 KiB", "1536 B", "1500 B", "0 B"]


@pytest.mark.parametrize("text, bytes_", [("0.5", 0.5), ("0.4", 0.4), ("2.5B", 2.5), ("0.1KiB", 102.4), ("1.0000005MB", 1000000.5)])
def test_a_size_that_is_not_a_whole_number_of_bytes_is_refused(text, bytes_):
    # before: rounded without a word (--chunk-bytes 0.5 ran with 1-byte chunks, 0.4 with 0: no chunking)
    with pytest.raises(ValueError, match=f"is {bytes_:.12g} bytes, not a whole number of bytes"):
        parse_size_bytes(text)


@pytest.mark.parametrize("seed", range(20))
def test_fractional_sizes_in_larger_units_that_are_whole_bytes_are_exact(seed):
    import random

    rng = random.Random(seed)
    for unit, scale in (("KiB", 1024), ("MiB", 1024**2), ("GiB", 1024**3)):
        quarters = rng.randint(1, 10**6)  # n/4 of a binary unit is a whole number of bytes
        assert parse_size_bytes(f"{quarters / 4}{unit}") == quarters * scale // 4
    for unit, scale in (("KB", 10**3), ("MB", 10**6), ("GB", 10**9)):
        thousandths = rng.randint(1, 10**6)
        assert parse_size_bytes(f"{thousandths / 1000}{unit}") == thousandths * scale // 1000
