"""How a search tells trials apart on validation: the noise of a validation figure (paired
between two trials on the same rows, or one trial's alone), the best evaluation of a curve
and the steps to a target, and a training length suited to the data's size. Pure, except
`label_counts`, which reads a `Dataset`'s labels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from autoembed.errors import ConfigError
from autoembed.pareto import quality_noise
from autoembed.rules import Integer

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from autoembed.data.dataset import Dataset

__all__ = ["label_counts", "measure_noise", "NoiseMeasure",
           "PairedGap", "ValidScores", "PAIRED_Z", "paired_auc", "paired_accuracy", "paired_gap",
           "Point", "BestStep", "best_evaluation", "to_target", "TrainingLength",
           "training_length", "TARGET_SAMPLES", "MAX_EPOCHS"]

# Training length (`training_length`): a trial sees about TARGET_SAMPLES samples (where the
# real data's validation AUC levels off), in whole epochs when the train split is smaller
# (at most MAX_EPOCHS of them).
TARGET_SAMPLES = 600_000
MAX_EPOCHS = 20
WARMUP_STEPS = 3

_READ_BATCH = 8192  # rows per batch when reading labels


def label_counts(dataset: Dataset, split: str, rows: int | None = None) -> tuple[int, ...]:
    """Rows per class (ctr: negatives, positives) among a split's first `rows` rows in
    unshuffled order (None: all): the rows a validation evaluation of `eval_batches` x
    `batch_size` rows reads."""
    import numpy as np

    counts = np.zeros(dataset.num_classes, dtype=np.int64)
    seen = 0
    for b in dataset.batches(split, _READ_BATCH, shuffle=False):
        y = b.labels.numpy().astype(np.int64)
        if rows is not None:
            y = y[: max(rows - seen, 0)]
        counts += np.bincount(y, minlength=dataset.num_classes)[: dataset.num_classes]
        seen += y.size
        if rows is not None and seen >= rows:
            break
    return tuple(int(c) for c in counts)


# within-noise, paired: near the best within PAIRED_Z standard errors of the best's lead
PAIRED_Z = 1.0


@dataclass(frozen=True)
class ValidScores:
    """One trial's validation predictions at the evaluation its quality is of, on the rows
    that evaluation read (the split's first rows, unshuffled): `scores` the ctr logits
    (float32) or the predicted class (text), and the rows' `labels`. The runner makes them;
    the final report carries them to the driver, which uses them for the within-noise pick
    and stores them with the trial (`pack`: the study's storage), so that a resumed search
    picks by the same paired rule."""

    scores: npt.NDArray[Any]
    labels: npt.NDArray[Any]

    @classmethod
    def of(cls, task: str, logits: Any, labels: Any) -> ValidScores:
        """From an evaluation's logits (rows x 1 for ctr, rows x classes for text)."""
        import numpy as np

        z = np.asarray(logits)
        y = np.asarray(labels).astype(np.int64)
        if task == "ctr":
            return cls(z.reshape(-1).astype(np.float32), y.astype(np.int8))
        return cls(_small_int(z.argmax(axis=1)), _small_int(y))

    @property
    def rows(self) -> int:
        return int(self.labels.size)

    def pack(self) -> str:
        """Compact text for a trial's report and the study's storage (`unpack` reads it):
        float scores (ctr logits) as their dense ranks (uint16, or uint32 past 65,535
        values: all the paired AUC reads), class predictions and labels as they are; zlib,
        then base85. About 2 bytes a row for ctr."""
        import base64
        import json
        import zlib

        import numpy as np

        scores = self.scores
        if scores.dtype.kind == "f":
            _, ranks = np.unique(scores, return_inverse=True)
            scores = ranks.astype(np.uint16 if ranks.size == 0 or ranks.max() < 2**16
                                  else np.uint32)
        s, y = (a.astype(a.dtype.newbyteorder("<")) for a in (scores, self.labels))
        body = zlib.compress(s.tobytes() + y.tobytes(), 9)
        return json.dumps({"scores": s.dtype.str, "labels": y.dtype.str, "rows": int(y.size),
                           "z": base64.b85encode(body).decode("ascii")}, separators=(",", ":"))

    @classmethod
    def unpack(cls, text: Any) -> ValidScores | None:
        """The inverse of `pack` (float scores come back as their ranks); None for anything
        else (a report without scores)."""
        import base64
        import json
        import zlib

        import numpy as np

        try:
            head = json.loads(text)
            body = zlib.decompress(base64.b85decode(head["z"]))
            s_type, y_type = np.dtype(head["scores"]), np.dtype(head["labels"])
            rows = int(head["rows"])
            cut = rows * s_type.itemsize
            s = np.frombuffer(body[:cut], dtype=s_type)
            y = np.frombuffer(body[cut:], dtype=y_type)
        except (TypeError, KeyError, ValueError, zlib.error):
            return None
        return cls(s, y) if s.size == y.size == rows else None


def _small_int(a: Any) -> npt.NDArray[Any]:
    import numpy as np

    return a.astype(np.int16 if a.size == 0 or int(np.abs(a).max()) < 2**15 else np.int32)


def midranks(x: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """1-based ranks of `x`, ties given the mean of their ranks."""
    import numpy as np

    order = np.argsort(x, kind="mergesort")
    _, first, counts = np.unique(x[order], return_index=True, return_counts=True)
    out = np.empty(x.size, dtype=np.float64)
    out[order] = np.repeat(first + (counts + 1) / 2.0, counts)
    return out


def paired_auc(
    a: npt.NDArray[Any], b: npt.NDArray[Any], labels: npt.NDArray[Any]
) -> tuple[float, float, float]:
    """(AUC of `a`, AUC of `b`, standard error of AUC(a) - AUC(b)) on the same rows: DeLong,
    DeLong & Clarke-Pearson (Biometrics 44, 1988), the covariance of the two AUCs from their
    structural components (midranks, Sun & Xu 2014). ConfigError without both classes."""
    import numpy as np

    y = np.asarray(labels) > 0
    m, n = int(y.sum()), int((~y).sum())
    if m < 1 or n < 1:
        raise ConfigError(f"paired AUC needs both classes; got {m} positive and {n} negative "
                          "rows")
    v10, v01 = [], []
    for s in (a, b):
        s = np.asarray(s, dtype=np.float64)
        x, z = s[y], s[~y]
        tz = midranks(np.concatenate([x, z]))
        v10.append((tz[:m] - midranks(x)) / n)  # per positive: share of negatives below
        v01.append(1.0 - (tz[m:] - midranks(z)) / m)  # per negative: share of positives above
    var = 0.0
    for comps, size in ((v10, m), (v01, n)):
        if size > 1:
            d = comps[0] - comps[1]
            var += float(np.var(d, ddof=1)) / size
    return float(v10[0].mean()), float(v10[1].mean()), math.sqrt(max(var, 0.0))


def paired_accuracy(
    correct_a: npt.NDArray[Any], correct_b: npt.NDArray[Any]
) -> tuple[float, float]:
    """(accuracy(a) - accuracy(b), its standard error) on the same rows, from the discordant
    rows as McNemar's test counts them: with r rows right for a only and w right for b
    only of n, the gap is (r - w)/n and its SE sqrt(r + w - (r - w)^2/n)/n."""
    import numpy as np

    ca, cb = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    n = int(ca.size)
    if n < 1 or cb.size != n:
        raise ConfigError(f"paired accuracy needs the same rows >= 1; got {ca.size} and "
                          f"{cb.size}")
    r, w = int((ca & ~cb).sum()), int((cb & ~ca).sum())
    return (r - w) / n, math.sqrt(max(r + w - (r - w) ** 2 / n, 0.0)) / n


@dataclass(frozen=True)
class PairedGap:
    """The best trial's lead over `trial` on the `rows` validation rows both evaluations
    read, its paired standard error `se`, and whether it is within PAIRED_Z of them."""

    trial: int
    gap: float
    se: float
    rows: int

    @property
    def within(self) -> bool:
        return self.gap <= PAIRED_Z * self.se

    def to_dict(self) -> dict[str, Any]:
        return {"trial": self.trial, "gap": self.gap, "se": self.se, "rows": self.rows,
                "within": self.within}


def paired_gap(metric: str, best: ValidScores, other: ValidScores,
               trial: int) -> PairedGap | None:
    """`best`'s lead over `other` (trial `trial`) on the validation rows both read (the
    split's first rows: the shorter read's); None when their labels there differ (not the
    same rows) or the rows cannot measure `metric` (AUC: one class only)."""
    import numpy as np

    n = min(best.rows, other.rows)
    if n < 1 or not np.array_equal(best.labels[:n], other.labels[:n]):
        return None
    y = best.labels[:n]
    if metric == "auc":
        try:
            qa, qb, se = paired_auc(best.scores[:n], other.scores[:n], y)
        except ConfigError:
            return None
        return PairedGap(trial, qa - qb, se, n)
    gap, se = paired_accuracy(best.scores[:n] == y, other.scores[:n] == y)
    return PairedGap(trial, gap, se, n)


@dataclass(frozen=True)
class NoiseMeasure:
    """The `within-noise` slack and how it was measured. Paired (`paired`: a `PairedGap`
    for every other candidate): near the best when the best's lead over it on the rows both
    read is at most PAIRED_Z paired standard errors (`PAIRED_METHOD`). Unpaired (a
    candidate's scores missing: `unpaired_reason`): `slack`, one standard error of the best
    validation `quality` from the `class_rows` among the first `rows` rows (`METHOD`)."""

    slack: float
    metric: str
    quality: float
    trial: int | None
    rows: int
    class_rows: tuple[int, ...]
    paired: tuple[PairedGap, ...] = ()
    unpaired_reason: str | None = None

    METHOD = ("one standard error of the best validation quality on the validation rows "
              "its evaluation read (AUC: Hanley-McNeil; accuracy: binomial)")
    PAIRED_METHOD = (f"paired: a candidate is within noise when the best's lead over it on "
                     f"the validation rows both read is at most {PAIRED_Z:g} standard error "
                     f"of that lead (AUC: DeLong; accuracy: McNemar's discordant rows)")

    @property
    def method(self) -> str:
        return self.PAIRED_METHOD if self.paired else self.METHOD

    def pick_noise(self, qualities: Mapping[int, float]) -> float | dict[int, float]:
        """What `pareto.pick` reads: the unpaired slack, or each candidate's own slack
        (by trial number; `qualities`: the candidates' recorded validation qualities),
        chosen so that the recorded comparison is the paired test on the shared rows."""
        if not self.paired:
            return self.slack
        out = {g.trial: PAIRED_Z * g.se + (self.quality - qualities[g.trial]) - g.gap
               for g in self.paired if g.trial in qualities}
        if self.trial is not None:
            out[self.trial] = 0.0
        return out

    @property
    def floor_noise(self) -> float:
        """What `pareto.pick` reads as `floor_noise`: how far a cheaper member must clear
        the floor (the target, a fixed number, not paired with any trial's predictions):
        one unpaired standard error, `slack`."""
        return self.slack

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> NoiseMeasure:
        """The inverse of `to_dict` (pareto.json's `noise`; older files have no pairs)."""
        trial = raw.get("trial")
        return cls(float(raw["slack"]), str(raw["metric"]), float(raw["quality"]),
                   None if trial is None else int(trial), int(raw.get("rows") or 0),
                   tuple(int(c) for c in raw.get("class_rows") or ()),
                   tuple(PairedGap(int(g["trial"]), float(g["gap"]), float(g["se"]),
                                   int(g["rows"])) for g in raw.get("paired") or ()),
                   raw.get("unpaired_reason"))

    def to_dict(self) -> dict[str, Any]:
        return {"slack": self.slack, "metric": self.metric, "quality": self.quality,
                "trial": self.trial, "rows": self.rows, "class_rows": list(self.class_rows),
                "method": self.method, "kind": "paired" if self.paired else "unpaired",
                "z": PAIRED_Z if self.paired else 1.0,
                "paired": [g.to_dict() for g in self.paired],
                "unpaired_reason": self.unpaired_reason}

    def describe(self) -> str:
        """One line for the terminal."""
        if self.paired:
            near = [g.trial for g in self.paired if g.within]
            return (f"within-noise, paired on validation rows ({self.metric}): "
                    f"{len(near)} of {len(self.paired)} other members within "
                    f"{PAIRED_Z:g} SE of trial {self.trial}'s {self.quality:.4f}"
                    + (f" (trials {', '.join(map(str, near))})" if near else ""))
        why = f" ({self.unpaired_reason})" if self.unpaired_reason else ""
        return (f"within-noise slack {self.slack:.4f} {self.metric}: one standard error of "
                f"trial {self.trial}'s validation {self.quality:.4f} on {self.rows:,} "
                f"rows{why}")


def measure_noise(candidates: Sequence[Any], dataset: Dataset | None, eval_batches: int | None,
                  scores: Mapping[int, ValidScores] | None = None) -> NoiseMeasure | None:
    """The within-noise measure of `candidates` (rows with `number`, `values["quality"]` and
    `config.batch_size`): paired where `scores` (by trial number) holds every candidate's,
    else the unpaired slack (one standard error of the best quality on the rows its
    evaluation read: `eval_batches` batches of its batch size, None the whole split), with
    the reason; None when there is nothing to measure it on (no dataset, no quality, or a
    split without both classes)."""
    scored = [c for c in candidates if _finite(c.values.get("quality"))]
    if dataset is None or not scored:
        return None
    best = max(scored, key=lambda c: float(c.values["quality"]))
    rows = None if eval_batches is None else eval_batches * int(best.config.batch_size)
    metric = "auc" if dataset.task == "ctr" else "accuracy"
    quality = float(best.values["quality"])
    counts = label_counts(dataset, "valid", rows)
    try:
        slack = quality_noise(metric, quality, counts)
    except ConfigError:
        return None
    gaps, why = _paired_gaps(metric, best, scored, scores or {})
    return NoiseMeasure(slack, metric, quality, getattr(best, "number", None), sum(counts),
                        counts, gaps, why)


def _paired_gaps(metric: str, best: Any, scored: Sequence[Any],
                 scores: Mapping[int, ValidScores]) -> tuple[tuple[PairedGap, ...], str | None]:
    """Every other candidate's PairedGap, or () and why not."""
    missing = [c.number for c in scored if c.number not in scores]
    if missing:
        return (), (f"no validation scores for trial(s) {', '.join(map(str, missing[:5]))}"
                    " (a study stored before scores were kept with each trial, or a user-model "
                    "search)")
    if len(scored) == 1:
        return (), "a single candidate"
    gaps = []
    for c in scored:
        if c.number == best.number:
            continue
        g = paired_gap(metric, scores[best.number], scores[c.number], c.number)
        if g is None:
            return (), f"trials {best.number} and {c.number} share no measurable rows"
        gaps.append(g)
    return tuple(gaps), None


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and v == v and abs(v) != float("inf")


class Point(Protocol):
    """One validation evaluation of a training curve (runner.Evaluation satisfies it)."""

    @property
    def step(self) -> int: ...

    @property
    def samples(self) -> int: ...

    @property
    def quality(self) -> float: ...


@dataclass(frozen=True)
class BestStep:
    """The evaluation a trial is judged by: its validation quality, step and samples."""

    quality: float
    step: int
    samples: int


def best_evaluation(curve: Sequence[Point]) -> BestStep | None:
    """The best validation evaluation of a curve: highest quality, the earliest step on
    ties (fewer steps reproduce it); NaN evaluations never win. None: no finite one."""
    best: Point | None = None
    for p in curve:
        q = float(p.quality)
        if not math.isfinite(q):
            continue
        if best is None or q > best.quality or (q == best.quality and p.step < best.step):
            best = p
    return None if best is None else BestStep(float(best.quality), int(best.step),
                                              int(best.samples))


def to_target(curve: Sequence[Point], target: float | None) -> tuple[int, int] | None:
    """(steps, samples) of the first evaluation whose quality reaches `target` (on real data
    the baseline's validation score), in step order; None when none does or no target."""
    if target is None or not math.isfinite(target):
        return None
    for p in sorted(curve, key=lambda p: p.step):
        if math.isfinite(float(p.quality)) and p.quality >= target:
            return int(p.step), int(p.samples)
    return None


@dataclass(frozen=True)
class TrainingLength:
    """How long a trial trains: whole `epochs`, or `max_steps` at the reference batch when
    one epoch is more than the target; `eval_every` steps between evaluations; `samples` it
    trains on at the reference batch (each epoch's last short batch dropped, as in the runner)."""

    epochs: int | None
    max_steps: int | None
    eval_every: int
    samples: int
    batch_size: int

    @property
    def steps(self) -> int:
        """Optimizer steps at the reference batch."""
        return self.samples // self.batch_size

    def run_settings(self, eval_batches: int) -> dict[str, Any]:
        """The space file's `run` mapping (RUN_KEYS of autoembed.space)."""
        run: dict[str, Any] = {"eval_every": self.eval_every, "eval_batches": eval_batches,
                               "warmup_steps": WARMUP_STEPS}
        if self.epochs is not None:
            run["epochs"] = self.epochs
        else:
            run["max_steps"] = self.max_steps
        return run

    def describe(self) -> str:
        how = f"{self.epochs} epochs" if self.epochs is not None else f"{self.max_steps} steps"
        return f"{how} ({self.samples:,} samples at batch {self.batch_size})"


def training_length(train_rows: int, batch_size: int, evals: int = 8) -> TrainingLength:
    """A training length suited to `train_rows` (TARGET_SAMPLES above), with about `evals`
    validation evaluations at `batch_size`."""
    for name, v in (("train_rows", train_rows), ("batch_size", batch_size), ("evals", evals)):
        Integer(1).check_argument(name, v)
    if train_rows <= TARGET_SAMPLES:
        epochs = min(MAX_EPOCHS, math.ceil(TARGET_SAMPLES / train_rows))
        steps = epochs * (train_rows // batch_size)  # the runner drops each epoch's last
        return TrainingLength(epochs, None, max(1, steps // evals), steps * batch_size,
                              batch_size)
    steps = math.ceil(TARGET_SAMPLES / batch_size)
    return TrainingLength(None, steps, max(1, steps // evals), steps * batch_size, batch_size)
