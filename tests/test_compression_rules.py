"""autoembed.compression: the torch-free rules of robe, tt and hot_cold (issue 16).

Expected values are worked out by hand or by brute force in the test."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import pytest

from autoembed import compression as C
from autoembed.config import OPTIMIZERS, SERVING
from autoembed.errors import ConfigError


def test_imports_no_torch() -> None:
    code = "import sys, autoembed.compression; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("vocab", [1, 2, 7, 8, 9, 26, 27, 28, 1000, 1001, 999_999, 40_000_000])
def test_tt_rows_cover_the_vocab_with_little_padding(vocab: int) -> None:
    v1, v2, v3 = C.tt_rows(vocab)
    c = 1
    while c**3 < vocab:  # brute-force ceiling cube root
        c += 1
    assert (v1, v2) == (c, c)
    assert v1 * v2 * v3 >= vocab > v1 * v2 * (v3 - 1)  # v3 the least that covers


@pytest.mark.parametrize(
    ("dim", "expected"),
    [(1, (1, 1, 1)), (16, (2, 2, 4)), (64, (4, 4, 4)), (13, (1, 1, 13)), (12, (2, 2, 3)),
     (100, (4, 5, 5)), (30, (2, 3, 5))],
)
def test_tt_dims_hand_worked(dim: int, expected: tuple[int, int, int]) -> None:
    assert C.tt_dims(dim) == expected


@pytest.mark.parametrize("dim", range(1, 130))
def test_tt_dims_is_the_most_balanced_exact_factorisation(dim: int) -> None:
    got = C.tt_dims(dim)
    assert math.prod(got) == dim and list(got) == sorted(got)
    triples = [
        (a, b, dim // (a * b))
        for a, b in itertools.product(range(1, dim + 1), repeat=2)
        if a <= b and dim % (a * b) == 0 and b <= dim // (a * b)
    ]
    best = min(triples, key=lambda t: (t[2], t[2] - t[0]))
    assert got == best


def test_tt_shapes_and_bytes_by_hand() -> None:
    # V = 1000 -> (10, 10, 10); D = 16 -> (2, 2, 4); r = 8
    shapes = dict(C.tt_shapes(1000, 16, 8))
    assert shapes == {"core0": (10, 16), "core1": (10, 128), "core2": (10, 32)}
    assert C.param_bytes(C.tt_shapes(1000, 16, 8), 4) == (160 + 1280 + 320) * 4


def test_tt_init_std_gives_plain_row_variance() -> None:
    s = C.tt_init_std(64, 4)
    assert 4**2 * s**6 == pytest.approx(1 / 64)


def test_robe_blocks_and_shape() -> None:
    assert C.robe_blocks(16, 4) == 4 and C.robe_blocks(16, 5) == 4 and C.robe_blocks(16, 32) == 1
    assert C.robe_shapes(1000) == (("weight", (1000,)),)
    assert C.param_bytes(C.robe_shapes(1000), 2) == 2000


def test_hot_cold_counts_by_hand() -> None:
    assert C.hot_count(1000, 0.01) == 10
    assert C.hot_count(1000, 0.0101) == 11  # ceil
    assert C.hot_count(3, 1e-9) == 1  # at least one
    assert C.hot_count(1000, 1.0) == 1000
    assert C.cold_rows(1000, 0.01, 100) == 100
    assert C.cold_rows(1000, 0.95, 100) == 50  # only 50 cold ids left
    assert C.cold_rows(1000, 1.0, 100) == 0
    assert C.hot_cold_shapes(1000, 8, 0.01, 100) == (("weight", (110, 8)),)
    # the hot set: 8 B per hot id; 1% of 40M ids = 3.2 MB, not a 320 MB remap
    assert C.hot_cold_state_bytes(40_000_000, 0.01) == 3_200_000


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: C.check_robe(100, 101), "'robe_block' = 101"),
        (lambda: C.check_robe(0, 1), "'robe_size' = 0"),
        (lambda: C.check_robe(10, 0), "'robe_block' = 0"),
        (lambda: C.check_tt(0), "'tt_rank' = 0"),
        (lambda: C.check_hot_cold(0.0, 10), "'hot_share' = 0.0"),
        (lambda: C.check_hot_cold(1.5, 10), "'hot_share' = 1.5"),
        (lambda: C.check_hot_cold(float("nan"), 10), "'hot_share' = nan"),
        (lambda: C.check_hot_cold(0.5, 0), "'hash_buckets' = 0"),
        (lambda: C.check_method("tt", "rowwise_adagrad", "none"), "table_optimizer"),
        (lambda: C.check_method("robe", "sparse_adam", "none"), "table_optimizer"),
        (lambda: C.check_method("robe", "adam", "int8"), "'serving' = 'int8'"),
        (lambda: C.check_method("tt", "adam", "int4"), "'serving' = 'int4'"),
    ],
)
def test_bad_values_one_line_naming_value(call: object, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        call()  # type: ignore[operator]
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_method_rules_name_known_optimizers_and_formats() -> None:
    C.check_robe(100, 100)
    C.check_tt(1)
    C.check_hot_cold(1.0, 1)
    for rules in C.METHOD_RULES.values():
        assert set(rules.optimizers) <= set(OPTIMIZERS)
        assert set(rules.serving) <= set(SERVING)
    C.check_method("hot_cold", "rowwise_adagrad", "int4")
    assert C.METHOD_RULES["tt"].dense_gradients and C.METHOD_RULES["robe"].dense_gradients
    assert not C.METHOD_RULES["hot_cold"].dense_gradients


@pytest.mark.parametrize(
    ("keys", "needle"),
    [
        ("compression: robe\nrobe_size: 100\nrobe_block: 101", "'robe_block' = 101"),
        ("compression: tt\ntt_rank: 0", "tt_rank"),
        ("compression: hot_cold\nhot_share: 0\nhash_buckets: 10", "hot_share"),
        ("compression: hot_cold\nhot_share: 1.5\nhash_buckets: 10", "hot_share"),
        ("compression: tt\nserving: int8", "'serving' = 'int8'"),
        ("compression: robe\ntable_optimizer: rowwise_adagrad", "'table_optimizer'"),
        ("tables:\n  - {name: a, vocab_size: 100, compression: tt, tt_rank: 0}", "tt_rank"),
        ("tables:\n  - {name: a, vocab_size: 100, compression: robe, "
         "table_optimizer: sparse_adam}", "'table_optimizer'"),
        # robe_shared: one array needs robe tables, one size and one optimizer
        ("compression: hash\nhash_buckets: 10\nrobe_shared: true", "'robe_shared' = True"),
        ("robe_shared: true\ntables:\n  - {name: a, vocab_size: 100, compression: robe, "
         "robe_size: 50}\n  - {name: b, vocab_size: 100, compression: robe}",
         "'tables[0].robe_size' = 50"),
        ("robe_shared: true\ncompression: robe\ntables:\n  - {name: a, vocab_size: 100}\n"
         "  - {name: b, vocab_size: 100, table_optimizer: adagrad}",
         "'tables[1].table_optimizer' = 'adagrad'"),
        ("robe_shared: true\ncompression: robe\nrobe_size: 4\nrobe_block: 5", "'robe_block' = 5"),
    ],
)
def test_bad_config_files_one_line_exit_2(
    keys: str, needle: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    from autoembed.cli import main
    from autoembed.config import load_config

    p = Path(str(tmp_path)) / "c.yaml"
    body = keys if "tables" in keys else (
        "tables:\n  - {name: a, vocab_size: 100}\n" + keys)
    p.write_text("task: ctr\ndim: 8\n" + body + "\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert main(["estimate", "--config", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err
