"""Pareto maths against independent brute force: the front, the hypervolume, the picks."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoembed.errors import ConfigError
from autoembed.pareto import (
    DEFAULT_PICK,
    PICK_RULES,
    accuracy_standard_error,
    auc_standard_error,
    dominates,
    hypervolume,
    non_dominated,
    normalise,
    parse_pick,
    pick,
    quality_noise,
)


def brute_front(points: list[list[float]], directions: list[str]) -> list[int]:
    """Point i is on the front iff no j is >= on all (after flipping to maximisation) and
    > on one. Written independently of autoembed.pareto."""
    flip = [1.0 if d == "maximize" else -1.0 for d in directions]
    g = [[f * v for f, v in zip(flip, p, strict=True)] for p in points]
    out = []
    for i, a in enumerate(g):
        beaten = False
        for j, b in enumerate(g):
            if j != i and all(y >= x for x, y in zip(a, b, strict=True)) and any(
                    y > x for x, y in zip(a, b, strict=True)):
                beaten = True
        if not beaten:
            out.append(i)
    return out


def brute_hv(points: list[list[float]], ref: list[float], directions: list[str]) -> float:
    """Inclusion-exclusion over subsets of the (minimisation) boxes [p, ref]."""
    flip = [-1.0 if d == "maximize" else 1.0 for d in directions]
    pts = [[f * v for f, v in zip(flip, p, strict=True)] for p in points]
    r = [f * v for f, v in zip(flip, ref, strict=True)]
    pts = [p for p in pts if all(x < y for x, y in zip(p, r, strict=True))]
    total = 0.0
    for k in range(1, len(pts) + 1):
        for sub in itertools.combinations(pts, k):
            corner = [max(p[d] for p in sub) for d in range(len(r))]
            vol = math.prod(max(0.0, r[d] - corner[d]) for d in range(len(r)))
            total += (-1) ** (k + 1) * vol
    return total


values = st.integers(min_value=0, max_value=6).map(float)  # small range: many ties


@st.composite
def point_sets(draw: st.DrawFn, max_points: int = 14) -> tuple[list[list[float]], list[str]]:
    k = draw(st.integers(min_value=1, max_value=4))
    directions = draw(st.lists(st.sampled_from(["maximize", "minimize"]), min_size=k,
                               max_size=k))
    pts = draw(st.lists(st.lists(values, min_size=k, max_size=k), min_size=0,
                        max_size=max_points))
    return pts, directions


@settings(deadline=None, max_examples=200)
@given(point_sets())
def test_front_equals_brute_force(data: tuple[list[list[float]], list[str]]) -> None:
    pts, dirs = data
    assert non_dominated(pts, dirs) == brute_front(pts, dirs)


@settings(deadline=None, max_examples=80)
@given(point_sets(max_points=6))
def test_hypervolume_equals_inclusion_exclusion(
        data: tuple[list[list[float]], list[str]]) -> None:
    pts, dirs = data
    ref = [-1.0 if d == "maximize" else 7.0 for d in dirs]  # worse than every value
    assert hypervolume(pts, ref, dirs) == pytest.approx(brute_hv(pts, ref, dirs), abs=1e-9)


def test_hypervolume_hand_computed() -> None:
    # maximise quality, minimise memory; reference (0, 10)
    dirs = ["maximize", "minimize"]
    assert hypervolume([[0.5, 4.0]], [0.0, 10.0], dirs) == pytest.approx(0.5 * 6)
    # two boxes: 0.5x6 and 0.8x2, overlapping 0.5x2 -> 3 + 1.6 - 1.0
    assert hypervolume([[0.5, 4.0], [0.8, 8.0]], [0.0, 10.0], dirs) == pytest.approx(3.6)
    # a point not better than the reference on every objective adds nothing
    assert hypervolume([[0.5, 12.0]], [0.0, 10.0], dirs) == 0.0


def test_dominates_needs_one_strict_improvement() -> None:
    d = ["maximize", "minimize"]
    assert dominates([1, 1], [0, 1], d)
    assert not dominates([1, 1], [1, 1], d)  # equal points do not dominate
    assert not dominates([1, 2], [0, 1], d)  # better quality, worse memory
    with pytest.raises(ValueError):
        non_dominated([[1.0, math.nan]], d)


def test_normalise_best_is_one() -> None:
    out = normalise([[0.7, 100.0], [0.9, 300.0], [0.8, 300.0]], ["maximize", "minimize"])
    assert out == [[0.0, 1.0], [1.0, 0.0], [pytest.approx(0.5), 0.0]]


@dataclass(frozen=True)
class C:
    number: int
    values: dict[str, float] = field(default_factory=dict)


OBJ = [("quality", "maximize"), ("memory", "minimize"), ("throughput", "maximize")]
FRONT = [
    C(3, {"quality": 0.90, "memory": 8.0, "throughput": 100.0}),
    C(5, {"quality": 0.80, "memory": 2.0, "throughput": 300.0}),
    C(7, {"quality": 0.86, "memory": 4.0, "throughput": 250.0}),
    C(9, {"quality": 0.70, "memory": 1.0, "throughput": 200.0}),
]


def test_a_one_metric_rule_nothing_measured_is_refused_not_picked_by_the_next() -> None:
    """A loop of the user's that never calls report measures no throughput: max-throughput
    picked the best on the next objective (quality: trial 3) as if it ranked throughput."""
    front = [C(c.number, {k: v for k, v in c.values.items() if k != "throughput"})
             for c in FRONT]
    with pytest.raises(ConfigError) as e:
        pick(front, "max-throughput", OBJ)
    msg = str(e.value)
    assert msg.startswith("pick 'max-throughput': no member of the front has a throughput "
                          "measured") and "report(step=, samples=)" in msg
    assert len(msg.splitlines()) == 1
    # one member measured is enough; the other rules pick as without the column
    assert pick([*front[:3], FRONT[3]], "max-throughput", OBJ).number == 9
    assert pick(front, "max-quality", OBJ).number == 3
    assert pick(front, "min-memory", OBJ).number == 9


def test_picks_by_rule() -> None:
    assert pick(FRONT, "max-quality", OBJ).number == 3
    assert pick(FRONT, "min-memory", OBJ).number == 9
    assert pick(FRONT, "max-throughput", OBJ).number == 5
    assert pick(FRONT, "trial:7", OBJ).number == 7
    # knee by hand: normalised (q, m, t) with 1 best:
    # 3: (1, 0, 0)        d^2 = 0 + 1 + 1 = 2
    # 5: (0.5, 6/7, 1)    d^2 = 0.25 + (1/7)^2 = 0.2704
    # 7: (0.8, 4/7, 0.75) d^2 = 0.04 + (3/7)^2 + 0.0625 = 0.2862
    # 9: (0, 1, 0.5)      d^2 = 1 + 0 + 0.25
    assert pick(FRONT, "knee", OBJ).number == 5


def test_knee_ties_go_to_the_lower_trial() -> None:
    twins = [C(4, {"quality": 0.8, "memory": 1.0}), C(2, {"quality": 0.8, "memory": 1.0})]
    assert pick(twins, "knee", OBJ[:2]).number == 2


def test_pick_errors_are_clear() -> None:
    with pytest.raises(ConfigError, match="not a rule"):
        parse_pick("best-ever")
    with pytest.raises(ConfigError, match="no such candidate"):
        pick(FRONT, "trial:42", OBJ)
    with pytest.raises(ConfigError, match="no candidate"):
        pick([], "knee", OBJ)
    assert str(parse_pick(" trial:12 ")) == "trial:12"


# within-noise on the situation: the knee gives away quality the noise does not explain
NOISY = [
    C(0, {"quality": 0.8205, "memory": 1.66e9, "throughput": 900.0}),
    C(1, {"quality": 0.8190, "memory": 0.90e9, "throughput": 1200.0}),
    C(2, {"quality": 0.8034, "memory": 0.68e9, "throughput": 3000.0}),
    C(3, {"quality": 0.8190, "memory": 0.90e9, "throughput": 1500.0}),
    C(4, {"quality": 0.8100, "memory": 0.70e9, "throughput": 1000.0}),
]


def test_within_noise_takes_the_cheapest_then_fastest_near_the_best() -> None:
    assert DEFAULT_PICK == "within-noise" and DEFAULT_PICK in PICK_RULES
    # noise 0.003: 0.8190 >= 0.8175 qualifies (1 and 3), 0.8100 does not; memory ties
    # 1 and 3 at 0.9 GB, 3 is faster
    assert pick(NOISY, "within-noise", OBJ, noise=0.003).number == 3
    assert pick(NOISY, "within-noise", OBJ, noise=0.011).number == 4  # 0.81 >= 0.8095: cheaper
    assert pick(NOISY, "within-noise", OBJ, noise=0.02).number == 2  # all: the cheapest
    assert pick(NOISY, "within-noise", OBJ).number == 0  # no noise figure: the best quality
    # exact twins of the best: the cheaper one, then the lower trial number
    twins = [C(8, {"quality": 0.9, "memory": 2.0}), C(6, {"quality": 0.9, "memory": 1.0}),
             C(5, {"quality": 0.9, "memory": 1.0})]
    assert pick(twins, "within-noise", OBJ[:2], noise=0.0).number == 5
    with pytest.raises(ConfigError, match="noise"):
        pick(NOISY, "within-noise", OBJ, noise=-0.1)


def test_within_noise_keeps_to_a_floor_the_best_reaches() -> None:
    # noise 0.02 lets every member in (the cheapest: 2, 0.8034); a floor of 0.815 (say the
    # baseline's validation score) leaves 0, 1 and 3 (quality >= 0.815), of which 1 and 3 tie
    # on memory and 3 is faster
    assert pick(NOISY, "within-noise", OBJ, noise=0.02, floor=0.815).number == 3
    assert pick(NOISY, "within-noise", OBJ, noise=0.02, floor=0.8100).number == 4  # 0.81 reaches
    # a floor above the best (0.8205) cannot be kept to: the rule without it
    assert pick(NOISY, "within-noise", OBJ, noise=0.02, floor=0.83).number == 2
    # trial:N does not read it; the other rules choose among 0, 1 and 3: min-memory 1 and 3
    # tie on memory, 3 is faster; max-throughput 3 (1500/s, not 2's 3000); the knee over
    # the three (normalised: 0 at (1, 0, 0), 1 at (0, 1, 0), 3 at (0, 1, 1)) is 3
    assert pick(NOISY, "min-memory", OBJ, floor=0.815).number == 3
    assert pick(NOISY, "max-throughput", OBJ, floor=0.815).number == 3
    assert pick(NOISY, "knee", OBJ, floor=0.815).number == 3
    assert pick(NOISY, "max-quality", OBJ, floor=0.815).number == 0
    assert pick(NOISY, "trial:2", OBJ, floor=0.815).number == 2
    # a floor the best does not reach: every rule as without it (min-memory: 2, 0.68 GB)
    assert pick(NOISY, "min-memory", OBJ, floor=0.83).number == 2
    # reached but cleared by none (0.8205 < 0.815 + 0.01): the best
    assert pick(NOISY, "min-memory", OBJ, floor=0.815, floor_noise=0.01).number == 0


def test_within_noise_takes_a_cheaper_member_only_where_it_clears_the_floor_by_its_noise() -> None:
    # floor 0.815 + 0.004 = 0.819: 0 (0.8205), 1 and 3 (0.8190) clear it; 1 and 3 tie on
    # memory, 3 is faster
    assert pick(NOISY, "within-noise", OBJ, noise=0.02, floor=0.815, floor_noise=0.004).number == 3
    # + 0.005 = 0.820: only the best clears it
    assert pick(NOISY, "within-noise", OBJ, noise=0.02, floor=0.815, floor_noise=0.005).number == 0
    # floor 0.81 reached by 4 (0.8100, the cheaper) but not cleared by 0.006: 3 instead
    assert pick(NOISY, "within-noise", OBJ, noise=0.02, floor=0.81, floor_noise=0.006).number == 3
    # the best reaches 0.818 and nothing clears 0.828: the best, not the cheapest near it
    assert pick(NOISY, "within-noise", OBJ, noise=0.02, floor=0.818, floor_noise=0.01).number == 0
    # a floor the best does not reach is not kept to, whatever its noise
    assert pick(NOISY, "within-noise", OBJ, noise=0.02, floor=0.83, floor_noise=0.01).number == 2
    with pytest.raises(ConfigError, match="floor noise -0.1"):
        pick(NOISY, "within-noise", OBJ, noise=0.02, floor=0.815, floor_noise=-0.1)


def test_auc_noise_is_hanley_mcneil() -> None:
    # by hand: A = 0.8, 100 + 100 rows: Q1 = 0.8/1.2, Q2 = 1.28/1.8,
    # var = (0.16 + 99 (2/3 - 0.64) + 99 (0.71111 - 0.64)) / 10^4 = 9.84 / 10^4
    assert auc_standard_error(0.8, 100, 100) == pytest.approx(math.sqrt(9.84e-4), rel=1e-4)
    assert quality_noise("auc", 0.8, (240, 60)) == auc_standard_error(0.8, 60, 240)
    # against simulation: binormal scores with AUC 0.8 (d = sqrt(2) * probit(0.8))
    import numpy as np
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    d = math.sqrt(2) * 0.8416212335729143
    aucs = [roc_auc_score(np.r_[np.ones(60), np.zeros(240)],
                          np.r_[rng.normal(d, 1, 60), rng.normal(0, 1, 240)]) for _ in range(400)]
    assert auc_standard_error(0.8, 60, 240) == pytest.approx(float(np.std(aucs)), rel=0.15)
    with pytest.raises(ConfigError, match="both classes"):
        auc_standard_error(0.8, 0, 10)


def test_accuracy_noise_is_binomial() -> None:
    assert quality_noise("accuracy", 0.9, (300, 300, 400)) == pytest.approx(
        math.sqrt(0.9 * 0.1 / 1000))
    assert accuracy_standard_error(1.0, 50) == 0.0
    with pytest.raises(ConfigError, match="no noise model"):
        quality_noise("f1", 0.5, (1, 1))
