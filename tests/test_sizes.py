import pytest

from microbench.errors import UsageError
from microbench.units import format_size, parse_size, parse_sizes


@pytest.mark.parametrize("text,expected", [
    ("8", 8), ("4K", 4096), ("4k", 4096), ("4KB", 4096), ("4KiB", 4096), ("1M", 1 << 20), ("2G", 2 << 30),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


def test_ranges_double_and_lists_merge():
    assert parse_sizes("1:16") == [1, 2, 4, 8, 16]
    assert parse_sizes("3:24") == [3, 6, 12, 24]
    assert parse_sizes(":4") == [1, 2, 4]
    assert parse_sizes("8,1K:4K,8") == [8, 1024, 2048, 4096]
    assert parse_sizes("1:1M")[-1] == 1 << 20 and len(parse_sizes("1:1M")) == 21


@pytest.mark.parametrize("bad", ["", "x", "4X", "1.5K", "-8", "0", "16:8", "1:2:4", "4K:1K", "2T"])
def test_bad_sizes_are_usage_errors(bad):
    with pytest.raises(UsageError):
        parse_sizes(bad)


def test_min_greater_than_max_says_so():
    with pytest.raises(UsageError, match="MIN .* larger than MAX"):
        parse_sizes("1M:1K")


def test_format_size():
    assert [format_size(x) for x in (512, 4096, 1 << 20, 3 << 30, 1536)] == ["512", "4K", "1M", "3G", "1536"]
