"""Property test of `autoembed.apply` (issue 26): random configs (every compression, torch
option, precision and placement) on random small models (tied heads, a module under two
paths, ModuleDict / ModuleList nesting, bags with per-sample weights and offsets).

For each drawn model and config, either `apply` refuses in one line naming the table, or:

* a config that changes nothing (every table hashed into as many buckets as it has ids,
  started from the trained rows) gives the original model's output, on the same weights;
* the applied model's real parameter and optimizer-state bytes after two steps equal
  `estimate_model`'s, to the byte (every tensor in 512 B allocator blocks);
* `copy.deepcopy`, `autoembed.quantize` (or its one-line refusal) and a `state_dict` round
  trip are self-contained: zeroing the original's parameters changes nothing in the copy.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st
from torch import nn

import autoembed
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.errors import ConfigError
from autoembed.models.user_step import UserStep

B, L = 3, 4  # batch and ids per bag (or per sequence)


@dataclass(frozen=True)
class Table:
    """One embedding module of a drawn model and the config entry that rewrites it."""

    bag: bool
    vocab: int
    dim: int
    options: tuple[tuple[str, Any], ...]  # torch's constructor options
    frozen: bool
    where: str  # "top", "dict" or "list": how deep it sits
    tied: bool  # an output layer holds its weight (an Embedding's)
    psw: bool  # a sum bag called with per-sample weights
    flat: bool  # a bag called with 1-D ids and offsets (else 2-D)
    entry: tuple[tuple[str, Any], ...]  # TableConfig keys beyond name and vocab


class Drawn(nn.Module):
    def __init__(self, tables: tuple[Table, ...], alias: bool) -> None:
        super().__init__()
        self.tables, self.d, self.l, self.heads = tables, nn.ModuleDict(), nn.ModuleList(), {}
        self.paths: list[str] = []
        for i, t in enumerate(tables):
            cls = nn.EmbeddingBag if t.bag else nn.Embedding
            m = cls(t.vocab, t.dim, **dict(t.options)).requires_grad_(not t.frozen)
            if t.where == "top":
                self.add_module(f"t{i}", m)
                self.paths.append(f"t{i}")
            elif t.where == "dict":
                self.d[f"t{i}"] = m
                self.paths.append(f"d.t{i}")
            else:
                self.l.append(m)
                self.paths.append(f"l.{len(self.l) - 1}")
            if t.tied:
                head = nn.Linear(t.dim, t.vocab, bias=False)
                head.weight = m.weight
                self.add_module(f"head{i}", head)
        if alias:  # the first table under a second path
            self.alias = self.get_submodule(self.paths[0])
        self.scale = nn.Parameter(torch.ones(()))  # something trains when every table is frozen

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        outs, at = [], 0
        for i, (t, path) in enumerate(zip(self.tables, self.paths, strict=True)):
            m = self.get_submodule(path)
            n = 1 + (t.bag and t.flat) + t.psw
            call = list(args[at:at + n])
            at += n
            if t.bag and not t.flat:
                call.insert(1, None)  # no offsets: per-sample weights by position
            out = m(*call)
            if t.tied:
                out = getattr(self, f"head{i}")(torch.tanh(out))
            outs.append(out.reshape(-1))
            if i == 0 and hasattr(self, "alias"):
                outs.append(self.alias(*call).reshape(-1))
        return torch.cat(outs) * self.scale


def example(tables: tuple[Table, ...], seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    out: list[torch.Tensor] = []
    for t in tables:
        if not t.bag:
            out.append(torch.randint(0, t.vocab, (B, L), generator=g))
            continue
        ids = torch.randint(0, t.vocab, (B * L,) if t.flat else (B, L), generator=g)
        out.append(ids)
        if t.flat:  # bags of 0, 1, ... ids; the last offset ends the last bag
            ends = torch.tensor([0, 1, 5, B * L]) if dict(t.options).get(
                "include_last_offset") else torch.tensor([0, 1, 5])
            out.append(ends)
        if t.psw:
            out.append(torch.rand(ids.shape, generator=g))
    return tuple(out)


# compressions, the stored-row ones drawn more often (robe and tt refuse more options)
COMPRESSIONS = ["none", "hash", "hash", "qr", "qr", "mixed_dim", "mixed_dim", "robe", "tt",
                "hot_cold", "hot_cold"]


@st.composite
def tables(draw: Any, cached: bool) -> Table:
    bag = draw(st.booleans())
    # host_cached keeps every table at the config's dim
    vocab, dim = draw(st.integers(12, 40)), 8 if cached else draw(st.sampled_from([4, 6, 8]))
    compression = draw(st.sampled_from(["hash", "none"] if cached else COMPRESSIONS))
    options: dict[str, Any] = {}
    mode = draw(st.sampled_from(["sum", "sum", "mean", "mean", "max"])) if bag else None
    if bag:
        options["mode"] = mode
        options["include_last_offset"] = draw(st.booleans())
    if not cached:
        if draw(st.integers(0, 4)) == 0:
            options["max_norm"] = draw(st.sampled_from([0.5, 1.0]))
            options["norm_type"] = draw(st.sampled_from([1.0, 2.0]))
        options["sparse"] = mode != "max" and draw(st.integers(0, 3)) == 0
        # (torch refuses frequency scaling of sparse gradients and of max bags)
        options["scale_grad_by_freq"] = (not options["sparse"] and mode != "max"
                                         and draw(st.booleans()))
    # (torch's own layer, which compression none keeps, cannot be traced with sparse
    # gradients and padding_idx: its meta kernel has a data-dependent shape)
    if draw(st.booleans()) and not (compression == "none" and options.get("sparse")):
        options["padding_idx"] = draw(st.integers(-vocab, vocab - 1))
    entry: dict[str, Any] = {"compression": compression, "dim": dim}
    if compression == "hash":
        entry["hash_buckets"] = draw(st.integers(2, vocab + 5))
    elif compression == "qr":
        entry["qr_collisions"] = draw(st.integers(2, 5))
        entry["qr_operation"] = draw(st.sampled_from(["mult", "add", "concat"]))
    elif compression == "mixed_dim":
        entry.update(compression="none", dim=draw(st.integers(1, dim - 1)))
    elif compression == "robe":
        entry["robe_size"] = draw(st.integers(16, 64))
    elif compression == "tt":
        entry["tt_rank"] = draw(st.integers(1, 3))
    elif compression == "hot_cold":
        entry.update(hot_share=draw(st.sampled_from([0.1, 0.3])),
                     hash_buckets=draw(st.integers(1, 6)))
    return Table(bag=bag, vocab=vocab, dim=dim, options=tuple(sorted(options.items())),
                 frozen=draw(st.booleans()) and not cached, where=draw(st.sampled_from(
                     ["top", "dict", "list"])), tied=not bag and not cached and draw(
                     st.booleans()), psw=bag and mode == "sum" and draw(st.booleans()),
                 flat=bag and draw(st.booleans()), entry=tuple(sorted(entry.items())))


@st.composite
def cases(draw: Any) -> tuple[tuple[Table, ...], bool, bool, str, str]:
    cached = draw(st.integers(0, 4)) == 0  # placement host_cached now and then
    drawn = tuple(draw(st.lists(tables(cached), min_size=1, max_size=3)))
    sparse = any(dict(t.options).get("sparse") for t in drawn)
    # robe's array and tt's cores take dense optimizers only (compression.METHOD_RULES)
    dense = any(dict(t.entry)["compression"] in ("robe", "tt") for t in drawn)
    choices = [o for o in (["sgd", "rowwise_adagrad"] if sparse else
                           ["adam", "sgd", "rowwise_adagrad"])
               if not (dense and o == "rowwise_adagrad")]
    optimizer = "rowwise_adagrad" if cached else draw(st.sampled_from(choices))
    precision = "fp32" if cached else draw(st.sampled_from(["fp32", "bf16_master"]))
    return drawn, draw(st.booleans()), cached, optimizer, precision


def config_of(model: Drawn, cached: bool) -> EmbeddingConfig:
    entries = tuple(TableConfig(path, t.vocab, **dict(t.entry))
                    for t, path in zip(model.tables, model.paths, strict=True))
    extra: dict[str, Any] = {"placement": "host_cached", "table_optimizer": "rowwise_adagrad",
                             "cache_load_factor": 1.0} if cached else {}
    return EmbeddingConfig(tables=entries, dim=8, robe_block=2, **extra)


def identity_of(model: Drawn) -> EmbeddingConfig:
    """Every table hashed into as many buckets as it has ids: nothing changes."""
    tables = tuple(TableConfig(path, t.vocab, dim=t.dim, compression="hash",
                               hash_buckets=t.vocab)
                   for t, path in zip(model.tables, model.paths, strict=True))
    return EmbeddingConfig(tables=tables, dim=8)


def block(n: int) -> int:
    return -(-n // 512) * 512


def loss(out: torch.Tensor, _: Any) -> torch.Tensor:
    return out.float().pow(2).mean()


def real_bytes(step: UserStep) -> tuple[int, int]:
    tensors = list(step.model.parameters())
    if step.masters is not None:
        tensors += list(step.masters.masters.values())
    params = sum(block(t.untyped_storage().nbytes()) for t in tensors)
    state = sum(block(v.untyped_storage().nbytes()) for o in step.optimizers  # the device's:
                for s in o.state.values() for k, v in s.items()  # step counters on the CPU
                if isinstance(v, torch.Tensor) and k != "step")
    return params, state


def zeroed(model: nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(cases())
def test_apply_is_faithful_priced_and_self_contained(case: Any) -> None:
    drawn, alias, cached, optimizer, precision = case
    torch.manual_seed(0)
    original = Drawn(drawn, alias)
    x = example(drawn, 1)
    config = config_of(original, cached)

    # a frozen table keeps its rows only fitted to them (apply refuses it otherwise)
    fitted = any(t.frozen for t in drawn)

    def build() -> nn.Module:
        torch.manual_seed(0)
        return autoembed.apply(Drawn(drawn, alias), config, from_trained=fitted)

    try:
        model = build()
    except ConfigError as e:  # refused: one line naming the table
        assert "\n" not in str(e) and str(e).startswith("table '"), str(e)
        event("refused: " + str(e).split(": ", 1)[1].split(" with ")[0])
        return
    event(f"applied: {', '.join(sorted({dict(t.entry)['compression'] for t in drawn}))}"
          f"{' host_cached' if cached else ''}")
    # nothing changes: the original's output, from the same weights
    same = autoembed.apply(copy.deepcopy(original), identity_of(original), from_trained=True)
    with torch.no_grad():
        torch.testing.assert_close(same(*x), original(*x))
    # priced to the byte
    est = autoembed.estimate_model(build, x, loss=loss, optimizer=optimizer,
                                   precision=precision)
    step = UserStep.build(model, precision=precision, optimizer=optimizer)
    for _ in range(2):
        step.step(x, loss)
    assert (est.parameters, est.optimizer_state) == real_bytes(step)
    # copies are self-contained
    model = build()
    with torch.no_grad():
        want = model(*x)
        twin, loaded = copy.deepcopy(model), build()
        loaded.load_state_dict(model.state_dict())
        unpackable = any(dict(t.entry)["compression"] in ("robe", "tt") for t in drawn) or cached
        try:
            served = autoembed.quantize(model, "int8")
            assert not unpackable
            served_out = served(*x)
        except ConfigError as e:
            assert unpackable and "cannot be packed" in str(e) and "\n" not in str(e)
            served = None
        zeroed(model)
        torch.testing.assert_close(twin(*x), want)
        torch.testing.assert_close(loaded(*x), want)
        if served is not None:
            torch.testing.assert_close(served(*x), served_out)
