from __future__ import annotations

import pytest

from autoembed.budget import Budget, format_bytes, parse_size
from autoembed.errors import BudgetError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8GB", 8_000_000_000),
        ("8GiB", 8 * 1024**3),
        ("7.5G", 7_500_000_000),
        ("7500MB", 7_500_000_000),
        ("0.5TB", 500_000_000_000),
        ("512MiB", 512 * 1024**2),
        ("1024", 1024),
        ("8 gb", 8_000_000_000),
    ],
)
def test_sizes_decimal_and_binary(text: str, expected: int) -> None:
    assert parse_size(text) == expected
    assert Budget.parse(text).bytes == expected


def test_percent_of_given_device() -> None:
    assert Budget.parse("80%", device_memory=10_000_000_000).bytes == 8_000_000_000


def test_percent_without_gpu_names_the_fix() -> None:
    with pytest.raises(BudgetError, match="--device-memory"):
        Budget.parse("80%")


@pytest.mark.parametrize("text", ["8XB", "", "GB", "-1GB", "0GB", "eight", "120%", "0%", "8 G B"])
def test_bad_budgets(text: str) -> None:
    with pytest.raises(BudgetError) as e:
        Budget.parse(text, device_memory=10**10)
    assert "budget" in str(e.value)


def test_format_shows_both_units() -> None:
    assert format_bytes(8_000_000_000) == "8.00 GB (7.45 GiB)"
    assert format_bytes(512) == "512 B"
