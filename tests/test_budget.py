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


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("1e400GB", "too large"),  # float overflow: was an OverflowError (exit 1)
        ("1e309", "too large"),
        ("0.5", "less than one byte"),  # was Budget(bytes=0)
        ("1e-12GB", "less than one byte"),
    ],
)
def test_sizes_past_a_float_or_under_a_byte(text: str, rule: str) -> None:
    with pytest.raises(BudgetError, match=rule) as e:
        parse_size(text, "budget")
    assert text in str(e.value)


def test_tiny_percent_is_refused() -> None:
    with pytest.raises(BudgetError, match="less than one byte"):
        Budget.parse("1e-12%", device_memory=10**9)


def test_format_absurd_sizes_readably() -> None:
    # 2**63 - 1 rows x 300 x 4 B x 5 (params, grads, 2 Adam states, 1 temporary), by hand
    assert format_bytes(6 * 10**18) == "6.00 EB (5.20 EiB)"
    assert format_bytes(10**15) == "1.00 PB (0.89 PiB)"
    assert format_bytes(10**12) == "1.00 TB (0.91 TiB)"
