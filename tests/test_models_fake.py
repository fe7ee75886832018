"""autoembed.models under FakeTensorMode: the traced memory estimator's view of one step."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake

from autoembed.batch import Batch
from autoembed.compression import takes_optimizer
from autoembed.config import (
    COMPRESSIONS,
    OPTIMIZERS,
    PRECISIONS,
    TABLE_ONLY_OPTIMIZERS,
    EmbeddingConfig,
    TableConfig,
)
from autoembed.models import make_trainer

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny tensors: one intra-op thread is faster than two (and fair on a shared CPU)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


SEED_SIZE = textwrap.dedent(
    """
    import json, resource, torch

    def peak_kib():
        # VmHWM: this process image's RSS high-water. ru_maxrss would do on its own, but
        # Linux carries it over from the parent across fork + exec (a big pytest process
        # would show through).
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    from torch._subclasses.fake_tensor import FakeTensorMode, is_fake
    from autoembed.batch import Batch
    from autoembed.config import EmbeddingConfig, TableConfig
    from autoembed.models import make_trainer

    config = EmbeddingConfig(
        task="text", tables=(TableConfig("tok", 1_000_000),), dim=300, num_classes=5,
        seq_len=512, batch_size=64, pooling="naive", table_optimizer="adam",
        dense_optimizer="adam", precision="fp32",
    )
    with FakeTensorMode():
        trainer = make_trainer(config, "cpu")
        batch = Batch({"tok": torch.randint(0, 1_000_000, (64, 512))}, torch.randint(0, 5, (64,)))
        loss = trainer.step([batch])
        w = trainer.model.tables["tok"].weight
        state = trainer.optimizers.table.state[w]
        print(json.dumps({
            "loss": str(loss),
            "fake": is_fake(w),
            "shape": list(w.shape),
            "state": sorted(k for k, v in state.items() if v.dim() > 0),
            "state_shape": list(state["exp_avg"].shape),
            "maxrss_kib": peak_kib(),
        }))
    """
)


def test_seed_size_step_under_fake_tensors_stays_small() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SEED_SIZE], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["fake"] and got["shape"] == [1_000_000, 300] and got["loss"] == "nan"
    assert got["state"] == ["exp_avg", "exp_avg_sq"] and got["state_shape"] == [1_000_000, 300]
    # for real: 1.2 GB table + 1.2 GB grad + 2.4 GB Adam state; fake: the interpreter + torch
    assert got["maxrss_kib"] < 1024 * 1024, got["maxrss_kib"]


def _ctr(compression: str, optimizer: str, precision: str, **kw: object) -> EmbeddingConfig:
    return EmbeddingConfig(
        tables=(TableConfig("a", 1000, pooling_factor=2.0, frequency=0.3), TableConfig("b", 40)),
        dim=16,
        dense_layers=(8,),
        compression=compression,
        hash_buckets=100,
        table_optimizer=optimizer,
        dense_optimizer="adam" if optimizer in TABLE_ONLY_OPTIMIZERS else optimizer,
        precision=precision,
        warmup_steps=2,
        **kw,  # type: ignore[arg-type]
    )


CASES = [
    (c, o, PRECISIONS[i % len(PRECISIONS)], ("mean", "naive", "sum")[i % 3])
    for i, (c, o) in enumerate(
        (c, o) for c in COMPRESSIONS for o in OPTIMIZERS if takes_optimizer(c, o)
    )
]


@pytest.mark.parametrize(("compression", "optimizer", "precision", "pooling"), CASES)
def test_every_kind_steps_under_fake_tensors(
    compression: str, optimizer: str, precision: str, pooling: str
) -> None:
    accum = 1 if precision.startswith("fp16") else 2
    config = _ctr(
        compression,
        optimizer,
        precision,
        pooling=pooling,
        grad_accum_steps=accum,
        checkpointing=pooling == "naive",
        interaction="dot" if accum == 2 else "concat",
    )
    with FakeTensorMode():
        trainer = make_trainer(config)
        a = torch.randint(-1, 1000, (16, 3))
        batch = Batch({"a": a, "b": torch.randint(0, 40, (16, 1))}, torch.rand(16))
        loss = trainer.step([batch] * accum)
        assert math.isnan(loss)
        assert all(is_fake(p) for p in trainer.model.parameters())
        assert trainer.predict(batch).shape == (16,)


@pytest.mark.parametrize("compression", ["none", "hash", "qr", "mixed_dim"])
def test_text_steps_under_fake_tensors(compression: str) -> None:
    config = EmbeddingConfig(
        task="text",
        tables=(TableConfig("tok", 5000),),
        dim=16,
        num_classes=4,
        seq_len=32,
        compression=compression,
        hash_buckets=100,
        table_optimizer="rowwise_adagrad",
        precision="amp_fp16",
    )
    with FakeTensorMode():
        trainer = make_trainer(config)
        ids = torch.randint(0, 5000, (8, 32))
        batch = Batch({"tok": ids}, torch.randint(0, 4, (8,)))
        loss = trainer.step([batch])
        assert math.isnan(loss)  # a fake step has no values
        tables = [p for p in trainer.model.tables.parameters() if p.requires_grad]
        assert tables and all(is_fake(p) for p in trainer.model.parameters())
        for p in tables:  # the step reached the table optimizer: one fake sum per row
            (total,) = trainer.optimizers.table.state[p].values()
            assert is_fake(total) and tuple(total.shape) == (p.shape[0],)
        assert trainer.predict(batch).shape == (8, 4)  # logits of the 4 classes
