"""The built-in baselines against scikit-learn run directly on the raw table of the same split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autoembed.baselines import C_GRID, MAX_COLUMNS, Baseline, fit_baseline
from autoembed.data import DataSpec, load_dataset
from autoembed.errors import ConfigError

WORDS = [f"w{i}" for i in range(60)]


def _ctr_frame(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    user = rng.integers(0, 150, n)
    item = rng.integers(0, 40, n)
    tags = ["|".join(f"t{t}" for t in rng.choice(8, rng.integers(1, 4), replace=False))
            for _ in range(n)]
    logit = 1.5 * np.sin(user) + 0.8 * np.cos(item) - 0.2 + np.array(
        [0.7 * ("t1" in t) for t in tags])
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    return pd.DataFrame({"user": user.astype(str), "item": item.astype(str), "tags": tags,
                         "y": label})


def _text_frame(n: int = 900, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    docs = []
    for c in labels:
        length = int(rng.integers(5, 30))
        # class c favours words 20c..20c+19 a little; the rest is shared noise
        own = rng.integers(20 * c, 20 * c + 20, length // 3)
        noise = rng.integers(0, 60, length - length // 3)
        rare = [f"r{rng.integers(10**6)}" for _ in range(3)]  # mostly unseen in train: OOV
        docs.append(" ".join([*(WORDS[w] for w in np.concatenate([own, noise])), *rare]))
    return pd.DataFrame({"text": docs, "label": [f"c{c}" for c in labels]})


def _sklearn_choose(xs: dict[str, object], ys: dict[str, np.ndarray], metric: str) -> tuple:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, roc_auc_score

    def score(m: LogisticRegression, split: str) -> float:
        if metric == "auc":
            return float(roc_auc_score(ys[split], m.decision_function(xs[split])))
        return float(accuracy_score(ys[split], m.predict(xs[split])))

    fitted = [(c, LogisticRegression(C=c, max_iter=2000).fit(xs["train"], ys["train"]))
              for c in C_GRID]
    valid = [score(m, "valid") for _, m in fitted]
    i = int(np.argmax(valid))  # first maximum: the smallest C on ties
    return fitted[i][0], valid[i], score(fitted[i][1], "test")


def test_ctr_baseline_matches_sklearn_on_the_raw_columns(tmp_path: Path) -> None:
    from scipy.sparse import hstack
    from sklearn.preprocessing import MultiLabelBinarizer, OneHotEncoder

    frame = _ctr_frame()
    path = tmp_path / "clicks.csv"
    frame.to_csv(path, index=False)
    data = load_dataset(DataSpec(str(path), label="y", categorical=("user", "item"),
                                 multi_hot=("tags",)))
    got = fit_baseline(data)

    rows = {s: data.split_rows(s) for s in ("train", "valid", "test")}
    part = {s: frame.iloc[r] for s, r in rows.items()}
    onehot = OneHotEncoder(handle_unknown="ignore").fit(part["train"][["user", "item"]])
    bags = MultiLabelBinarizer().fit(part["train"]["tags"].str.split("|"))
    xs = {s: hstack([onehot.transform(p[["user", "item"]]),
                     bags.transform(p["tags"].str.split("|"))]).tocsr()
          for s, p in part.items()}
    ys = {s: p["y"].to_numpy() for s, p in part.items()}
    c, valid, test = _sklearn_choose(xs, ys, "auc")

    assert got.metric == "auc" and got.name.startswith("logistic regression")
    assert got.c == c
    assert got.valid == pytest.approx(valid, abs=2e-4)
    assert got.test == pytest.approx(test, abs=2e-4)
    assert got.test > 0.62  # it learned the planted effects
    assert got.seconds > 0


def test_text_baseline_matches_tfidf_vectorizer(tmp_path: Path) -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    frame = _text_frame()
    path = tmp_path / "docs.csv"
    frame.to_csv(path, index=False)
    data = load_dataset(DataSpec(str(path), label="label", text_column="text"))
    got = fit_baseline(data)

    part = {s: frame.iloc[data.split_rows(s)] for s in ("train", "valid", "test")}
    vec = TfidfVectorizer(token_pattern=r"[a-z0-9]+(?:'[a-z]+)*").fit(part["train"]["text"])
    xs = {s: vec.transform(p["text"]) for s, p in part.items()}
    classes = sorted(set(frame["label"]))
    ys = {s: p["label"].map(classes.index).to_numpy() for s, p in part.items()}
    c, valid, test = _sklearn_choose(xs, ys, "accuracy")

    assert got.metric == "accuracy" and got.name.startswith("TF-IDF")
    assert (got.c, got.valid, got.test) == (c, pytest.approx(valid), pytest.approx(test))
    assert got.test > 0.5  # three classes: chance is about 1/3


def test_refusals(tmp_path: Path) -> None:
    frame = _ctr_frame(400)
    path = tmp_path / "small.csv"
    frame.to_csv(path, index=False)
    data = load_dataset(DataSpec(str(path), label="y", categorical=("user", "item")))
    with pytest.raises(ConfigError, match="C grid"):
        fit_baseline(data, c_grid=(0.0,))
    big = load_dataset(DataSpec("synthetic-ctr", vocab_sizes=(MAX_COLUMNS, 10),
                                rows=(50, 10, 10)))
    with pytest.raises(ConfigError, match="columns"):
        fit_baseline(big)


def test_the_fits_run_on_one_blas_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BLAS threads waiting for a busy core made the baseline 5-15x slower: one thread."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_info

    seen: list[dict[str, int]] = []
    real = LogisticRegression.fit

    def fit(self: LogisticRegression, *args: object, **kw: object) -> LogisticRegression:
        seen.append({p["filepath"]: p["num_threads"] for p in threadpool_info()})
        return real(self, *args, **kw)

    monkeypatch.setattr(LogisticRegression, "fit", fit)
    frame = _ctr_frame(600)
    path = tmp_path / "small.csv"
    frame.to_csv(path, index=False)
    fit_baseline(load_dataset(DataSpec(str(path), label="y", categorical=("user", "item"))))
    assert len(seen) == len(C_GRID) and all(seen)
    assert all(n == 1 for threads in seen for n in threads.values())


def test_binary_label_names_its_positive_class(tmp_path: Path) -> None:
    """A CSV label of yes/no: the baseline's line says which value AUC ranks as positive
    (it used to be said only in vocab.json). Checked against the file: the rows labelled 1
    are exactly as many as its 'yes' rows (a minority here, so the other mapping differs)."""
    from autoembed.baselines import positive_class

    rng = np.random.default_rng(0)
    n = 800
    user = rng.integers(0, 30, n)
    clicked = np.where(rng.random(n) < 0.1 + 0.3 * (user % 2), "yes", "no")
    path = tmp_path / "clicks.csv"
    pd.DataFrame({"user": user.astype(str), "clicked": clicked}).to_csv(path, index=False)
    ds = load_dataset(DataSpec(name=str(path), label="clicked", categorical=("user",)))
    ones = sum(float(b.labels.sum()) for split in ("train", "valid", "test")
               for b in ds.batches(split, 256, shuffle=False))
    assert ones == (clicked == "yes").sum() < n / 2
    assert positive_class(ds) == "clicked = 'yes'"
    base = fit_baseline(ds)
    assert base.positive == "clicked = 'yes'"
    assert "positive class clicked = 'yes'" in base.describe()
    assert Baseline.from_dict(base.to_dict()) == base
    old = {k: v for k, v in base.to_dict().items() if k != "positive"}  # a study stored before
    assert Baseline.from_dict(old).positive is None
