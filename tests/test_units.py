import pytest

from ddlsim.units import parse_bandwidth, parse_duration_ns, parse_size_bytes


@pytest.mark.parametrize(
    "text, bps",
    [("10Gbps", 10e9), ("100 Gbit/s", 100e9), ("1.25GB/s", 10e9), ("25Mbps", 25e6), ("1e9", 1e9), (40e9, 40e9)],
)
def test_bandwidth_is_decimal_bits_per_second(text, bps):
    assert parse_bandwidth(text) == bps


@pytest.mark.parametrize("text, ns", [("10us", 10_000), ("0.01ms", 10_000), ("5ns", 5), ("1s", 10**9), ("1.5", 1_500_000_000)])
def test_durations_are_integer_nanoseconds(text, ns):
    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize("text, n", [("100MB", 100_000_000), ("1MiB", 2**20), ("6.28MB", 6_280_000), (4096, 4096)])
def test_sizes_are_decimal_unless_binary_suffix(text, n):
    assert parse_size_bytes(text) == n


@pytest.mark.parametrize(
    "parse, bad, hint",
    [
        (parse_bandwidth, "fast", "e.g."),
        (parse_bandwidth, "10 furlongs/s", "use Gbps"),
        (parse_size_bytes, "10 parsecs", "use B, KB"),
        (parse_duration_ns, "3 fortnights", "unknown duration unit"),
    ],
)
def test_unreadable_quantities_say_what_to_write(parse, bad, hint):
    with pytest.raises(ValueError, match=hint):
        parse(bad)
