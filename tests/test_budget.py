from __future__ import annotations

import re

import pytest

from autoembed.budget import Budget, MemoryBudget, format_bytes, parse_size
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
    with pytest.raises(BudgetError, match="give an absolute budget like 8GB"):
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


# ===================================================================== Budget.of, the one parser

ONE_FORMAT = (r"^(budget|--host-budget) '[^']*' [^;]+; "
              r"(use e\.g\. 8GB|give --device-memory|give an absolute budget)")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(8_000_000_000, 8_000_000_000), ("8GB", 8_000_000_000), ("7.5G", 7_500_000_000),
     ("8GiB", 8 * 2**30), (8e9, 8_000_000_000), (" 80% ", 8_000_000_000), (1, 1)],
)
def test_of_takes_bytes_strings_and_shares(value: object, expected: int) -> None:
    b = Budget.of(value, device_memory=10_000_000_000)  # type: ignore[arg-type]
    assert b.bytes == expected
    assert Budget.of(b) is b  # a Budget passes as it is
    assert b.text == (str(value).strip() if not isinstance(value, int) else str(value))


@pytest.mark.parametrize(
    "value",
    ["8XB", "", "GB", "-1GB", "0GB", "1e400GB", "0.5", "120%", "0%", "x%", "1e-12%",
     0, -5, True, None, [8]],
)
def test_every_bad_budget_has_one_message_format(value: object) -> None:
    with pytest.raises(BudgetError) as e:
        Budget.of(value, device_memory=10**9)  # type: ignore[arg-type]
    assert re.match(ONE_FORMAT, str(e.value)), str(e.value)
    assert "\n" not in str(e.value)


def test_a_share_without_a_gpu_names_the_fix_in_the_same_format() -> None:
    with pytest.raises(BudgetError) as e:
        Budget.of("80%", memory_option="--device-memory")  # no GPU on the CPU test machine
    assert re.match(ONE_FORMAT, str(e.value)) and "--device-memory" in str(e.value)
    with pytest.raises(BudgetError) as e:
        Budget.of("80%")  # a caller without such an option: no option named
    assert re.match(ONE_FORMAT, str(e.value)) and "--" not in str(e.value)


def test_a_host_budget_is_a_size_not_a_share_of_the_gpu() -> None:
    assert Budget.for_host("64GB").bytes == 64 * 10**9
    with pytest.raises(BudgetError, match=r"^--host-budget '80%' is not a size"):
        Budget.for_host("80%")
    pair = MemoryBudget.of("50%", 2**30, device_memory=8 * 10**9)
    assert (pair.device.bytes, pair.host and pair.host.bytes) == (4 * 10**9, 2**30)
    assert MemoryBudget.of(100).host is None


def test_a_size_refused_is_not_told_to_be_a_share() -> None:
    """--reserve, --host-budget and --device-memory take sizes only: their fix offered 80%,
    which they then refused too."""
    for refuse in (lambda: parse_size("10%", "--reserve"), lambda: Budget.for_host("8XB"),
                   lambda: Budget.for_host(0)):
        with pytest.raises(BudgetError) as e:
            refuse()
        assert "%" not in str(e.value).split("; ", 1)[1] and "8GB" in str(e.value)
    with pytest.raises(BudgetError, match=r"0\.5TB or 80%$"):
        Budget.of("8XB")  # a budget may be a share


@pytest.mark.parametrize(("need", "fits"), [(999, True), (1000, True), (1001, False)])
def test_admits_is_the_one_does_it_fit(need: int, fits: bool) -> None:
    """Equal fits, one byte over does not: the budget, an estimate judged against it and
    the search's budget rule all say so (they all ask `Budget.admits`)."""
    from autoembed.memory.types import MemoryEstimate
    from autoembed.pipeline.feasibility import budget_rule

    b = Budget.of(1000)
    assert b.admits(need) is fits
    assert b.overshoot(need) == pytest.approx((need - 1000) / 1000)
    z = 0
    est = MemoryEstimate("analytic", z, z, z, z, z, z, z, z, need, z, (), host_bytes=need)
    assert est.with_budget(b).fits is fits and est.with_budget("1000").fits is fits
    assert budget_rule(b)(est).fits is fits


def test_estimate_takes_what_budget_of_takes() -> None:
    import autoembed
    from autoembed.config import EmbeddingConfig, TableConfig

    cfg = EmbeddingConfig(tables=(TableConfig("a", 1000),), dim=8, batch_size=4,
                          dense_layers=(4,))
    total = autoembed.estimate(cfg).device_total
    for budget in (total, str(total), f"{total}B", Budget.of(total)):
        assert autoembed.estimate(cfg, budget=budget).fits is True
    assert autoembed.estimate(cfg, budget=total - 1).fits is False
    assert autoembed.estimate(cfg, budget="8GB").budget == 8 * 10**9
    assert autoembed.estimate(cfg, host_budget="1GB").host_budget == 10**9
    with pytest.raises(BudgetError, match="^budget '8XB' is not a size"):
        autoembed.estimate(cfg, budget="8XB")
