import pytest

from memcost.units import format_bytes, parse_size, parse_size_list, short_size


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), ("64K", 65536), ("8M", 8 << 20), ("8MiB", 8 << 20), ("1G", 1 << 30),
    ("1.5g", 3 << 29), ("264752", 264752), (" 2 MB ", 2 << 20),
])
def test_parse_size_accepts_numbers_with_binary_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["0", "0M", "abc", "-5", "8X", "", "M", "1e9"])
def test_parse_size_refuses_what_is_not_a_positive_size(text):
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_parse_size_list():
    assert parse_size_list("8M,32M,1G") == [8 << 20, 32 << 20, 1 << 30]
    with pytest.raises(ValueError):
        parse_size_list(",")


def test_format_and_short_size():
    assert format_bytes(8 << 20) == "8 MiB"
    assert format_bytes(3 << 29) == "1.5 GiB"
    assert format_bytes(512) == "512 B"
    assert short_size(8 << 20) == "8M"
    assert short_size(264752) == "264752"
