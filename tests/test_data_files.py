"""User CSV/Parquet files: encoding, rare-value folding, vocabulary round trip, bad data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from autoembed.batch import MISSING_ID
from autoembed.data import DataSpec, load_dataset, load_vocab
from autoembed.data.base import InMemoryDataset
from autoembed.data.user_file import unused_note
from autoembed.errors import DataError

N = 400


def _frame(n: int = N) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    # city: 3 common values plus one value per 50 rows seen only once or twice ("rare")
    common = rng.choice(["paris", "rome", "oslo"], size=n, p=[0.5, 0.3, 0.2]).astype(object)
    common[::50] = [f"village{i}" for i in range(len(common[::50]))]
    tags = ["a|b", "b", "c|a|d", "", None, "b|c"]
    return pd.DataFrame(
        {
            "row": np.arange(n),  # one value per row: not auto-detected as categorical
            "city": common,
            "device": rng.integers(0, 4, size=n),  # few distinct ints: categorical
            "price": rng.normal(size=n),  # float: ignored
            "tags": [tags[i % len(tags)] for i in range(n)],
            "label": rng.integers(0, 2, size=n),
        }
    )


def _load(spec: DataSpec, vocab: object = None) -> InMemoryDataset:
    data = load_dataset(spec, vocab=vocab)  # type: ignore[arg-type]
    assert isinstance(data, InMemoryDataset)
    return data


def _all(data: InMemoryDataset, split: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    batches = list(data.batches(split, 64, shuffle=False))
    feats = {k: torch.cat([b.features[k] for b in batches]).numpy() for k in batches[0].features}
    return feats, torch.cat([b.labels for b in batches]).numpy()


def _write(frame: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".parquet":
        pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (in autoembed[datasets])")
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_round_trip_with_rare_folding_and_saved_vocab(tmp_path: Path, suffix: str) -> None:
    frame = _frame()
    path = _write(frame, tmp_path / f"clicks{suffix}")
    spec = DataSpec(str(path), multi_hot=("tags",), min_count=3)
    data = _load(spec)
    assert data.task == "ctr" and data.num_classes == 2
    assert [t.name for t in data.tables] == ["city", "device", "tags"]  # row, price left out

    train = data.split_rows("train")
    counts = frame["city"].iloc[train].value_counts()
    kept = counts[counts >= 3]
    # ids: 0 OOV, then by descending train count
    assert data.vocab_maps["city"].values == tuple(kept.index)
    assert data.tables[0].vocab_size == len(kept) + 1 == 4
    expected = {v: i + 1 for i, v in enumerate(kept.index)}
    for split in ("train", "valid", "test"):
        feats, labels = _all(data, split)
        rows = data.split_rows(split)
        want = [expected.get(v, 0) for v in frame["city"].iloc[rows]]
        assert feats["city"][:, 0].tolist() == want  # villages fold into OOV 0
        assert labels.dtype == np.float32
        assert labels.tolist() == frame["label"].iloc[rows].astype(float).tolist()
        assert feats["device"][:, 0].min() >= 1  # all four devices are common

    # multi-hot: a|b, b, c|a|d, '' and None -> [OOV], b|c
    tags = data.vocab_maps["tags"]
    feats, _ = _all(data, "train")
    first = data.split_rows("train")[:6]
    for pos, row in zip(first, feats["tags"][:6], strict=True):
        raw = frame["tags"].iloc[pos]
        ids = [tags.id_of(t) for t in raw.split("|")] if isinstance(raw, str) and raw else [0]
        assert row.tolist() == ids + [MISSING_ID] * (3 - len(ids))
    assert data.tables[2].pooling_factor == pytest.approx(
        np.mean([max(1, len(t.split("|"))) if isinstance(t, str) and t else 1
                 for t in frame["tags"].iloc[train]])
    )

    # the saved vocabulary reproduces the same ids
    saved = data.save_vocab(tmp_path / "export")
    raw = json.loads(saved.read_text())
    assert raw["data"] == spec.to_dict() and raw["labels"] == ["0", "1"]
    vocab = load_vocab(tmp_path / "export")
    assert vocab.maps["city"].values == data.vocab_maps["city"].values
    again = _load(spec, vocab=tmp_path / "export")
    for split in ("train", "test"):
        a, la = _all(data, split)
        b, lb = _all(again, split)
        assert all(np.array_equal(a[k], b[k]) for k in a) and np.array_equal(la, lb)


def test_saved_vocab_encodes_new_data_with_old_ids(tmp_path: Path) -> None:
    old = _frame()
    data = _load(DataSpec(str(_write(old, tmp_path / "old.csv")), categorical=("city",)))
    data.save_vocab(tmp_path / "v")
    new = pd.DataFrame({"city": ["rome", "atlantis", "paris", "rome"] * 5, "label": [1, 0] * 10})
    new_spec = DataSpec(str(_write(new, tmp_path / "new.csv")), categorical=("city",))
    reused = _load(new_spec, tmp_path / "v")
    city = data.vocab_maps["city"]
    assert reused.tables[0].vocab_size == city.size
    feats, _ = _all(reused, "train")
    rows = reused.split_rows("train")
    assert feats["city"][:, 0].tolist() == [city.id_of(v) for v in new["city"].iloc[rows]]
    assert city.id_of("atlantis") == 0


def test_splits_are_disjoint_80_10_10_and_fixed(tmp_path: Path) -> None:
    path = _write(_frame(1003), tmp_path / "d.csv")
    data = _load(DataSpec(str(path)))
    parts = [data.split_rows(s) for s in ("train", "valid", "test")]
    assert [p.size for p in parts] == [803, 100, 100]
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(1003))
    again = _load(DataSpec(str(path)))
    for part, split in zip(parts, ("train", "valid", "test"), strict=True):
        assert np.array_equal(part, again.split_rows(split))
    other = _load(DataSpec(str(path), seed=1))
    assert not np.array_equal(parts[1], other.split_rows("valid"))


def test_an_evaluation_prefix_is_a_uniform_sample_of_a_sorted_file(tmp_path: Path) -> None:
    # a file sorted by its label (or by date, by user): an evaluation of the first k rows of
    # valid or test must not read only the first class (a prefix of ascending rows did)
    n = 4000
    frame = pd.DataFrame({"c": np.arange(n) % 7, "label": (np.arange(n) >= n // 2).astype(int)})
    data = _load(DataSpec(str(_write(frame, tmp_path / "sorted.csv"))))
    for split in ("valid", "test"):
        _, labels = _all(data, split)
        rows = data.split_rows(split)
        assert np.array_equal(labels, frame["label"].to_numpy()[rows])  # batch order = rows
        first = labels[:100]
        # 100 draws without replacement from a 50/50 split: 35..65 positives is > 99.6%
        assert 35 <= int(first.sum()) <= 65, first.sum()
    assert np.all(np.diff(data.split_rows("train")) > 0)  # train stays ascending


def test_two_valued_labels_map_in_sorted_order(tmp_path: Path) -> None:
    frame = pd.DataFrame({"c": ["x", "y"] * 20, "label": ["yes", "no", "no", "yes"] * 10})
    data = _load(DataSpec(str(_write(frame, tmp_path / "yn.csv"))))
    assert data.vocabulary.labels == ("no", "yes")
    _, labels = _all(data, "train")
    want = (frame["label"].iloc[data.split_rows("train")] == "yes").astype(np.float32)
    assert labels.tolist() == want.tolist()
    numeric = pd.DataFrame({"c": ["x", "x", "y", "y"] * 10, "label": [9, 10] * 20})  # 9 < 10
    d2 = _load(DataSpec(str(_write(numeric, tmp_path / "n.csv"))))
    assert d2.vocabulary.labels == ("9", "10")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_true_false_label_loads_again_with_its_saved_vocabulary(tmp_path: Path,
                                                                suffix: str) -> None:
    frame = pd.DataFrame({"c": ["x", "y", "z"] * 20, "label": [True, False, False, True] * 15})
    spec = DataSpec(str(_write(frame, tmp_path / f"tf{suffix}")))
    data = _load(spec)
    data.save_vocab(tmp_path / "v")
    again = _load(spec, vocab=tmp_path / "v")  # refused before: 'True' not in ('0', '1')
    for split in ("train", "valid", "test"):
        _, labels = _all(again, split)
        want = frame["label"].iloc[again.split_rows(split)].astype(np.float32)
        assert labels.tolist() == want.tolist()


def test_auto_detection_takes_integers_with_gaps_and_leaves_string_ids(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    shop = rng.integers(0, 10, N).astype(float)
    shop[::7] = np.nan  # a CSV reader gives this integer column as floats: 3.0, NaN
    frame = pd.DataFrame({"row": np.arange(N), "shop": shop, "price": rng.normal(size=N),
                          "label": rng.integers(0, 2, N)})
    frame["session"] = [f"s-{i:05d}-x" for i in range(N)]  # a string id per row
    data = _load(DataSpec(str(_write(frame, tmp_path / "gaps.csv"))))
    # row and session (one value per row) and price (not whole numbers) left out
    assert [t.name for t in data.tables] == ["shop"]
    shops = data.vocab_maps["shop"]
    assert set(shops.values) == {str(v) for v in range(10)}  # '3', not '3.0'
    feats, _ = _all(data, "train")
    raw = frame["shop"].iloc[data.split_rows("train")]
    want = [0 if np.isnan(v) else shops.id_of(str(int(v))) for v in raw]
    assert feats["shop"][:, 0].tolist() == want and 0 in want


def test_text_file_builds_its_vocabulary_on_train(tmp_path: Path) -> None:
    words = ["alpha beta", "beta gamma", "Gamma, ALPHA! beta", "delta"]
    frame = pd.DataFrame(
        {
            "body": [words[i % 4] for i in range(200)],
            "topic": ["sport", "news", "tech", "news"] * 50,
        }
    )
    frame.loc[frame.index[-1], "body"] = "zeta zeta"
    path = _write(frame, tmp_path / "docs.csv")
    data = _load(DataSpec(str(path), text_column="body", label="topic", seq_len=4))
    assert data.task == "text" and data.num_classes == 3 and data.seq_len == 4
    assert data.vocabulary.labels == ("news", "sport", "tech")
    tokens = data.vocab_maps["tokens"]
    last_in_train = 199 in set(data.split_rows("train").tolist())
    assert ("zeta" in tokens.values) == last_in_train  # vocabulary from train rows only
    assert set(tokens.values) >= {"alpha", "beta", "gamma", "delta"}
    feats, labels = _all(data, "train")
    rows = data.split_rows("train")
    for pos, row, lab in zip(rows[:8], feats["tokens"][:8], labels[:8], strict=True):
        toks = frame["body"].iloc[pos].lower().replace(",", " ").replace("!", " ").split()
        ids = [tokens.id_of(t) for t in toks]
        assert row.tolist() == ids + [0] * (4 - len(ids))
        assert int(lab) == ["news", "sport", "tech"].index(frame["topic"].iloc[pos])
    assert labels.dtype == np.int64


# ------------------------------------------------------------------------- bad data


def _error(spec: DataSpec, vocab: Path | None = None) -> str:
    with pytest.raises(DataError) as e:
        load_dataset(spec, vocab=vocab)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_missing_label_column_lists_columns(tmp_path: Path) -> None:
    path = _write(_frame().rename(columns={"label": "clicked"}), tmp_path / "a.csv")
    msg = _error(DataSpec(str(path)))
    assert "a.csv" in msg and "'label'" in msg and "'clicked'" in msg and "'city'" in msg
    # 'label' is only the default; `train` reads it from the config file's data spec
    assert msg.endswith("name the label column with --label (a config file: its data key "
                        "'label')")


@pytest.mark.parametrize("sep", [";", "\t", "|"])
def test_a_csv_separated_otherwise_is_read_by_its_header(tmp_path: Path, sep: str) -> None:
    frame = _frame()
    path = tmp_path / "semi.csv"
    frame.to_csv(path, index=False, sep=sep)
    data = _load(DataSpec(str(path), categorical=("city", "device")))
    assert [t.name for t in data.tables] == ["city", "device"]
    _, labels = _all(data, "train")
    assert labels.tolist() == frame["label"].iloc[data.split_rows("train")].tolist()


@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_a_spreadsheets_sep_line_names_the_separator(tmp_path: Path, bom: str) -> None:
    """Excel's 'sep=;' first line was read as the header: columns 'sep=' and 'Unnamed: 1',
    and 'label column is not in' the file."""
    frame = _frame()
    path = tmp_path / "excel.csv"
    path.write_text(bom + "sep=;\r\n" + frame.to_csv(index=False, sep=";", lineterminator="\r\n"))
    data = _load(DataSpec(str(path), categorical=("city", "device")))
    _, labels = _all(data, "train")
    assert labels.tolist() == frame["label"].iloc[data.split_rows("train")].tolist()
    assert data.vocab_maps["city"].id_of("paris") == 1  # the most common value, read as such


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_64_bit_ids_with_missing_cells_stay_distinct(tmp_path: Path, suffix: str) -> None:
    """An integer column with empty cells is read as float64, which rounds ids above 2**53
    (hashed ids): 40 distinct ids became one value, a 2-row table, silently."""
    rng = np.random.default_rng(0)
    ids: list[int | None] = [2**60 + int(i) for i in rng.integers(0, 40, N)]
    for k in range(0, N, 10):
        ids[k] = None
    labels = [k % 2 for k in range(N)]
    path = tmp_path / f"hashed{suffix}"
    if suffix == ".csv":
        path.write_text("h,label\n" + "".join(f"{'' if v is None else v},{y}\n"
                                                for v, y in zip(ids, labels, strict=True)))
    else:  # as Spark or pyarrow write it: an int64 column with nulls, no pandas metadata
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"h": pa.array(ids, type=pa.int64()), "label": labels}), path)
    data = _load(DataSpec(str(path), categorical=("h",)))
    train = [ids[i] for i in data.split_rows("train")]
    assert set(data.vocab_maps["h"].values) == {str(v) for v in train if v is not None}
    assert len(data.vocab_maps["h"].values) > 30


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "twice.csv"
    path.write_text("user,item,user,label\n" + "".join(f"{i % 5},{i % 3},{i % 4},{i % 2}\n"
                                                       for i in range(60)))
    msg = _error(DataSpec(str(path)))  # pandas read it as 'user' and 'user.1'
    assert "twice.csv" in msg and "the column 'user' twice" in msg
    blank = tmp_path / "blank.csv"  # a spreadsheet's index column has no name
    blank.write_text(",item,label\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(60)))
    data = _load(DataSpec(str(blank)))
    assert [t.name for t in data.tables] == ["item"]  # 'Unnamed: 0': one value per row


def test_a_categorical_column_named_twice_is_refused(tmp_path: Path) -> None:
    """`--categorical user,user` crashed the search (IndexError, exit 1)."""
    path = _write(_frame(), tmp_path / "a.csv")
    for given in (("city", "city"), ("city", "label", "city")):
        with pytest.raises(DataError) as e:
            load_dataset(DataSpec(str(path), categorical=given))
        msg = str(e.value)
        assert "'categorical'" in msg and "each once" in msg and str(given) in msg, msg


def test_a_column_inside_another_by_its_dotted_name_is_refused(tmp_path: Path) -> None:
    frame = pd.DataFrame({"user": [1, 2, 3] * 20, "user.id": [4, 5] * 30, "label": [0, 1] * 30})
    path = _write(frame, tmp_path / "dots.csv")
    msg = _error(DataSpec(str(path)))  # the search said "no combination ... is a valid config"
    assert "dots.csv" in msg and "'user' and 'user.id'" in msg and "'user_id'" in msg
    alone = _load(DataSpec(str(path), categorical=("user.id",)))  # a dotted name alone is fine
    assert [t.name for t in alone.tables] == ["user.id"]


def test_a_parquet_list_column_is_a_bag_of_its_values(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (in autoembed[datasets])")
    rng = np.random.default_rng(4)
    kinds = [["drama"], ["comedy", "drama"], [], ["noir", "comedy", "drama"]]
    frame = pd.DataFrame({"user": rng.integers(0, 9, N), "genres": [kinds[i % 4] for i in
                                                                  range(N)],
                          "vec": [rng.random(3) for _ in range(N)],  # numbers: not a bag
                          "label": rng.integers(0, 2, N)})
    path = _write(frame, tmp_path / "lists.parquet")
    data = _load(DataSpec(str(path)))  # was: exit 1, "unhashable type: 'numpy.ndarray'"
    assert [t.name for t in data.tables] == ["user", "genres"]
    genres = data.vocab_maps["genres"]
    assert set(genres.values) == {"drama", "comedy", "noir"} and genres.kind == "multi_hot"
    feats, _ = _all(data, "train")
    for pos, row in zip(data.split_rows("train")[:8], feats["genres"][:8], strict=True):
        ids = [genres.id_of(g) for g in frame["genres"].iloc[pos]] or [0]  # empty: OOV
        assert row.tolist() == ids + [MISSING_ID] * (3 - len(ids))
    data.save_vocab(tmp_path / "v")
    again = _load(DataSpec(str(path)), vocab=tmp_path / "v")
    assert np.array_equal(_all(again, "test")[0]["genres"], _all(data, "test")[0]["genres"])
    frame["meta"] = [{"k": i % 3} for i in range(N)]  # a Parquet struct column
    path = _write(frame, tmp_path / "struct.parquet")
    assert [t.name for t in _load(DataSpec(str(path))).tables] == ["user", "genres"]
    msg = _error(DataSpec(str(path), categorical=("user", "meta")))
    assert "'meta' holds dict values, not keys" in msg
    msg = _error(DataSpec(str(path), label="genres", categorical=("user",)))
    assert "label column 'genres'" in msg and "holds lists" in msg


def test_utf16_files_are_read_and_other_encodings_named(tmp_path: Path) -> None:
    frame = pd.DataFrame({"ville": ["Montréal", "Zürich", "Québec"] * 20, "y": [0, 1] * 30})
    frame.to_csv(tmp_path / "u16.csv", index=False, encoding="utf-16")  # with its BOM
    frame.to_csv(tmp_path / "u16.tsv", index=False, encoding="utf-16", sep="\t")
    for name in ("u16.csv", "u16.tsv"):
        data = _load(DataSpec(str(tmp_path / name), label="y"))
        assert set(data.vocab_maps["ville"].values) == {"Montréal", "Zürich", "Québec"}
    frame.to_csv(tmp_path / "latin.csv", index=False, encoding="latin-1")
    msg = _error(DataSpec(str(tmp_path / "latin.csv"), label="y"))
    assert "latin.csv" in msg and "not UTF-8 text (it has the byte 0xe9)" in msg  # Latin-1 é
    assert "save it as UTF-8" in msg


def test_header_names_are_matched_without_surrounding_spaces(tmp_path: Path) -> None:
    path = tmp_path / "spaced.csv"
    # a BOM, CRLF line ends and spaces around the header names (as spreadsheets write them)
    path.write_bytes(("\ufeff User Id ,Item,Is Click \r\n"
                      + "".join(f"u{i % 7},i{i % 3},{i % 2}\r\n" for i in range(60)))
                     .encode("utf-8"))
    data = _load(DataSpec(str(path), label="Is Click", categorical=("User Id", "Item")))
    assert [t.name for t in data.tables] == ["User Id", "Item"]
    assert data.vocab_maps["User Id"].size == 8  # u0..u6 and OOV


def test_non_binary_label_for_ctr(tmp_path: Path) -> None:
    frame = _frame()
    frame["label"] = np.arange(N) % 5
    msg = _error(DataSpec(str(_write(frame, tmp_path / "b.csv"))))
    assert "b.csv" in msg and "'label'" in msg and "5 distinct" in msg and "text_column" in msg
    assert "--text-column" in msg and "'0', '1', '2', '3'" in msg


def test_a_label_whose_values_differ_by_spaces_says_so(tmp_path: Path) -> None:
    frame = _frame()
    frame["label"] = np.where(frame["label"] == 1, " yes", "no")
    frame.loc[7, "label"] = "yes"  # one row typed without the space
    msg = _error(DataSpec(str(_write(frame, tmp_path / "ws.csv"))))
    assert "ws.csv" in msg and "3 distinct values (' yes', 'no', 'yes')" in msg
    assert "surrounding spaces" in msg


def test_single_class_label(tmp_path: Path) -> None:
    frame = _frame()
    frame["label"] = 1
    msg = _error(DataSpec(str(_write(frame, tmp_path / "one.csv"))))
    assert "one.csv" in msg and "'label'" in msg and "both classes" in msg


def test_missing_label_values(tmp_path: Path) -> None:
    frame = _frame().astype({"label": float})
    frame.loc[3, "label"] = np.nan
    msg = _error(DataSpec(str(_write(frame, tmp_path / "nan.csv"))))
    assert "nan.csv" in msg and "'label'" in msg and "1 missing" in msg


def test_empty_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert "empty.csv" in _error(DataSpec(str(empty))) and "empty" in _error(DataSpec(str(empty)))
    header = tmp_path / "header.csv"
    header.write_text("city,label\n")
    msg = _error(DataSpec(str(header)))
    assert "header.csv" in msg and "no data rows" in msg
    pq = _write(_frame().iloc[:0], tmp_path / "none.parquet")
    assert "none.parquet" in _error(DataSpec(str(pq)))


def test_corrupt_files(tmp_path: Path) -> None:
    good = _write(_frame(), tmp_path / "good.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    msg = _error(DataSpec(str(bad)))
    assert "bad.parquet" in msg and "cannot be read as Parquet" in msg
    garbage = tmp_path / "garbage.csv.gz"
    garbage.write_bytes(b"\x00\xffnot gzip at all")
    msg = _error(DataSpec(str(garbage)))
    assert "garbage.csv.gz" in msg and "cannot be read" in msg


def test_all_missing_column(tmp_path: Path) -> None:
    frame = _frame()
    frame["empty"] = np.nan
    msg = _error(DataSpec(str(_write(frame, tmp_path / "e.csv")), categorical=("city", "empty")))
    assert "e.csv" in msg and "'empty'" in msg and "all missing" in msg


def test_unknown_categorical_column(tmp_path: Path) -> None:
    msg = _error(DataSpec(str(_write(_frame(), tmp_path / "u.csv")), categorical=("town",)))
    assert "u.csv" in msg and "'town'" in msg and "available columns" in msg and "city" in msg


def test_no_categorical_columns(tmp_path: Path) -> None:
    frame = pd.DataFrame({"x": np.linspace(0, 1, 50), "label": [0, 1] * 25})
    msg = _error(DataSpec(str(_write(frame, tmp_path / "f.csv"))))
    assert "f.csv" in msg and "x (float64)" in msg and "--categorical a,b" in msg


def test_missing_file_and_unknown_extension(tmp_path: Path) -> None:
    msg = _error(DataSpec(str(tmp_path / "nope.csv")))
    assert "nope.csv" in msg and "does not exist" in msg
    with pytest.raises(DataError, match=r"'data\.json'.*unknown extension"):
        DataSpec("data.json")


def test_text_needs_two_classes(tmp_path: Path) -> None:
    frame = pd.DataFrame({"body": ["a b"] * 30, "label": ["x"] * 30})
    msg = _error(DataSpec(str(_write(frame, tmp_path / "t.csv")), text_column="body"))
    assert "t.csv" in msg and "'label'" in msg and "two" in msg


def test_text_in_any_script_and_number_cells_are_tokens(tmp_path: Path) -> None:
    """Only [a-z0-9] runs were tokens: Cyrillic text was empty documents (every one OOV),
    'café' was 'caf', and a text column read as numbers gave no token at all."""
    from autoembed.data.text import tokenize

    assert tokenize("Don’t stop: café Größe, 2024!") == ["don't", "stop", "café", "größe", "2024"]
    assert tokenize("Привет, мир") == ["привет", "мир"]
    assert tokenize("It's a_b x-1 3.5") == ["it's", "a", "b", "x", "1", "3", "5"]  # as before
    frame = pd.DataFrame({"body": ["хороший фильм", "плохой фильм"] * 30, "code": [7, 42] * 30,
                          "label": ["pos", "neg"] * 30})
    path = _write(frame, tmp_path / "ru.csv")
    data = _load(DataSpec(str(path), text_column="body"))
    assert set(data.vocab_maps["tokens"].values) == {"фильм", "хороший", "плохой"}
    data = _load(DataSpec(str(path), text_column="code"))
    assert set(data.vocab_maps["tokens"].values) == {"7", "42"}


def test_a_text_column_of_numbers_is_tokenised_as_written(tmp_path: Path) -> None:
    """A text column pandas read as numbers was tokenised from the numbers: '007' was the
    token '7' and '3.50' the tokens '3', '5', where the same cells in a column of words
    gave '007' and '3', '50'."""
    path = tmp_path / "codes.csv"
    path.write_text("body,label\n" + "007,a\n3.50,b\n" * 30)
    data = _load(DataSpec(str(path), text_column="body"))
    assert set(data.vocab_maps["tokens"].values) == {"007", "3", "50"}


def test_a_text_column_without_tokens_is_refused(tmp_path: Path) -> None:
    """Punctuation and emoji only: every document was [OOV], a 2-row table, silently."""
    frame = pd.DataFrame({"body": ["!!! :)", "\U0001F600 ...", "?"] * 20,
                          "label": ["a", "b"] * 30})
    msg = _error(DataSpec(str(_write(frame, tmp_path / "emoji.csv")), text_column="body"))
    assert "'body'" in msg and "keeps no token" in msg and "min_count=1" in msg


def test_a_text_label_that_is_not_classes_is_refused(tmp_path: Path) -> None:
    """A measurement (fractional numbers) or an id per row as a text task's label made a
    class of every distinct value, silently: 120 rows, 120 classes."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"body": ["good film", "bad film", "fine"] * 40,
                          "score": rng.normal(size=120).round(3), "id": np.arange(120),
                          "stars": rng.integers(1, 6, 120).astype(float)})
    frame.loc[3, "stars"] = np.nan  # whole numbers read as floats: still classes
    path = _write(frame, tmp_path / "reviews.csv")
    msg = _error(DataSpec(str(path), label="score", text_column="body"))
    first = frame["score"][frame["score"] % 1 != 0].iloc[0]
    assert "'score'" in msg and f"(e.g. {first:g}," in msg and "not whole" in msg
    msg = _error(DataSpec(str(path), label="id", text_column="body"))
    assert "'id'" in msg and "120 classes in 120 rows" in msg
    frame = frame.drop(index=3)
    data = _load(DataSpec(str(_write(frame, tmp_path / "stars.csv")), label="stars",
                          text_column="body"))
    assert data.vocabulary.labels == ("1", "2", "3", "4", "5")


def test_a_text_task_refuses_the_label_as_text_and_unread_columns(tmp_path: Path) -> None:
    frame = pd.DataFrame({"body": ["a b", "c d"] * 30, "topic": ["x", "y", "z"] * 20,
                          "shop": [1, 2] * 30})
    path = _write(frame, tmp_path / "t.csv")
    # the label as its own text: every trial would read the answer
    msg = _error(DataSpec(str(path), label="topic", text_column="topic"))
    assert "t.csv" in msg and "'topic'" in msg and "is the label" in msg
    # categorical columns a text task never reads were dropped without a word
    msg = _error(DataSpec(str(path), label="topic", text_column="body", categorical=("shop",)))
    assert "t.csv" in msg and "text task" in msg and "(shop)" in msg


def test_too_few_rows(tmp_path: Path) -> None:
    frame = pd.DataFrame({"c": ["a", "b", "a"], "label": [0, 1, 0]})
    msg = _error(DataSpec(str(_write(frame, tmp_path / "tiny.csv"))))
    assert "tiny.csv" in msg and "3 rows" in msg


def test_a_named_row_id_or_constant_column_is_refused(tmp_path: Path) -> None:
    """A row id (a different value on every row) or a constant named categorical teaches its
    table nothing: refused in one line naming the column and the flag; one value with some
    cells missing is a present/missing feature and is kept."""
    frame = _frame()
    frame["const"] = "x"
    path = _write(frame, tmp_path / "ids.csv")
    msg = _error(DataSpec(str(path), categorical=("city", "row")))
    assert "'row'" in msg and f"each of its {N} rows" in msg and "--categorical" in msg
    msg = _error(DataSpec(str(path), categorical=("city", "const")))
    assert "'const'" in msg and "one value 'x' on every row" in msg and "--categorical" in msg
    sparse_id = np.full(N, np.nan)
    sparse_id[::10] = np.arange(N // 10)  # an id on every 10th row, the rest missing
    frame["coupon"], frame["promo"] = sparse_id, np.where(np.arange(N) % 3 == 0, "x", None)
    path = _write(frame, tmp_path / "sparse.csv")
    msg = _error(DataSpec(str(path), categorical=("city", "coupon")))
    assert "'coupon'" in msg and f"each of the {N // 10} rows that have one" in msg
    data = _load(DataSpec(str(path), categorical=("city", "promo")))
    feats, _ = _all(data, "train")
    present = frame["promo"].iloc[data.split_rows("train")].notna().to_numpy()
    assert feats["promo"][:, 0].tolist() == present.astype(int).tolist()  # 1 = 'x', 0 = OOV


def test_a_column_min_count_folds_whole_is_refused(tmp_path: Path) -> None:
    """min_count above every train count made a one-row table (all OOV), silently."""
    frame = _frame()
    frame["shop"] = [f"s{i // 2}" for i in range(N)]  # each value on 2 rows, at most 2 in train
    path = _write(frame, tmp_path / "fold.csv")
    msg = _error(DataSpec(str(path), categorical=("city", "shop"), min_count=3))
    assert "'shop'" in msg and "min_count=3" in msg and "keeps no value" in msg
    data = _load(DataSpec(str(path), categorical=("city", "shop"), min_count=2))
    train_counts = frame["shop"].iloc[data.split_rows("train")].value_counts()
    assert data.vocab_maps["shop"].size == 1 + int((train_counts >= 2).sum())


def test_auto_detection_leaves_out_constants_and_sparse_ids(tmp_path: Path) -> None:
    frame = _frame()
    frame["const"], frame["flag"] = "x", True
    coupon = np.full(N, None, dtype=object)
    coupon[::10] = [f"c{i}" for i in range(N // 10)]  # an id on every 10th row
    frame["coupon"] = coupon
    frame["empty"] = None
    frame["day"] = pd.Timestamp("2024-01-01") + pd.to_timedelta(np.arange(N) % 9, "D")
    path = _write(frame, tmp_path / "auto.csv")
    data = _load(DataSpec(str(path)))
    assert [t.name for t in data.tables] == ["city", "device", "tags", "day"]
    # each column left out says why; a search prints them on one line
    assert dict(data.unused) == {"row": "a different value on every row",
                                 "price": "numbers, not whole", "const": "one value",
                                 "flag": "one value", "coupon": "a different value on every row",
                                 "empty": "all missing"}
    note = unused_note(data)
    assert note is not None and "\n" not in note and "price (numbers, not whole)" in note
    assert unused_note(_load(DataSpec(str(path), categorical=("city",)))) is None  # named


def test_label_used_as_a_feature(tmp_path: Path) -> None:
    msg = _error(DataSpec(str(_write(_frame(), tmp_path / "l.csv")), categorical=("city", "label")))
    assert "l.csv" in msg and "'label'" in msg


def _ids(data: InMemoryDataset, column: str) -> np.ndarray:
    """Column `column`'s one-hot id on every row of the file, in file order."""
    ids = np.zeros(sum(data.num_rows(s) for s in ("train", "valid", "test")), dtype=np.int64)
    for split in ("train", "valid", "test"):
        feats, _ = _all(data, split)
        ids[data.split_rows(split)] = feats[column][:, 0]
    return ids


@pytest.mark.parametrize("multi", [False, True])
def test_one_hot_values_are_stripped_of_spaces_as_multi_hot_parts_are(tmp_path: Path,
                                                                      multi: bool) -> None:
    """' a' and 'a' were two ids in a one-hot column and one in a multi-hot column: a value
    is its text stripped, whichever kind the column is; a blank cell is missing (OOV)."""
    cells = ["a", " a", "a ", "b", " b", "c", "  "] * 20
    path = tmp_path / "spaced.csv"
    path.write_text("k,label\n" + "".join(f'"{c}",{i % 2}\n' for i, c in enumerate(cells)))
    spec = DataSpec(str(path), categorical=("k",), multi_hot=("k",) if multi else ())
    data = _load(spec)
    train = [cells[i].strip() for i in data.split_rows("train")]
    assert set(data.vocab_maps["k"].values) == {c for c in train if c}
    ids = _ids(data, "k")
    for value in ("a", "b", "c"):  # every spelling of a value has its one id
        assert len({int(ids[i]) for i, c in enumerate(cells) if c.strip() == value}) == 1
    assert {int(ids[i]) for i, c in enumerate(cells) if not c.strip()} == {0}


def test_codes_with_leading_zeros_are_distinct_in_any_column(tmp_path: Path) -> None:
    """A column of digits was read as numbers, so '007' and '7' were one id there and two in
    a column with a letter: a categorical value is its text, in any column, at train time
    and in a file encoded with the saved vocabulary; a blank or NA cell is missing."""
    codes = ["007", "7", "010", "10", "10.0", "", "NA"] * 30  # '10.0': the integer 10
    key = {"007": "007", "7": "7", "010": "010", "10": "10", "10.0": "10", "": "", "NA": ""}
    lines = [f"{c},{c if i % 3 else 'x'},{i % 2}" for i, c in enumerate(codes)]
    path = tmp_path / "zips.csv"
    path.write_text("zip,mixed,label\n" + "\n".join(lines) + "\n")
    for spec in (DataSpec(str(path), categorical=("zip", "mixed")), DataSpec(str(path))):
        data = _load(spec)
        assert set(data.vocab_maps["zip"].values) == {"007", "7", "010", "10"}
        for column in ("zip", "mixed"):  # each row's id is the id of its code's key
            values = ("", *data.vocab_maps[column].values)
            got = [values[i] for i in _ids(data, column)]
            want = [key[c] if column == "zip" or i % 3 else "x" for i, c in enumerate(codes)]
            assert got == want
    data.save_vocab(tmp_path / "v")
    serve = tmp_path / "serve.csv"  # codes with leading zeros only: read as 7 and 10 before
    serve.write_text("zip,mixed,label\n" + "007,007,0\n010,010,1\n" * 10)
    again = _load(DataSpec(str(serve), categorical=("zip", "mixed")), tmp_path / "v")
    zip_map = data.vocab_maps["zip"]
    want = [zip_map.values.index(c) + 1 for c in ("007", "010") * 10]
    assert _ids(again, "zip").tolist() == want


def test_a_vocabulary_keyed_by_the_earlier_rule_is_refused_for_a_file(tmp_path: Path) -> None:
    """A vocab.json saved before the keys rule was recorded keyed a column of digits as
    numbers ('007' as '7'): encoding a file with it now would give rows ids its model never
    saw, so it is refused in one line; one saved now records the rule and loads again."""
    frame = pd.DataFrame({"zip": ["007", "7", "010"] * 20, "label": [0, 1] * 30})
    spec = DataSpec(str(_write(frame, tmp_path / "z.csv")), categorical=("zip",))
    saved = _load(spec).save_vocab(tmp_path / "v")
    raw = json.loads(saved.read_text())
    assert raw["keys"] == 2
    _load(spec, tmp_path / "v")
    del raw["keys"]
    saved.write_text(json.dumps(raw))
    msg = _error(spec, tmp_path / "v")
    assert "z.csv" in msg and "earlier rule" in msg and "leave the vocabulary out" in msg


def test_a_saved_map_looks_a_raw_cell_up_as_training_keyed_it(tmp_path: Path) -> None:
    """Serving looks raw cells up in vocab.json's maps: id_of(' a') and id_of(7) were OOV
    (exact string keys only) where training had keyed ' a' as 'a' and '7.0' as '7'."""
    cells = ["a", " a", "7", "7.0", " 007", "b"] * 20
    path = tmp_path / "raw.csv"
    path.write_text("k,label\n" + "".join(f'"{c}",{i % 2}\n' for i, c in enumerate(cells)))
    data = _load(DataSpec(str(path), categorical=("k",)))
    ids = _ids(data, "k")
    saved = load_vocab(data.save_vocab(tmp_path / "v")).maps["k"]
    assert [saved.id_of(c) for c in cells] == ids.tolist()
    assert saved.encode(pd.Series(cells)).tolist() == ids.tolist()
    seven = saved.values.index("7") + 1  # a serving system's typed 7s are the key '7'
    assert saved.id_of(7) == saved.id_of(7.0) == saved.id_of(np.int64(7)) == seven
    assert saved.id_of("atlantis") == saved.id_of(None) == 0


def test_rows_with_a_field_more_than_the_header_are_refused(tmp_path: Path) -> None:
    """pandas takes the first field of such rows as the index: every column shifted by one
    ('zip' read the next field's values) and the first field was dropped, silently."""
    path = tmp_path / "shifted.csv"
    path.write_text("zip,label\n" + "".join(f"{'007' if i % 3 else '10'},x{i % 4},{i % 2}\n"
                                            for i in range(60)))
    msg = _error(DataSpec(str(path), categorical=("zip",)))
    assert "shifted.csv" in msg and "more fields than the 2 names of its header" in msg


def test_a_utf16_file_with_a_sep_line_is_read_by_it(tmp_path: Path) -> None:
    """The first line of a UTF-16 file was read up to its first byte 0x0a, which cuts the
    two-byte '\\n' in half: its 'sep=;' line was not seen, and the file read as one column."""
    path = tmp_path / "u16.csv"
    rows = "".join(f"{'007' if i % 3 else '7'};{i % 2}\r\n" for i in range(60))
    path.write_bytes(("sep=;\r\nzip;label\r\n" + rows).encode("utf-16"))
    data = _load(DataSpec(str(path), categorical=("zip",)))
    assert set(data.vocab_maps["zip"].values) == {"007", "7"}


def test_a_saved_vocabulary_names_the_columns_of_a_file_it_encodes(tmp_path: Path) -> None:
    """Columns auto-detected at train time were detected again in the file a saved
    vocabulary encodes: a column constant there ('device' of one shop) was left out, and the
    data had one table fewer than the model, silently."""
    train = _frame()
    data = _load(DataSpec(str(_write(train, tmp_path / "train.csv")), multi_hot=("tags",)))
    data.save_vocab(tmp_path / "v")
    names = [t.name for t in data.tables]
    assert names == ["city", "device", "tags"]
    serve = pd.DataFrame({"city": ["rome", "paris"] * 10, "device": [3] * 20,
                          "tags": ["a|b", "c"] * 10, "label": [0, 1] * 10})
    again = _load(DataSpec(str(_write(serve, tmp_path / "serve.csv"))), tmp_path / "v")
    assert [t.name for t in again.tables] == names
    device = data.vocab_maps["device"]
    assert set(_ids(again, "device").tolist()) == {device.values.index("3") + 1}


def test_a_saved_vocabulary_of_bags_refuses_another_separator(tmp_path: Path) -> None:
    """Bags split on ';' at train time were split on the default '|' when the saved
    vocabulary encoded a file read with a spec that did not repeat it: 'a;b' became one
    unseen key, the OOV id, on every row, silently."""
    frame = pd.DataFrame({"tags": ["a;b", "b", "c;a"] * 20, "label": [0, 1] * 30})
    path = _write(frame, tmp_path / "bags.csv")
    data = _load(DataSpec(str(path), multi_hot=("tags",), separator=";"))
    data.save_vocab(tmp_path / "v")
    msg = _error(DataSpec(str(path), categorical=("tags",)), tmp_path / "v")
    assert "bags of tags" in msg and "on ';'" in msg and "separator=';'" in msg
    again = _load(DataSpec(str(path), separator=";"), tmp_path / "v")
    assert np.array_equal(_all(again, "train")[0]["tags"], _all(data, "train")[0]["tags"])


def test_a_saved_vocabulary_encodes_a_column_with_no_value_as_oov(tmp_path: Path) -> None:
    """A missing cell is the OOV id at train time, but a file whose column had no value at
    all was refused when a saved vocabulary encoded it ('fill it or leave it out': leaving
    a field of the model out is no fix)."""
    frame = pd.DataFrame({"city": ["rome", "oslo"] * 20, "shop": ["s1", "s2", "s3", "s1"] * 10,
                          "label": [0, 1] * 20})
    data = _load(DataSpec(str(_write(frame, tmp_path / "train.csv"))))
    data.save_vocab(tmp_path / "v")
    frame["shop"] = None
    again = _load(DataSpec(str(_write(frame, tmp_path / "serve.csv"))), tmp_path / "v")
    assert set(_ids(again, "shop").tolist()) == {0}
    assert _ids(again, "city").tolist() == _ids(data, "city").tolist()
