"""What would fit: the few smallest changes to an estimate's config (or the user's model)
that bring its device total within the budget, each priced on its own.

The changes are of the `KINDS`: precision, optimizer, compression of the largest table (hash
or qr), batch x sequence, and gradient checkpointing. A kind's suggestion is its value whose
device total is the largest that still fits (the mildest change); when the config already
fits (`estimate --suggest`), the value that grows the device total most within the budget.
When fewer than `WANTED` single changes fit, pairs of kinds are tried.

A built-in config's candidates are `estimate` flags added to the ones given, priced as
`autoembed estimate` with those flags would price them (analytic: under a millisecond each).
A user's model (`estimate --model`) is traced once per candidate (precision, optimizer,
compression of its largest table through `apply`), within `USER_SECONDS`.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoembed.errors import ConfigError

__all__ = ["Suggestion", "suggest", "KINDS", "WANTED"]

KINDS = ("precision", "optimizer", "hash", "qr", "batch x sequence", "checkpointing")
WANTED = 3  # fewer single changes than this that fit: pairs of kinds are tried too
USER_SECONDS = 10.0  # a user model's candidates stop being traced after this long
# where two values price the same, the first is offered (bf16 before fp16: no loss scaling)
_PRECISIONS = ("bf16_master", "fp16_master", "amp_bf16", "amp_fp16", "bf16", "fp16", "fp32")
_USER_PRECISIONS = ("bf16_master", "amp_bf16", "bf16", "fp32")
_USER_OPTIMIZERS = ("rowwise_adagrad", "adagrad", "momentum", "sgd", "adam")
_HASH_SHARES = (0.5, 0.25, 0.1, 0.05, 0.01, 0.001)
_QR_COLLISIONS = (2, 4, 8, 16, 64, 256)
_USER_HASH_SHARES = (0.5, 0.25, 0.1, 0.01)
_SCALES = (2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Suggestion:
    """One change and its estimated device total. `flags`: the `estimate` options that
    price it, added to the ones given (name -> value, as the CLI takes them); `apply`: for
    a user's model, the config to rewrite it with (`--apply FILE`, FILE holding it)."""

    kind: str
    flags: Mapping[str, Any]
    device_total: int
    apply: Mapping[str, Any] | None = field(default=None)

    @property
    def command_line(self) -> str:
        """The flags as typed: `--precision bf16 --checkpointing`."""
        out = []
        for k, v in self.flags.items():
            flag = "--" + k.replace("_", "-")
            out.append(flag if v is True else f"--no-{flag[2:]}" if v is False else
                       f"{flag} {v}")
        if self.apply is not None:
            import json

            out.append(f"--apply FILE (FILE: {json.dumps(self.apply)})")
        return " ".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "flags": dict(self.flags), "apply": self.apply,
                "device_total": self.device_total, "command_line": self.command_line}


# a candidate: (kind, flags, apply config or None)
Candidate = tuple[str, dict[str, Any], dict[str, Any] | None]


def suggest(options: Mapping[str, Any], priced: Any) -> list[Suggestion]:
    """The changes to `options` (the `estimate` options, as `price.price` takes them) that
    fit `priced.budget`: the mildest one of each kind when `priced` does not fit, else
    the one of each kind that uses the most of the budget's room; pairs of kinds when
    fewer than WANTED single changes fit. Needs a budget."""
    if priced.budget is None:
        raise ConfigError("--suggest needs --budget: give the budget the changes should fit, "
                          "e.g. --budget 8GB")
    over = priced.estimate.fits is False
    if priced.user:
        total, cands = _user_pricer(options, priced)
    else:
        total, cands = _config_pricer(options, priced)
    return choose(cands, total, priced.budget.bytes, priced.estimate.device_total, over)


def choose(cands: Sequence[Candidate], total: Callable[[Candidate], int | None], budget: int,
           now: int, over: bool) -> list[Suggestion]:
    """Per kind, the fitting candidate with the largest total (over: any that fits; else one
    above `now`); then, over budget with fewer than WANTED, the best fitting pair per two
    kinds. `total(c)`: c's device total, None where it cannot be priced (refused)."""
    priced = [(c, total(c)) for c in cands]
    fits = [(c, t) for c, t in priced if t is not None and t <= budget and (over or t > now)]
    out = [_best(kind, fits) for kind in KINDS]
    chosen = [s for s in out if s is not None]
    if over and len(chosen) < WANTED:
        chosen += _pairs(priced, total, budget, WANTED - len(chosen))
    return chosen


def _best(kind: str, fits: Iterable[tuple[Candidate, int]]) -> Suggestion | None:
    mine = [(c, t) for c, t in fits if c[0] == kind]
    if not mine:
        return None
    (k, flags, apply), t = max(mine, key=lambda p: p[1])
    return Suggestion(k, flags, t, apply)


def _pairs(priced: Sequence[tuple[Candidate, int | None]],
           total: Callable[[Candidate], int | None], budget: int, n: int) -> list[Suggestion]:
    """Up to `n` two-kind changes that fit, each the fitting pair of its two kinds with the
    largest total, the largest first. Only candidates that priced alone are combined."""
    ok = [c for c, t in priced if t is not None and c[2] is None]
    found = []
    for k1, k2 in itertools.combinations(KINDS, 2):
        best: tuple[int, Candidate] | None = None
        for a, b in itertools.product(*([c for c in ok if c[0] == k] for k in (k1, k2))):
            if set(a[1]) & set(b[1]):
                continue  # both set one flag (batch and grad accumulation)
            pair: Candidate = (f"{k1} + {k2}", {**a[1], **b[1]}, None)
            t = total(pair)
            if t is not None and t <= budget and (best is None or t > best[0]):
                best = (t, pair)
        if best is not None:
            found.append(Suggestion(best[1][0], best[1][1], best[0]))
    return sorted(found, key=lambda s: -s.device_total)[:n]


# ---------------------------------------------------------------- the built-in model


def _config_pricer(options: Mapping[str, Any], priced: Any,
                   ) -> tuple[Callable[[Candidate], int | None], list[Candidate]]:
    """Each candidate priced as `estimate` prices the given options with its flags added
    (the analytic model)."""
    from autoembed.pricing.price import price

    def total(c: Candidate) -> int | None:
        try:
            return price(**{**options, "method": "analytic", **c[1]}).estimate.device_total
        except ConfigError:  # a combination the config refuses (e.g. qr with sparse_adam)
            return None

    return total, _config_candidates(priced.config)


def _config_candidates(cfg: Any) -> list[Candidate]:
    from autoembed.config import OPTIMIZERS

    cands: list[Candidate] = [("precision", {"precision": p}, None)
                              for p in _PRECISIONS if p != cfg.precision]
    cands += [("optimizer", {"optimizer": o}, None) for o in OPTIMIZERS
              if o != cfg.table_optimizer]
    cands += [("hash", {"compression": "hash", "hash_buckets": str(s)}, None)
              for s in _HASH_SHARES]
    cands += [("qr", {"compression": "qr", "qr_collisions": m}, None) for m in _QR_COLLISIONS]
    cands += _batch_candidates(cfg)
    cands.append(("checkpointing", {"checkpointing": not cfg.checkpointing}, None))
    return cands


def _batch_candidates(cfg: Any) -> list[Candidate]:
    """Smaller batches (the same samples per optimizer step through gradient accumulation)
    and larger ones; shorter and longer sequences for text."""
    b, acc = cfg.batch_size, cfg.grad_accum_steps
    out: list[Candidate] = []
    for f in _SCALES:
        if b // f >= 1:
            out.append(("batch x sequence", {"batch": b // f, "grad_accum": acc * f}, None))
        out.append(("batch x sequence", {"batch": b * f}, None))
        if cfg.task == "text":
            if cfg.seq_len // f >= 1:
                out.append(("batch x sequence", {"seq": cfg.seq_len // f}, None))
            out.append(("batch x sequence", {"seq": cfg.seq_len * f}, None))
    return out


# ---------------------------------------------------------------- the user's model


def _user_pricer(options: Mapping[str, Any], priced: Any,
                 ) -> tuple[Callable[[Candidate], int | None], list[Candidate]]:
    """Each candidate traced by `estimate_model` (its optimizer, precision, and its largest
    table compressed through `apply`); candidates after USER_SECONDS are not priced."""
    from autoembed.memory.types import overhead_bytes
    from autoembed.pricing.user_model_cli import applied, resolve_for_cli, step_settings
    from autoembed.torchrec.public import estimate_model

    obj, example, loss, base = resolve_for_cli(
        options["model"], options["example"], options.get("apply_cfg"), options.get("loss_spec"),
        options.get("user_space"))
    opt, prec = step_settings(options.get("optimizer"), options.get("precision"),
                              options.get("user_space"))  # as the step itself was priced
    reserve = priced.estimate.overhead - overhead_bytes(0)  # the --reserve it was priced with
    deadline = time.monotonic() + USER_SECONDS
    late: list[Candidate] = []

    def total(c: Candidate) -> int | None:
        cfg = base if c[2] is None else c[2]
        if time.monotonic() > deadline:
            late.append(c)
            if len(late) == 1:
                print(f"autoembed: note: the changes not traced within {USER_SECONDS:g} s "
                      "are left out (each is one trace of your model)", file=sys.stderr)
            return None
        # a model object (not a factory) was rewritten by --apply in place when it was
        # priced: it is priced as it now is
        model = obj if cfg is None or hasattr(obj, "forward") else applied(obj, cfg)
        try:
            return estimate_model(model, example, loss=loss,
                                  optimizer=c[1].get("optimizer", opt),
                                  precision=c[1].get("precision", prec),
                                  reserve=reserve).device_total
        except ConfigError:
            return None

    # a model object (not a factory) is rewritten in place: only its own tables are offered
    tables = [] if hasattr(obj, "forward") else _table_candidates(obj, base)
    return total, _by_turns(_user_candidates(opt, prec) + tables)


def _by_turns(cands: Sequence[Candidate]) -> list[Candidate]:
    """One of each kind in turn, each kind's strongest change first and then its own order
    (mildest first), so that the candidates priced before USER_SECONDS runs out hold a
    change of every kind that fits, where one does."""
    kinds = [[c for c in cands if c[0] == k] for k in KINDS]
    kinds = [[*k[-1:], *k[:-1]] for k in kinds]
    return [c for turn in itertools.zip_longest(*kinds) for c in turn if c is not None]


def _user_candidates(opt: str, prec: str) -> list[Candidate]:
    """A few other precisions and optimizers (each a trace of the model)."""
    out: list[Candidate] = [("precision", {"precision": p}, None)
                            for p in _USER_PRECISIONS if p != prec]
    return out + [("optimizer", {"optimizer": o}, None) for o in _USER_OPTIMIZERS if o != opt]


def _table_candidates(factory: Callable[[], Any], base: Any) -> list[Candidate]:
    """The model's largest table (rows x dim) hashed or quotient-remainder split, as the
    --apply config that says so (`base`: the --apply config given, kept for the rest)."""
    from autoembed.trace.traced_model import on_meta
    from autoembed.user.model.apply import tables

    try:
        model = on_meta(factory)  # its tables' shapes only: nothing allocated or filled
        found = {t.name: t for t in tables(model)}
    except Exception:  # noqa: BLE001 - a factory that cannot build on meta: no table changes
        return []
    if base is not None:  # the --apply config's tables, over the model's own
        found.update({t.name: t for t in base.tables})
    if not found:
        return []
    big = max(found.values(), key=lambda t: t.vocab_size * (t.dim or 1))
    entry = {"name": big.name, "vocab_size": big.vocab_size, "dim": big.dim}
    others = [] if base is None else [t for t in base.to_dict()["tables"]
                                      if t["name"] != big.name]
    rest = {} if base is None else {k: v for k, v in base.to_dict().items() if k != "tables"}

    def cfg(**kw: Any) -> dict[str, Any]:
        return {**rest, "tables": [*others, {**entry, **kw}]}

    out: list[Candidate] = [("hash", {}, cfg(compression="hash", hash_buckets=max(
        1, int(big.vocab_size * s)))) for s in _USER_HASH_SHARES]
    out += [("qr", {}, cfg(compression="qr", qr_collisions=m)) for m in _QR_COLLISIONS[:3]
            if m < big.vocab_size]
    return out
