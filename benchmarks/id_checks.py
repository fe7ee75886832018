"""The throughput cost of the id checks of `autoembed.nn` layers (`autoembed.nn.lookup.
check_ids`: integer dtype, 0 <= id < rows; CPU tensors read their bounds, other devices get a
device-side assert, no host-device sync).

For each compression, an Embedding ([B, L] ids) and an EmbeddingBag (1-D ids with offsets)
train a step (forward, backward) with the check as shipped and with it replaced by a no-op;
the two alternate round by round, so load from other processes hits both alike, and the
median step time of each is reported with the cost in percent. `--compile` also compiles an
Embedding with torch.compile and records whether a bad id is still refused.

    .venv/bin/python benchmarks/id_checks.py [--device cuda] [--rounds 15] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, write_result  # noqa: E402

V, D, B, L = 200_000, 64, 2048, 20
CASES: dict[str, dict[str, Any]] = {
    "none": {}, "hash": {"hash_buckets": 20_000}, "qr": {"qr_collisions": 10},
    "robe": {"robe_size": 200_000}, "tt": {"tt_rank": 8},
    "hot_cold": {"hot_share": 0.01, "hash_buckets": 20_000},
}


def _layer(bag: bool, compression: str, device: str) -> Any:
    from autoembed import nn as ae

    kw = {"compression": compression, "device": device, **CASES[compression]}
    return ae.EmbeddingBag(V, D, mode="sum", **kw) if bag else ae.Embedding(V, D, **kw)


def _step_seconds(layer: Any, args: tuple[Any, ...], device: str) -> float:
    import torch

    t0 = time.perf_counter()
    layer(*args).sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(bag: bool, compression: str, device: str, rounds: int) -> tuple[float, float]:
    """Median seconds of a training step with the check, and without it."""
    import torch

    import autoembed.nn.layers as layers

    torch.manual_seed(0)
    layer = _layer(bag, compression, device)
    ids = torch.randint(0, V, (B * L,) if bag else (B, L), device=device)
    args = (ids, torch.arange(0, B * L, L, device=device)) if bag else (ids,)
    shipped = layers.check_ids
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for r in range(rounds + 2):  # two warm-up rounds
            for checked in (True, False) if r % 2 else (False, True):
                layers.check_ids = shipped if checked else (lambda *_: None)
                seconds = _step_seconds(layer, args, device)
                if r >= 2:
                    times[checked].append(seconds)
    finally:
        layers.check_ids = shipped
    return statistics.median(times[True]), statistics.median(times[False])


def check_alone(shape: tuple[int, ...], device: str) -> float:
    """Seconds of one `check_ids` call on ids of `shape`: the best of 5 runs of 200 calls
    (the least disturbed by other processes)."""
    import torch

    from autoembed.nn.lookup import check_ids

    ids = torch.randint(0, V, shape, device=device)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            check_ids(ids, V, "bench")
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / 200)
    return best


def compiled_refuses(device: str) -> str:
    """Whether a torch.compile'd hashed Embedding still refuses an out-of-range id."""
    import torch

    from autoembed import nn as ae

    layer = torch.compile(ae.Embedding(1000, 8, compression="hash", hash_buckets=50,
                                       device=device))
    layer(torch.randint(0, 1000, (4, 5), device=device))
    try:
        layer(torch.tensor([[3, 1000]], device=device))
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - reporting what torch raised
        return f"refused ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    return "NOT refused"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    alone = check_alone((B, L), args.device)
    rows = []
    for compression in CASES:
        for bag in (False, True):
            on, off = measure(bag, compression, args.device, args.rounds)
            rows.append((compression, "EmbeddingBag" if bag else "Embedding",
                         f"{off * 1e3:.2f}", f"{on * 1e3:.2f}", f"{(on / off - 1) * 100:+.1f}%",
                         f"{alone / off * 100:.2f}%"))
            print(rows[-1], flush=True)
    body = (f"The check alone on {B} x {L} ids: {alone * 1e6:.1f} us a call (best of 5 x 200 "
            f"calls).\n\nA training step (forward, backward) of one layer: V = {V:,}, D = {D}, "
            f"batch {B} x {L} ids (the bag: 1-D ids with offsets, mode sum), on "
            f"{args.device}; median of {args.rounds} rounds, checked and unchecked "
            "alternating. \"cost\" compares the two medians (on a loaded machine it is "
            "mostly noise); \"check / step\" is the check alone over the unchecked step.\n\n"
            + markdown_table(("compression", "layer", "ms unchecked", "ms checked", "cost",
                              "check / step"), rows))
    if args.compile:
        body += f"\n\ntorch.compile (inductor), an id of 1000 in a 1000-row table: " \
                f"{compiled_refuses(args.device)}."
    name = "id_checks" if args.device == "cpu" else f"id_checks_{args.device}"
    write_result(name, f"Id checks of autoembed.nn layers: their cost ({args.device})", body,
                 "python benchmarks/id_checks.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
