"""DataSpec: validation, JSON round trip, name resolution, light import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoembed.data import BUILTIN_NAMES, DataSpec, load_dataset
from autoembed.errors import DataError

_settings = settings(deadline=None, derandomize=True, max_examples=60)


@st.composite
def specs(draw: st.DrawFn) -> DataSpec:
    nf = draw(st.integers(1, 6))
    vocab_sizes = tuple(draw(st.lists(st.integers(1, 10**9), min_size=nf, max_size=nf)))
    pairs = draw(
        st.one_of(
            st.none(),
            st.lists(
                st.tuples(st.integers(0, nf - 1), st.integers(0, nf - 1)).filter(
                    lambda p: p[0] != p[1]
                ),
                max_size=3,
            ).map(tuple),
        )
    )
    zipf = draw(
        st.one_of(
            st.floats(0.0, 3.0),
            st.lists(st.floats(0.0, 3.0), min_size=nf, max_size=nf).map(tuple),
        )
    )
    columns = st.lists(st.text("abcxyz_", min_size=1, max_size=5), max_size=3,
                       unique=True).map(tuple)  # a column named twice is refused
    a = draw(st.floats(0.05, 0.9))
    b = draw(st.floats(0.05, 0.9 - a)) if a < 0.85 else 0.05
    name = draw(st.sampled_from([*BUILTIN_NAMES, "data/clicks.csv", "x.parquet", "t.tsv.gz"]))
    file = name not in BUILTIN_NAMES  # built-in data take no file's columns
    return DataSpec(
        name=name,
        seed=draw(st.integers(0, 2**40)),
        rows=draw(st.tuples(st.integers(1, 10**7), st.integers(1, 10**6), st.integers(1, 10**6))),
        vocab_sizes=vocab_sizes,
        bag_sizes=draw(st.one_of(st.none(), st.tuples(*[st.integers(1, 9)] * nf))),
        zipf_exponent=zipf,
        scramble=draw(st.booleans()),
        head_size=draw(st.integers(0, 10**6)),
        interaction_pairs=pairs,
        vocab_size=draw(st.one_of(st.none(), st.integers(3, 10**8))),
        seq_len=draw(st.one_of(st.none(), st.integers(1, 4096))),
        num_classes=draw(st.integers(2, 50)),
        label=draw(st.sampled_from(["label", "clicked", "y"])) if file else "label",
        categorical=draw(st.one_of(st.none(), columns)) if file else None,
        multi_hot=draw(columns) if file else (),
        text_column=draw(st.one_of(st.none(), st.just("body"))) if file else None,
        min_count=draw(st.integers(1, 100)),
        split=(a, b, 1.0 - a - b),
    )


@_settings
@given(specs())
def test_to_dict_is_plain_json_and_round_trips(spec: DataSpec) -> None:
    raw = spec.to_dict()
    text = json.dumps(raw)  # plain JSON types only
    back = DataSpec.from_dict(json.loads(text))
    assert back == spec
    assert back.to_dict() == raw


def test_defaults_serialise_to_the_name_alone() -> None:
    assert DataSpec().to_dict() == {"name": "synthetic-ctr"}
    assert DataSpec("flights", min_count=3).to_dict() == {"name": "flights", "min_count": 3}


def test_task_follows_from_the_spec() -> None:
    assert DataSpec("synthetic-ctr").task == "ctr"
    assert DataSpec("synthetic-text").task == "text"
    assert DataSpec("bbcnews").task == "text"
    assert DataSpec("movielens").task == "ctr"
    assert DataSpec("a.csv").task == "ctr"
    assert DataSpec("a.csv", text_column="body").task == "text"


def test_built_in_data_refuse_a_files_columns() -> None:
    """`--data movielens --categorical userId` searched movielens' own four tables and
    stored the ignored key in the study: refused in one line naming key and flag."""
    with pytest.raises(DataError) as e:
        DataSpec("movielens", categorical=("userId",))
    msg = str(e.value)
    assert "'movielens'" in msg and "categorical (--categorical) describes a data file" in msg
    with pytest.raises(DataError, match=r"label, text_column \(--label, --text-column\) "):
        DataSpec.from_dict({"name": "synthetic-text", "label": "y", "text_column": "t"})
    assert DataSpec("flights", min_count=3, split=(0.7, 0.2, 0.1)).min_count == 3  # theirs
    assert DataSpec("a.csv", label="y", categorical=("u",)).categorical == ("u",)


def test_unknown_name_lists_the_valid_names() -> None:
    with pytest.raises(DataError) as e:
        DataSpec("movilens")
    msg = str(e.value)
    assert "'movilens'" in msg and "did you mean 'movielens'" in msg
    for name in BUILTIN_NAMES:
        assert name in msg
    assert "\n" not in msg


def test_unknown_extension_is_named() -> None:
    with pytest.raises(DataError, match=r"'clicks\.xlsx'.*unknown extension '\.xlsx'.*\.csv"):
        DataSpec("clicks.xlsx")


def test_unknown_key_lists_valid_keys() -> None:
    with pytest.raises(DataError, match=r"config\.yaml: unknown data key 'min_cont'.*'min_count'"):
        DataSpec.from_dict({"name": "flights", "min_cont": 2}, source="config.yaml")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("rows", [10, 0, 5]),
        ("rows", [10, 5]),
        ("vocab_sizes", []),
        ("vocab_sizes", [10, -1]),
        ("bag_sizes", [1]),
        ("zipf_exponent", -0.5),
        ("interaction_pairs", [[0, 0]]),
        ("interaction_pairs", [[0, 9]]),
        ("num_classes", 1),
        ("min_count", 0),
        ("split", [0.5, 0.5, 0.5]),
        ("seed", -1),
        ("seq_len", True),
    ],
)
def test_bad_values_name_the_key(key: str, value: object) -> None:
    with pytest.raises(DataError, match=f"'{key}'"):
        DataSpec.from_dict({"name": "synthetic-ctr", key: value})


def test_load_dataset_accepts_a_name_a_dict_or_a_spec() -> None:
    small = {"name": "synthetic-ctr", "rows": [10, 10, 10], "vocab_sizes": [5]}
    assert load_dataset(small).num_rows("valid") == 10
    assert load_dataset(DataSpec.from_dict(small)).tables[0].vocab_size == 5
    assert load_dataset("synthetic-text").task == "text"


def test_import_is_light() -> None:
    code = (
        "import sys, autoembed.data; "
        "heavy = [m for m in ('pandas', 'sklearn', 'pyarrow') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
