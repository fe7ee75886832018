"""`autoembed estimate` as a user runs it: exit codes, JSON contract, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autoembed.cli import main

EXE = [sys.executable, "-m", "autoembed"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EXE, *args], capture_output=True, text=True, timeout=120)


def test_seed_case_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "estimate",
            "--task",
            "text",
            "--vocab",
            "1000000",
            "--dim",
            "300",
            "--batch",
            "64",
            "--seq",
            "512",
            "--precision",
            "fp32",
            "--optimizer",
            "adam",
            "--json",
        ]
    )
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    for key in (
        "method",
        "parameters",
        "gradients",
        "optimizer_state",
        "activations",
        "temporaries",
        "allocated_peak",
        "reserved_peak",
        "overhead",
        "device_total",
        "serving_bytes",
        "tables",
        "budget",
        "fits",
    ):
        assert key in d
    assert d["budget"] is None and d["fits"] is None
    assert d["tables"][0]["parameters"] == 1_200_000_000
    assert d["device_total"] == d["reserved_peak"] + d["overhead"]


def test_budget_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--budget", "80GB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True
    assert main(["estimate", "--budget", "2GB", "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["fits"] is False


def test_reserve_adds_to_overhead(capsys: pytest.CaptureFixture[str]) -> None:
    main(["estimate", "--json"])
    a = json.loads(capsys.readouterr().out)
    main(["estimate", "--json", "--reserve", "2GB"])
    b = json.loads(capsys.readouterr().out)
    assert b["overhead"] - a["overhead"] == 2_000_000_000


def test_a_negative_reserve_is_refused_naming_zero_as_allowed(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--reserve", "-1GB"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--reserve '-1GB'" in err
    assert "use 0 (the default) or a size" in err


def test_ctr_tables_and_hash(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "estimate",
            "--vocab",
            "1000000,5000",
            "--dim",
            "16",
            "--compression",
            "hash",
            "--hash-buckets",
            "100000",
            "--json",
        ]
    )
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert [t["rows"] for t in d["tables"]] == [100_000, 5000]


def test_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("task: ctr\ntables:\n  - {name: user, vocab_size: 1024}\ndim: 8\n")
    assert main(["estimate", "--config", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tables"][0]["parameters"] == 1024 * 8 * 4


def test_a_pooling_factor_is_priced_over_a_config_files_tables(tmp_path: Path) -> None:
    """`--config c.yaml --pooling-factor 50` priced the file's pooling factors as if the flag
    were not given; it sets each table's, as it does for --vocab's tables."""
    from autoembed.pricing.price import price

    p = tmp_path / "c.yaml"
    p.write_text("task: ctr\ndim: 8\ntables:\n  - {name: a, vocab_size: 100}\n"
                 "  - {name: b, vocab_size: 50, pooling_factor: 3.0}\n")
    assert [t.pooling_factor for t in price(config=p).config.tables] == [1.0, 3.0]
    priced = price(config=p, pooling_factor=50.0).config
    assert priced is not None and [t.pooling_factor for t in priced.tables] == [50.0, 50.0]


def test_a_config_naming_its_data_is_priced_on_the_datas_tables(tmp_path: Path) -> None:
    """A config with `data:` and no `tables` priced the 1,000,000-row placeholder table
    'f0', while `autoembed train` trains the data's tables: both now use the data's."""
    from autoembed.pricing.price import price

    csv = tmp_path / "clicks.csv"
    csv.write_text("user,item,y\n" + "".join(f"u{i % 7},i{i % 3},{i % 2}\n" for i in range(400)))
    p = tmp_path / "c.yaml"
    p.write_text(f"dim: 8\ndata: {{name: {csv}, label: y}}\n")
    priced = price(config=p)
    assert priced.config is not None
    # 7 users and 3 items, each in the train split, plus the OOV row
    assert [(t.name, t.vocab_size) for t in priced.config.tables] == [("user", 8), ("item", 4)]
    assert priced.estimate.parameters < 1_000_000 * 8 * 4  # not the placeholder's bytes


@pytest.mark.parametrize(
    "args",
    [
        ["--precision", "fp8"],
        ["--dim", "0"],
        ["--vocab", "-5"],
        ["--budget", "8XB"],
        ["--config", "/no/such/file.yaml"],
        ["--method", "psychic"],
        ["--compression", "qr", "--qr-collisions", "5000000"],
        ["--optimizer", "adam", "--dense-optimizer", "sparse_adam"],
        ["--compression", "robe", "--robe-size", "100", "--robe-block", "101"],
        ["--compression", "tt", "--tt-rank", "0"],
        ["--compression", "hot_cold", "--hot-share", "0", "--hash-buckets", "10"],
        ["--compression", "hot_cold", "--hot-share", "1.5", "--hash-buckets", "10"],
        ["--compression", "tt", "--serving", "int8"],
        ["--compression", "robe", "--serving", "int4"],
        ["--compression", "robe", "--optimizer", "rowwise_adagrad"],
        ["--compression", "tt", "--optimizer", "sparse_adam"],
        ["--compression", "hash", "--hash-buckets", "10", "--robe-shared"],
    ],
)
def test_bad_input_one_line_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("autoembed:")


def test_bad_yaml_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("task: ctr\ndimm: 8\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("task: [ctr\n")
    for p in (typo, broken):
        assert main(["estimate", "--config", str(p)]) == 2
        err = capsys.readouterr().err
        assert str(p) in err and "Traceback" not in err
    assert "did you mean 'dim'" in (
        main(["estimate", "--config", str(typo)]) and capsys.readouterr().err
    )


def test_process_exit_codes_and_help() -> None:
    r = run("estimate", "--budget", "1GB")
    assert r.returncode == 3 and "does NOT fit" in r.stdout
    r = run("estimate", "--bogus")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = run("estimate", "--help")
    assert r.returncode == 0 and "--budget" in r.stdout


def test_compressions_priced_from_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """Table parameter bytes by hand (fp32, one table of 1000 ids, dim 16; each tensor in
    512 B blocks)."""

    def blocks(*values: int) -> int:
        return sum(-(-v * 4 // 512) * 512 for v in values)

    base = ["estimate", "--vocab", "1000", "--dim", "16", "--json"]
    cases = {
        # V = 1000 -> (10, 10, 10), D = 16 -> (2, 2, 4), r = 4: cores of 10 x (2*4),
        # 10 x (4*2*4) and 10 x (4*4) values
        ("--compression", "tt", "--tt-rank", "4"): blocks(80, 320, 160),
        # 1,600 values
        ("--compression", "robe", "--robe-size", "1600", "--robe-block", "8"): blocks(1600),
        # share 0.1 of 16,000 values
        ("--compression", "robe", "--robe-size", "0.1"): blocks(1600),
        # one table: its shared array is its own
        ("--compression", "robe", "--robe-size", "0.1", "--robe-shared"): blocks(1600),
        # 100 hot rows + 50 cold buckets of 16
        ("--compression", "hot_cold", "--hot-share", "0.1", "--hash-buckets", "50"):
            blocks(150 * 16),
    }
    for flags, want in cases.items():
        assert main([*base, *flags]) == 0
        table = json.loads(capsys.readouterr().out)["tables"][0]
        assert table["parameters"] == want, flags


def test_price_is_the_library_side_of_the_command() -> None:
    """`autoembed estimate` parses, calls `price` and prints: the config, the budget and the
    estimate come from the library; an option the command passes that `price` does not read
    is an error, not silently dropped."""
    from autoembed.pricing.price import price

    p = price(vocab="1000,50", dim=8, budget="1GB", hash_buckets="0.5", compression="hash")
    assert p.config is not None and not p.user
    assert p.config.task == "ctr" and [t.vocab_size for t in p.config.tables] == [1000, 50]
    assert p.config.hash_buckets == 0.5 and p.budget is not None and p.budget.bytes == 10**9
    assert p.estimate.budget == 10**9 and p.estimate.fits is True and p.note is None
    with pytest.raises(TypeError, match="does not know: loss"):
        price(loss="pkg.module:fn")


def test_estimate_loads_no_engine_and_no_framework() -> None:
    """The analytic estimate is priced without the search engine, torch, Ray, Optuna or
    MLflow: a fresh process runs `autoembed estimate` and none of them is imported."""
    heavy = ("torch", "ray", "optuna", "mlflow", "autoembed.pipeline.driver")
    code = ("import sys; from autoembed.cli import main; "
            "rc = main(['estimate', '--budget', '80GB', '--json']); "
            f"print([m for m in {heavy!r} if m in sys.modules]); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-300:]


@pytest.mark.parametrize("command", [["estimate", "--budget", "800MB"], ["train"]])
def test_a_user_searchs_record_is_refused_by_commands_of_autoembeds_models(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """best.yaml of a search over your own model (`params` beside its embedding settings)
    is no config of autoembed's models: `estimate --config` priced it as one (a default
    CTR model over the record's tables, not the user's model) with exit 0; it is refused in
    one line, exit 2, as `train --config` refuses it, each naming what to do instead."""
    record = tmp_path / "best.yaml"
    record.write_text(
        "config:\n  precision: fp32\n  table_optimizer: adam\n  tables:\n"
        "  - {name: embedding, vocab_size: 100000, dim: 32}\n"
        "params: {dim: 32, lr: 0.01}\nsource: {study: u1, trial: 1}\n")
    rc = main([command[0], "--config", str(record), *command[1:]])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "records a search of your own model" in err
    assert ("--model FILE:build" if command[0] == "estimate" else "--study u1") in err


def test_task_ctr_with_one_table_takes_the_ctr_defaults(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--task ctr --vocab 1000` was refused with `--num-classes = 4: the ctr task is
    binary`, a value the user never gave (the seed text model's class count): a ctr model
    of one table is priced, binary, with its one table named as ctr tables are."""
    assert main(["estimate", "--task", "ctr", "--vocab", "1000", "--dim", "8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # 1000 x 8 fp32 values, allocated in 512-byte blocks
    assert [(t["name"], t["parameters"]) for t in d["tables"]] == [("f0", 63 * 512)]
    assert main(["estimate", "--task", "ctr", "--num-classes", "4"]) == 2
    assert capsys.readouterr().err.strip() == (
        "autoembed: error: --num-classes = 4: the ctr task is binary: use 2")


def test_a_choice_flags_help_lists_what_its_check_accepts() -> None:
    """`--pooling`'s help said "mean, sum or naive." while the check also takes idf: each
    flag that sets a config field of named choices words them from that field's rule."""
    from dataclasses import fields

    from autoembed.config import FIELD_RULES
    from autoembed.options import help_of
    from autoembed.pricing.estimate_options import EstimateOptions
    from autoembed.rules import OneOf

    helps = {f.name: help_of(f) for f in fields(EstimateOptions)}
    assert helps["pooling"] == "mean, sum, naive or idf."
    assert helps["cache_policy"] == "host_cached: lru or lfu."
    assert helps["optimizer"].endswith(": sgd, momentum, adam, adamw, adagrad, rowwise_adagrad "
                                       "or sparse_adam.")
    for name, rule in FIELD_RULES.items():
        if name in helps and isinstance(rule, OneOf) and not isinstance(rule.choices[0], bool):
            assert all(str(c) in helps[name] for c in rule.choices), name


def test_a_key_only_optimizer_sets_is_named_by_optimizer(
        capsys: pytest.CaptureFixture[str]) -> None:
    """With no --config file a refused key is named by the flag that sets it, given or not;
    table_optimizer, which only --optimizer sets, was said as "config key 'table_optimizer'",
    a name the command has no flag for."""
    assert main(["estimate", "--vocab", "1000", "--dim", "8", "--placement", "host_cached"]) == 2
    assert capsys.readouterr().err.strip() == (
        "autoembed: error: --optimizer = 'adam': placement host_cached needs an optimizer "
        "that leaves rows outside the batch unchanged: use sgd, adagrad, rowwise_adagrad, "
        "sparse_adam")


@pytest.mark.parametrize("argv, said", [
    (["--world-size", "0"], "--world-size = 0: must be an integer >= 1"),
    (["--world-size", "2", "--plan-device", "gpu"],
     "--plan-device = 'gpu': must be one of cuda, cpu"),
])
def test_a_bad_rank_option_is_said_as_an_option(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--world-size 0` was said "config key '--world-size' = 0", a config key's shape for
    an option; it is refused as every option is, before the model is loaded."""
    assert main(["estimate", *argv, "--model", "no_such.py:m", "--example", "no_such.py:e"]) == 2
    assert capsys.readouterr().err.strip() == f"autoembed: error: {said}"


@pytest.mark.parametrize("argv, said", [
    (["--precision", "fp8"], "--precision = 'fp8': must be one of fp32, fp16, bf16, "
     "fp16_master, bf16_master, amp_fp16, amp_bf16"),
    (["--optimizer", "lion"], "--optimizer = 'lion': must be one of sgd, momentum, adam, "
     "adamw, adagrad, rowwise_adagrad"),
])
def test_a_bad_step_flag_beside_model_is_said_as_the_flag_before_the_model_loads(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Beside --model, `--precision fp8` was said "config key 'precision'" and `--optimizer
    lion` "optimizer 'lion' ... or a factory params -> Optimizer" (the Python API's), each
    after the model was built; both are refused as options first (no model file here)."""
    assert main(["estimate", *argv, "--model", "no_such.py:m", "--example", "no_such.py:e"]) == 2
    assert capsys.readouterr().err.strip() == f"autoembed: error: {said}"


def test_sharding_row_without_gpus_is_refused_not_ignored(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--sharding row` without --gpus priced one GPU, exactly as if not given (its help:
    "with --gpus > 1"), and beside --model it was dropped unsaid; both are refused."""
    assert main(["estimate", "--sharding", "row"]) == 2
    assert capsys.readouterr().err.strip() == (
        "autoembed: error: --sharding row spreads the tables over --gpus: give --gpus N "
        "(N >= 2) with it, or drop it")
    assert main(["estimate", "--model", "no_such.py:m", "--example", "no_such.py:e",
                 "--sharding", "row"]) == 2
    assert capsys.readouterr().err.startswith(
        "autoembed: error: --sharding describes the built-in model; with --model")


def test_a_config_train_would_refuse_is_refused_where_it_is_priced(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--task ctr --pooling idf` was priced, exit 0, though train and search refuse to
    build it (idf weighs text documents); so was a file's int4 serving of qr concat's odd
    half width (its quotient table named first). Both are refused in one line where
    estimate reads them, as train does."""
    assert main(["estimate", "--task", "ctr", "--pooling", "idf"]) == 2
    assert capsys.readouterr().err.strip() == (
        "autoembed: error: --pooling = 'idf': weighs the tokens of text documents; use "
        "pooling mean for task ctr")
    p = tmp_path / "c.yaml"  # dim 6: qr concat stores 3 columns, which int4 cannot pack
    p.write_text("task: ctr\ndim: 6\ncompression: qr\nqr_operation: concat\nserving: int4\n"
                 "tables:\n  - {name: user, vocab_size: 1000}\n")
    assert main(["estimate", "--config", str(p)]) == 2
    assert capsys.readouterr().err.strip() == (
        "autoembed: error: config key 'dim' = 6: serving int4 packs two values a byte but "
        "'tables.user.q_weight' has 3 columns (qr concat stores dim/2); use a dim divisible by "
        "4, serving int8, or another qr_operation")
