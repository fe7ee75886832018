"""Checks through `autoembed.rules`: a config key's value reads "config key 'KEY' = VALUE:
RULE", a public function's argument or a CLI option "NAME = VALUE: RULE"; each message here
is written out by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from autoembed.errors import ConfigError, DataError
from autoembed.rules import Each, Integer, Interval, Is, OneOf


@pytest.mark.parametrize(
    ("rule", "good", "bad", "text"),
    [
        (Integer(1), [1, 10**30], [0, -1, True, 1.0, "1", None], "must be an integer >= 1"),
        (Integer(1, 65535), [1, 65535], [0, 65536, False], "must be an integer in 1..65535"),
        (Interval(0.0, 1.0), [0, 0.5, 1], [-0.1, 1.01, float("nan"), True],
         "must be a number in [0.0, 1.0]"),
        (OneOf(("a", "b")), ["a", "b"], ["c", None, 1], "must be one of a, b"),
        (Interval(0.0), [0, 5e9], [-1, float("inf"), True], "must be a number >= 0.0"),
        (Is(str, "a name", filled=True), ["a"], ["", 1, None], "must be a name"),
        (Each(Integer(1), "two counts", 2), [[1, 2], (3, 4)], [[1], [0, 1], "ab", None],
         "must be two counts"),
    ],
)
def test_a_rule_words_itself_once(rule: Any, good: list[Any], bad: list[Any], text: str) -> None:
    for v in good:
        rule.check_argument("x", v)
        rule.check("x", v)
    for v in bad:
        with pytest.raises(ConfigError) as arg:
            rule.check_argument("--x", v)
        assert str(arg.value) == f"--x = {v!r}: {text}"
        with pytest.raises(ConfigError) as key:
            rule.check("x", v)
        assert str(key.value) == f"config key 'x' = {v!r}: {text}"
    with pytest.raises(DataError):
        rule.check_argument("x", bad[0], DataError)


def _cfg() -> Any:
    from autoembed.config import EmbeddingConfig, TableConfig

    return EmbeddingConfig(tables=(TableConfig("a", 100),), dim=8, dense_layers=(4,))


def _estimate(**kw: Any) -> Callable[[], Any]:
    import autoembed

    return lambda: autoembed.estimate(_cfg(), **kw)


def _quantize() -> Any:
    from autoembed.models import build_model, quantize

    return quantize(build_model(_cfg()), "int3")


def _length() -> Any:
    from autoembed.selection import training_length

    return training_length(1000, 0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (_estimate(method="psychic"), "method = 'psychic': must be one of analytic, traced"),
        (_estimate(sharding="diag"), "sharding = 'diag': must be one of table, row"),
        (_estimate(gpus=0), "gpus = 0: must be an integer >= 1"),
        (_estimate(gpus=True), "gpus = True: must be an integer >= 1"),
        (_estimate(reserve=-1), "reserve = -1: must be an integer >= 0"),
        (_quantize, "serving = 'int3': must be one of none, int8, int4"),
        (_length, "batch_size = 0: must be an integer >= 1"),
    ],
)
def test_public_functions_word_a_bad_argument_one_way(call: Callable[[], Any],
                                                      message: str) -> None:
    with pytest.raises(ConfigError) as e:
        call()
    assert str(e.value) == message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["estimate", "--vocab", "-5"], "--vocab = -5: must be an integer >= 1"),
        # each named by the flag typed, not its config key (batch_size) or keyword (method)
        (["estimate", "--method", "psychic"],
         "--method = 'psychic': must be one of analytic, traced"),
        (["estimate", "--gpus", "0"], "--gpus = 0: must be an integer >= 1"),
        (["estimate", "--batch", "-1"], "--batch = -1: must be an integer >= 1"),
        (["estimate", "--seq", "0"], "--seq = 0: must be an integer >= 1"),
        (["estimate", "--precision", "fp7"], "--precision = 'fp7': must be one of fp32, fp16, "
         "bf16, fp16_master, bf16_master, amp_fp16, amp_bf16"),
        (["estimate", "--optimizer", "adamax"], "--optimizer = 'adamax': must be one of sgd, "
         "momentum, adam, adamw, adagrad, rowwise_adagrad, sparse_adam"),
        (["estimate", "--vocab", "9", "--pooling-factor", "0"],  # was taken for 1
         "--pooling-factor = 0.0: must be a number in (0.0, 1000000000.0]"),
        (["estimate", "--serving", "int4", "--dim", "7"],
         "--dim = 7: int4 serving packs two values a byte: use an even dim"),
        # the keys the text names after the head too, as typed (before: robe_block, robe_size)
        (["estimate", "--compression", "robe", "--robe-size", "10", "--robe-block", "64"],
         "--robe-block = 64: a block longer than the array (10 values) reads values twice; "
         "use --robe-block <= --robe-size"),
        # no --config file: a key no flag set is named by its flag (before: config key),
        # and said missing when it has no value (before: "--hash-buckets = None")
        (["estimate", "--compression", "hash"],
         "--hash-buckets missing: compression 'hash' needs --hash-buckets >= 1"),
        (["estimate", "--compression", "hot_cold"],
         "--hash-buckets missing: compression 'hot_cold' hashes its cold ids into "
         "--hash-buckets rows: set --hash-buckets (a count, or a share of the rows)"),
        # a list typed as text, as typed (before: the tuple it was read as, (0,))
        (["estimate", "--dense-layers", "0"],
         "--dense-layers = 0: must be a list of layer widths (integers >= 1)"),
        (["estimate", "--dense-layers", "64,0"],
         "--dense-layers = 64,0: must be a list of layer widths (integers >= 1)"),
        (["ui", "--port", "70000"], "--port = 70000: must be an integer in 1..65535"),
    ],
)
def test_cli_options_word_a_bad_value_the_same_way(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from autoembed.cli import main

    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"autoembed: error: {message}"


def test_a_config_files_keys_stay_keys_beside_the_flags(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """robe_size from the file, robe_block from a flag: each named where it came from."""
    from autoembed.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("task: ctr\ncompression: robe\nrobe_size: 10\n"
                   "tables:\n  - {name: a, vocab_size: 100}\n")
    assert main(["estimate", "--config", str(cfg), "--robe-block", "64"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "--robe-block = 64: a block longer than the array (10 values) reads values twice; "
        "use --robe-block <= robe_size")


def _space_error(text: str) -> str:
    from autoembed.space import parse_space

    raw = {"params": {"lr": {"low": 0.1, "high": 0.5}}, **yaml_safe(text)}
    with pytest.raises(ConfigError) as e:
        parse_space(raw, "s.yaml")
    return str(e.value)


def yaml_safe(text: str) -> dict[str, Any]:
    import yaml

    return dict(yaml.safe_load(text))


@pytest.mark.parametrize(("text", "message"), [
    ("stand_in: {rows: [1, 0, 1]}", "key 'stand_in.rows' = [1, 0, 1]: must be three row counts "
     ">= 1: train, valid, test"),
    ("params: {lr: {low: 0.1, high: 0.5, step: 0}}", "key 'params.lr.step' = 0: must be a "
     "number > 0"),
    ("params: {dim: {low: 8, high: 64, step: 0.5}}", "key 'params.dim.step' = 0.5: must be an "
     "integer >= 1"),
    ("params: {lr: {low: 0.1, high: 0.5, multiple_of: 2}}", "key 'params.lr.multiple_of' = 2: "
     "applies to an int param only"),
    ("description: 3", "key 'description' = 3: must be a string"),
    ("tables: [{name: ''}]", "key 'tables[0].name' = '': must be a table name"),
])
def test_a_bad_space_key_names_the_file_the_key_the_value_and_the_rule(
        text: str, message: str) -> None:
    assert _space_error(text) == f"search space 's.yaml': {message}"


def test_a_data_spec_words_a_bad_value_as_every_rule_does() -> None:
    from autoembed.data.spec import DataSpec

    with pytest.raises(DataError) as e:
        DataSpec(rows=(10, 0, 10))
    assert str(e.value) == ("data spec key 'rows' = (10, 0, 10): must be three row counts "
                            ">= 1: train, valid, test")
    with pytest.raises(DataError) as e:
        DataSpec(label="")
    assert str(e.value) == "data spec key 'label' = '': must be a column name"
