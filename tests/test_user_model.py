"""estimate_model on a user's own nn.Module: bytes by hand, call conventions, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autoembed import estimate_model
from autoembed.errors import BudgetError, ConfigError

V, D, C = 1000, 64, 4


def block(n: int) -> int:
    return -(-n // 512) * 512


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.head = nn.Linear(D, C)

    def forward(self, ids: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        out = self.head(self.emb(ids).mean(1))
        return out if y is None else F.cross_entropy(out, y)


def example(b: int = 8, s: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, V, (b, s)), torch.randint(0, C, (b,))


# by hand: the fp32 tensors a step holds for Tiny (each one a 512-byte-rounded block)
PARAMS = block(V * D * 4) + block(D * C * 4) + block(C * 4)
# (Adam's 0-dim `step` counters are CPU tensors, not device state: test_memory_traced)


def test_fp32_adam_by_hand() -> None:
    e = estimate_model(Tiny, example())
    assert e.peak_phase == "step"
    assert e.parameters == PARAMS
    assert e.gradients == PARAMS
    assert e.optimizer_state == 2 * PARAMS
    # Adam foreach's temporaries are at least one parameter-sized buffer (sqrt of exp_avg_sq)
    assert e.temporaries >= block(V * D * 4)
    assert e.allocated_peak >= 4 * PARAMS + block(V * D * 4)
    table = {m.name: m for m in e.modules}["emb"]
    assert table.kind == "table" and table.parameters == block(V * D * 4)
    assert table.optimizer_state == 2 * block(V * D * 4)  # its step counter: on the CPU
    assert [t.name for t in e.tables] == ["emb"] and e.tables[0].rows == V
    assert e.device_total == e.reserved_peak + e.overhead


def test_bf16_master_holds_half_params_and_fp32_masters() -> None:
    e = estimate_model(Tiny, example(), precision="bf16_master")
    half = block(V * D * 2) + block(D * C * 2) + block(C * 2)
    assert e.parameters == half + PARAMS
    assert e.optimizer_state == 2 * PARAMS


def test_an_optimizer_factory_is_priced_on_the_params_it_is_given() -> None:
    """A factory's param groups of the params it is given are priced with Adam's state by
    hand; one over other tensors (a loop's `model.parameters()`, captured) is refused in
    one line (before: priced with no optimizer state at all)."""
    def groups(params: list[torch.Tensor]) -> torch.optim.Optimizer:
        return torch.optim.Adam([{"params": params[:1], "lr": 0.1}, {"params": params[1:]}])

    assert estimate_model(Tiny, example(), optimizer=groups).optimizer_state == \
        2 * PARAMS
    other = Tiny()
    with pytest.raises(ConfigError, match=r"returned an optimizer over 3 tensor\(s\) it was "
                       r"not given \(the first of shape \(1000, 64\)\)"):
        estimate_model(Tiny, example(), optimizer=lambda _: torch.optim.Adam(other.parameters()))


def test_rowwise_adagrad_state_is_one_float_per_row() -> None:
    e = estimate_model(Tiny, example(), optimizer="rowwise_adagrad")
    table = {m.name: m for m in e.modules}["emb"]
    assert table.optimizer_state == block(V * 4)  # FBGEMM's row-wise sum
    head = {m.name: m for m in e.modules}["head"]
    # the tower takes Adagrad: state_sum per element; its 0-dim step per parameter lives on
    # the host (torch.optim.Adagrad makes it with torch.tensor in its constructor)
    assert head.optimizer_state == block(D * C * 4) + block(C * 4)


def test_module_factory_tuple_dict_and_loss_fn_agree() -> None:
    ids, y = example()
    a = estimate_model(Tiny, (ids, y))
    b = estimate_model(Tiny(), (ids, y))
    c = estimate_model(Tiny, {"ids": ids, "y": y})
    d = estimate_model(Tiny, ids, loss=lambda out, x: out.float().logsumexp(1).mean())
    assert a.allocated_peak == b.allocated_peak == c.allocated_peak
    assert abs(d.allocated_peak - a.allocated_peak) < 64 * 1024


class LossFirst(Tiny):
    """Returns (loss, logits), as TorchRec's DLRMTrain and Hugging Face's tuples do."""

    def forward(self, ids: torch.Tensor, y: torch.Tensor | None = None) -> Any:
        out = self.head(self.emb(ids).mean(1))
        return F.cross_entropy(out, y), out.detach()


def test_a_tuple_output_whose_first_element_is_the_loss_prices_that_loss() -> None:
    ids, y = example()
    first = estimate_model(LossFirst, (ids, y))
    given = estimate_model(LossFirst, (ids, y), loss=lambda out, x: out[0])
    assert first.allocated_peak == given.allocated_peak
    assert first.parameters == estimate_model(Tiny, (ids, y)).parameters


def test_a_tuple_without_a_scalar_first_still_asks_for_a_loss() -> None:
    class Pair(Tiny):
        def forward(self, ids: torch.Tensor) -> Any:
            out = self.head(self.emb(ids).mean(1))
            return out, out

    with pytest.raises(ConfigError, match="not a scalar loss"):
        estimate_model(Pair, example()[0])


def test_a_factory_class_prices_with_torchrec_loaded() -> None:
    """A class is a factory, not a model, also once torchrec is imported (CI's order)."""
    pytest.importorskip("torchrec")
    ids, y = example()
    assert estimate_model(Tiny, (ids, y)).allocated_peak == \
        estimate_model(Tiny(), (ids, y)).allocated_peak


def test_several_examples_take_the_largest() -> None:
    small, big = example(8, 16), example(512, 512)
    both = estimate_model(Tiny, [small, big])
    assert both.allocated_peak == estimate_model(Tiny, big).allocated_peak
    assert both.allocated_peak > estimate_model(Tiny, small).allocated_peak


def test_a_module_is_not_touched() -> None:
    m = Tiny()
    before = m.emb.weight.detach().clone()
    estimate_model(m, example())
    assert torch.equal(m.emb.weight, before) and m.emb.weight.grad is None


class Scaled(Tiny):
    """Tiny with tensors held in plain attributes (neither parameter nor buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.ones(D)
        self.shifts = [torch.zeros(D), torch.zeros(D)]

    def forward(self, ids: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids).mean(1) * self.scale + self.shifts[0] + self.shifts[1]
        return F.cross_entropy(self.head(h), y)


def test_a_module_holding_tensor_attributes_prices_as_its_factory() -> None:
    """A module given as it is whose forward reads tensors held in plain attributes is
    priced with them faked, as its factory is (before: a RuntimeError from the trace's
    FakeTensorMode about a storage on another device); it is not touched."""
    m = Scaled()
    got = estimate_model(m, example(), optimizer="sgd")
    assert got.parameters == PARAMS  # by hand: the attributes are not parameters
    assert got.allocated_peak == estimate_model(Scaled, example(), optimizer="sgd").allocated_peak
    assert torch.equal(m.scale, torch.ones(D)) and not m.shifts[0].any()


def test_100m_row_factory_traces_fast_and_small() -> None:
    code = (
        "import json, time, torch\n"
        "from torch import nn\n"
        "t = time.perf_counter()\n"
        "from autoembed import estimate_model\n"
        "class M(nn.Module):\n"
        "    def __init__(s):\n"
        "        super().__init__()\n"
        "        s.e, s.l = nn.EmbeddingBag(100_000_000, 128), nn.Linear(128, 1)\n"
        "    def forward(s, x): return s.l(s.e(x)).sum()\n"
        "e = estimate_model(M, torch.zeros(4096, 8, dtype=torch.long))\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        "print(json.dumps({'peak': e.allocated_peak, 'rss': int(hwm.split()[1]) * 1024,\n"
        "                  's': time.perf_counter() - t}))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    table = 100_000_000 * 128 * 4
    assert d["peak"] >= 5 * table  # params, grads, 2 Adam states, 1 temporary
    assert d["rss"] < 1e9


class NoTables(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).sum()


class TwoOutputs(Tiny):
    def forward(self, ids: torch.Tensor, y: torch.Tensor | None = None) -> Any:
        out = self.head(self.emb(ids).mean(1))
        return out, out


def test_bad_inputs_are_one_line_config_errors() -> None:
    cases = [
        (lambda: estimate_model(NoTables, torch.zeros(2, 4)), "no nn.Embedding"),
        (lambda: estimate_model(Tiny, torch.zeros(8, 3)),  # float ids
         "module 'emb' (Embedding) raised"),
        (lambda: estimate_model(Tiny, (torch.zeros(8, 3, dtype=torch.long), torch.zeros(5))),
         "raised"),
        (lambda: estimate_model(lambda: 1 / 0, torch.zeros(1)), "raised ZeroDivisionError"),
        (lambda: estimate_model(Tiny, example(), optimizer="adamm"), "optimizer 'adamm'"),
        (lambda: estimate_model(Tiny, example(), precision="fp64"), "fp64"),
        # logits are priced with the stand-in loss; a tuple of them is no loss at all
        (lambda: estimate_model(TwoOutputs, example()[0]), "not a scalar loss"),
        (lambda: estimate_model(Tiny, example()[0], loss=3), "loss = int"),  # type: ignore
        (lambda: estimate_model(3, example()), "nn.Module"),  # type: ignore[arg-type]
    ]
    for call, text in cases:
        with pytest.raises(ConfigError) as info:
            call()
        msg = str(info.value)
        assert text in msg and "\n" not in msg, msg


class ValueDependent(nn.Module):
    """A forward that runs on real ids and not on a trace's fake ones: `how` picks the op."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.emb, self.how = nn.Embedding(V, D), how

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.how == "mask":  # drop the padding ids: a shape the values decide
            return self.emb(ids[ids != 0]).sum()
        if self.how == "unique":
            return self.emb(torch.unique(ids)).sum()
        return self.emb(ids[:, : int(ids.max()) % 3 + 1]).sum()  # a tensor's value read


@pytest.mark.parametrize(("how", "says"), [
    ("mask", "calls aten.nonzero.default, whose output's shape depends on the values"),
    ("unique", "calls aten._unique2.default, whose output's shape depends on the values"),
    ("item", "reads a tensor's value (.item(), int(), bool()"),
])
def test_a_forward_whose_shapes_depend_on_the_ids_is_refused_as_such(how: str, says: str) -> None:
    ids = torch.randint(1, V, (4, 5))
    ValueDependent(how)(ids).backward()  # it runs on the real ids
    with pytest.raises(ConfigError) as info:
        estimate_model(ValueDependent(how), ids)
    msg = str(info.value)
    assert msg.startswith("the model's step cannot be priced: module '(root)' (ValueDependent)")
    assert says in msg and "fake tensors" in msg and "fixed shapes" in msg and "\n" not in msg


class TakesADict(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.emb(batch["ids"]).sum()


def test_a_dict_example_for_a_forward_taking_one_dict_says_how_to_pass_it() -> None:
    batch = {"ids": torch.randint(0, V, (4, 5))}
    with pytest.raises(ConfigError, match=r"unexpected keyword argument 'ids'; a dict example "
                       r"is passed as model\(\*\*example\): .* give \(example,\)"):
        estimate_model(TakesADict, batch)
    assert estimate_model(TakesADict, (batch,)).parameters == block(V * D * 4)


class TakesAList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fields = nn.ModuleList([nn.EmbeddingBag(V, D), nn.EmbeddingBag(50, D)])

    def forward(self, ids: list[torch.Tensor]) -> torch.Tensor:
        return sum(f(x).sum() for f, x in zip(self.fields, ids, strict=True))


def test_a_list_example_that_fails_as_several_says_how_to_pass_one_list() -> None:
    fields = [torch.randint(0, 50, (4, 3)), torch.randint(0, 50, (4, 3))]
    with pytest.raises(ConfigError, match=r"; a list example is several examples, each priced "
                       r"alone \(model\(x\) for each\): .* give \(\[\.\.\.\],\)$"):
        estimate_model(TakesAList, fields)
    assert estimate_model(TakesAList, (fields,)).parameters == block(V * D * 4) + block(50 * D * 4)


def test_budget_is_what_budget_of_takes_and_is_checked_before_the_trace() -> None:
    built: list[int] = []

    def factory() -> Tiny:
        built.append(1)
        return Tiny()

    with pytest.raises(BudgetError, match="^budget '8XB' is not a size"):
        estimate_model(factory, example(), budget="8XB")
    assert not built  # refused before the model was built and traced
    e = estimate_model(Tiny, example(), budget="8GB")
    assert e.budget == 8 * 10**9 and e.fits is True
    assert estimate_model(Tiny, example(), budget=e.device_total - 1).fits is False


def test_estimate_given_a_module_points_to_estimate_model() -> None:
    import autoembed

    with pytest.raises(ConfigError, match="estimate_model"):
        autoembed.estimate(Tiny())  # type: ignore[arg-type]


@pytest.mark.parametrize("precision", ["fp32", "bf16_master", "amp_bf16"])
def test_seed_pattern_equals_the_built_in_text_estimate(precision: str) -> None:
    """The seed's first pattern (examples/seed_mean: nn.Embedding, mean, nn.Linear) is the
    built-in `task: text` model with `pooling: naive` and no dense layers: the two traces
    hold the same tensors, so the peaks differ by block rounding only (a few 512-byte blocks:
    the user's forward takes its labels as an input, the built-in batch holds them apart)."""
    import functools
    import importlib
    from pathlib import Path

    from autoembed import estimate
    from autoembed.config import EmbeddingConfig, TableConfig

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    seed_mean = importlib.import_module("examples.seed_mean")
    v, d, b, s = 50_000, 64, 32, 128
    cfg = EmbeddingConfig(task="text", tables=(TableConfig("tokens", v),), dim=d, seq_len=s,
                          batch_size=b, pooling="naive", dense_layers=(), num_classes=4,
                          precision=precision)
    built_in = estimate(cfg, method="traced")
    user = estimate_model(functools.partial(seed_mean.build_model, vocab=v, dim=d),
                          seed_mean.make_example(vocab=v, batch=b, seq=s), precision=precision)
    assert user.peak_phase == built_in.peak_phase == "step"
    assert user.parameters == built_in.parameters
    assert user.optimizer_state == built_in.optimizer_state
    assert abs(user.allocated_peak - built_in.allocated_peak) <= 4 * 512
    # the table alone (params + grads + 2 Adam states + 1 foreach temporary) is most of it
    assert user.allocated_peak >= 5 * block(v * d * 4)


class SparseTiny(Tiny):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D, sparse=True)


def test_sparse_table_gradients_are_one_row_per_id_by_hand() -> None:
    b, s = 64, 32
    dense = estimate_model(Tiny, example(b, s), optimizer="rowwise_adagrad")
    sparse = estimate_model(SparseTiny, example(b, s), optimizer="rowwise_adagrad")
    n = b * s  # ids looked up: one gradient row (D fp32 values) and one int64 index each
    want = block(n * D * 4) + block(n * 8)
    assert {t.name: t.gradients for t in sparse.tables} == {"emb": want}
    assert {t.name: t.gradients for t in dense.tables} == {"emb": block(V * D * 4)}
    assert any("sparse=True" in note for note in sparse.notes)
    # the step holds them and the coalesced copy (min(V, n) rows) plus row-wise Adagrad's
    # scaled update: more than the gradients alone
    assert sparse.allocated_peak >= sparse.parameters + sparse.optimizer_state + want


class FrozenSparse(Tiny):
    """Tiny with a second, frozen table (`sparse` as given) beside its trained one."""

    def __init__(self, sparse: bool) -> None:
        super().__init__()
        self.frozen = nn.Embedding(V, D, sparse=sparse)
        self.frozen.weight.requires_grad_(False)

    def forward(self, ids: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        out = self.head(self.emb(ids).mean(1) + self.frozen(ids).mean(1))
        return out if y is None else F.cross_entropy(out, y)


def test_a_frozen_table_is_priced_without_a_gradient_sparse_or_not() -> None:
    """torch gives a frozen table no gradient, sparse=True or not, so the flag changes no
    tensor of the step: both price alike, the frozen table's gradient bytes 0 (before: a
    frozen sparse table was priced with a gradient row per id and its sparse step's
    temporaries, and every frozen table listed a full gradient)."""
    b, s = 64, 32
    real = FrozenSparse(sparse=True)
    real(*example(b, s)).backward()
    assert real.frozen.weight.grad is None and real.emb.weight.grad is not None
    sparse = estimate_model(lambda: FrozenSparse(True), example(b, s), optimizer="sgd")
    dense = estimate_model(lambda: FrozenSparse(False), example(b, s), optimizer="sgd")
    assert sparse.allocated_peak == dense.allocated_peak
    assert sparse.gradients == dense.gradients
    assert {t.name: t.gradients for t in sparse.tables} == {"emb": block(V * D * 4),
                                                            "frozen": 0}


def test_bf16_master_keeps_no_master_of_a_frozen_table() -> None:
    """No optimizer steps a frozen table, so it has no fp32 master (before: priced with one,
    4 bytes a weight, beside its bf16 rows); the trained weights keep theirs."""
    e = estimate_model(lambda: FrozenSparse(False), example(), precision="bf16_master")
    half = block(V * D * 2)
    assert {t.name: t.parameters for t in e.tables} == {"emb": half + block(V * D * 4),
                                                        "frozen": half}
    assert e.parameters == 2 * half + block(D * C * 2) + block(C * 2) + PARAMS


@pytest.mark.parametrize(("precision", "optimizer"), [("fp32", "rowwise_adagrad"),
                                                      ("bf16_master", "adagrad")])
def test_sparse_seed_pattern_prices_as_the_built_in_sparse_table(
    precision: str, optimizer: str
) -> None:
    """The built-in text model's table takes sparse gradients under these optimizers; the
    seed pattern with nn.Embedding(sparse=True) holds the same gradient bytes. The peaks
    differ by small tensors only (the built-in masks pads, the user's takes labels in).
    The built-in sparse step is priced analytically (its trace is data-dependent)."""
    from autoembed import estimate
    from autoembed.config import EmbeddingConfig, TableConfig, optimizer_alias

    v, d, b, s = 50_000, 64, 32, 128

    class Seed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(v, d, sparse=True)
            self.fc = nn.Linear(d, 4)

        def forward(self, ids: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(self.fc(self.embedding(ids).mean(dim=1)).float(), y)

    alias: dict = dict(optimizer_alias(optimizer))
    cfg = EmbeddingConfig(task="text", tables=(TableConfig("tokens", v),), dim=d, seq_len=s,
                          batch_size=b, pooling="naive", dense_layers=(), num_classes=4,
                          precision=precision, **alias)
    built_in = estimate(cfg, method="traced")
    user = estimate_model(Seed, (torch.randint(0, v, (b, s)), torch.randint(0, 4, (b,))),
                          precision=precision, optimizer=optimizer)
    assert user.gradients == built_in.gradients
    # up to the [lookups, D] fp32 block the analytic backward keeps for CUDA's embedding
    # backward (a CPU trace does not hold it; it counts when the peak is the backward's)
    cuda_only = -(-b * s * d * 4 // 512) * 512
    tol = 0.005 * built_in.allocated_peak
    assert user.allocated_peak - tol <= built_in.allocated_peak
    assert built_in.allocated_peak <= user.allocated_peak + cuda_only + tol


def test_a_factory_that_builds_on_meta_prices_as_one_built_on_cpu() -> None:
    """A factory may build its model under torch.device("meta") (nothing allocated, as
    before `materialize`): its meta tensors are traced as CPU ones, so it is priced as the
    same model built on CPU (before: FakeTensorDeviceMismatchError, blamed on the example)."""
    import functools
    import importlib
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    seed_mean = importlib.import_module("examples.seed_mean")
    v, d = 50_000, 64

    def on_meta() -> nn.Module:
        with torch.device("meta"):
            return seed_mean.build_model(vocab=v, dim=d)

    ex = seed_mean.make_example(vocab=v, batch=8, seq=16)
    meta = estimate_model(on_meta, ex)
    cpu = estimate_model(functools.partial(seed_mean.build_model, vocab=v, dim=d), ex)
    assert meta.parameters == block(v * d * 4) + block(d * 4 * 4) + block(4 * 4)  # by hand
    assert (meta.allocated_peak, meta.reserved_peak) == (cpu.allocated_peak, cpu.reserved_peak)


@pytest.mark.parametrize(("convert", "size"), [
    (lambda m: m.to(torch.bfloat16), 2), (lambda m: m.half(), 2), (lambda m: m.to("cpu"), 4),
    (lambda m: m.cpu().to("cpu", torch.bfloat16), 2)])
def test_a_factory_that_converts_its_model_prices_as_the_converted_model(convert,
                                                                         size: int) -> None:
    """A factory returning `Model().to(dtype)` (`.half()`, `.to(device)`) is priced as that
    model built and converted: its parameters by hand in the dtype it returns, the same step
    as the converted module itself (before: `_apply(): Couldn't swap Embedding.weight`, as
    torch cannot swap a fake parameter, so such a build could not be priced or searched)."""
    def factory() -> nn.Module:
        return convert(Tiny())

    got = estimate_model(factory, example(), optimizer="sgd")
    built = estimate_model(factory(), example(), optimizer="sgd")
    assert got.parameters == block(V * D * size) + block(D * C * size) + block(C * size)
    assert got.allocated_peak == built.allocated_peak


class OwnInit(nn.Embedding):
    """An embedding whose own `reset_parameters` records where each of its runs drew."""

    drew: list[str] = []

    def reset_parameters(self) -> None:
        from torch._subclasses.fake_tensor import is_fake

        OwnInit.drew.append("fake" if is_fake(self.weight) else self.weight.device.type)
        nn.init.normal_(self.weight, std=0.02)


@pytest.mark.parametrize("from_trained", [True, False])
def test_a_converting_factory_that_applies_prices_without_drawing_or_fitting(
        from_trained: bool) -> None:
    """A factory that converts its model and applies a config to a table with its own
    `reset_parameters` is called again on the meta device for its shapes: there `apply`
    fits and draws nothing, as on fake tensors (before: `from_trained=True` was refused as
    'on the meta device', though the same factory builds and trains; without it the table's
    reset_parameters ran on a CPU copy of the whole table to measure its moments)."""
    import autoembed
    from autoembed.config import EmbeddingConfig, TableConfig

    cfg = EmbeddingConfig(dim=D, tables=(TableConfig("emb", V, compression="hash",
                                                     hash_buckets=100),))

    def factory() -> nn.Module:
        model = Tiny()
        model.emb = OwnInit(V, D)
        return autoembed.apply(model.to(torch.bfloat16), cfg, from_trained=from_trained)

    OwnInit.drew = []
    got = estimate_model(factory, example(), optimizer="sgd", precision="bf16")
    # by hand, bf16: the 100 hashed rows, the head's weight and bias
    assert got.parameters == block(100 * D * 2) + block(D * C * 2) + block(C * 2)
    assert "cpu" not in OwnInit.drew and OwnInit.drew  # drawn on fake and meta tensors only
    assert factory().emb.store.weight.shape == (100, D)  # and the factory builds it


def test_on_meta_keeps_device_moves_on_meta_and_converts_dtypes() -> None:
    """Each form of Tensor.to a build may use (copy=, non_blocking=, another tensor's dtype,
    device and dtype positional) keeps the meta device and converts as asked (before: the
    forms with copy= raised from torch's own argument parser)."""
    from autoembed.trace.traced_model import on_meta

    def build() -> list[torch.Tensor]:
        t = torch.zeros(3)
        return [t.to("cpu", copy=True), t.to(dtype=torch.float16, non_blocking=True),
                t.to(torch.empty(1, dtype=torch.int64)), t.to("cpu", torch.bfloat16, False, True),
                t.cpu()]

    got = on_meta(build)
    assert [x.dtype for x in got] == [torch.float32, torch.float16, torch.int64,
                                      torch.bfloat16, torch.float32]
    assert all(x.is_meta for x in got)


class Logits(Tiny):
    """Tiny with a bigger table (its step is the peak) whose forward returns its logits: the
    loss lives in the training loop."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20 * V, D)

    def forward(self, ids: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return self.head(self.emb(ids).mean(1))


def test_logits_without_a_loss_price_the_stated_stand_in() -> None:
    """No `loss` for a forward that returns logits: the stand-in is cross-entropy over the
    last dimension on an fp32 copy of the logits held through the step, said in a note. At
    Adam's step peak it holds exactly that copy more than cross-entropy on the logits does
    (one [B, C] fp32 block, by hand); a non-floating output is still no loss."""
    b = 64
    ex = example(b)
    real = estimate_model(Logits, ex, loss=lambda out, x: F.cross_entropy(out, x[1]))
    stand = estimate_model(Logits, ex)
    assert real.peak_phase == stand.peak_phase == "step"
    assert stand.allocated_peak - real.allocated_peak == block(b * C * 4)
    assert [n for n in stand.notes if "stand-in" in n] == [n for n in stand.notes
                                                            if "cross-entropy" in n]
    assert not any("stand-in" in n for n in real.notes)

    class Ids(Tiny):
        def forward(self, ids: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
            return self.head(self.emb(ids).mean(1)).argmax(1)

    with pytest.raises(ConfigError, match="not a scalar loss"):
        estimate_model(Ids, ex)
