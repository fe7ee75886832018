"""The configs the estimator is validated on: every compression, precision and optimizer.

Shared by `gpu_validate.py` (measured on CUDA) and `estimator_accuracy.py` (CPU). Pure
Python over `autoembed.config`, so it runs with torch alone on the GPU machine.
"""

from __future__ import annotations

from autoembed.config import EmbeddingConfig, TableConfig

__all__ = ["validation_configs"]


def _text(v: int, d: int, **kw: object) -> EmbeddingConfig:
    base: dict[str, object] = dict(
        task="text", tables=(TableConfig("tokens", v),), dim=d, seq_len=512, batch_size=64,
        num_classes=4, dense_layers=(),
    )
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


def _ctr(**kw: object) -> EmbeddingConfig:
    base: dict[str, object] = dict(
        task="ctr",
        tables=(TableConfig("user", 4_000_000), TableConfig("item", 1_000_000),
                TableConfig("tags", 200_000, 4.0), TableConfig("city", 5_000)),
        dim=64, batch_size=4096, dense_layers=(256, 64),
    )
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


def validation_configs(scale: float = 1.0) -> dict[str, EmbeddingConfig]:
    """Named configs; `scale` shrinks vocabularies (e.g. 0.1 for a quick CPU run)."""
    v = max(1000, int(1_000_000 * scale))

    def ctr(**kw: object) -> EmbeddingConfig:
        c = _ctr(**kw)
        from dataclasses import replace

        tables = tuple(replace(t, vocab_size=max(100, int(t.vocab_size * scale))) for t in c.tables)
        return replace(c, tables=tables).resolve()

    return {
        "seed naive fp32 adam": _text(v, 300, pooling="naive"),
        "seed mean fp32 adam": _text(v, 300),
        "text fp16 adam": _text(v, 300, precision="fp16"),
        "text bf16 adam": _text(v, 300, precision="bf16"),
        "text fp16_master adam": _text(v, 300, precision="fp16_master"),
        "text bf16_master adamw": _text(v, 300, precision="bf16_master", table_optimizer="adamw",
                                        dense_optimizer="adamw"),
        "text amp_fp16 adam": _text(v, 300, precision="amp_fp16", dense_layers=(256,)),
        "text amp_bf16 adam": _text(v, 300, precision="amp_bf16", dense_layers=(256,)),
        "text hash 1/4 adam": _text(v, 300, compression="hash", hash_buckets=v // 4),
        "text qr mult adam": _text(v, 300, compression="qr", qr_collisions=4),
        "text qr concat adam": _text(v, 300, compression="qr", qr_collisions=8,
                                     qr_operation="concat"),
        "text qr add sgd": _text(v, 300, compression="qr", qr_collisions=4, qr_operation="add",
                                 table_optimizer="sgd", dense_optimizer="sgd"),
        "text sparse_adam": _text(v, 300, table_optimizer="sparse_adam"),
        "text rowwise_adagrad": _text(v, 300, table_optimizer="rowwise_adagrad",
                                      dense_optimizer="adagrad"),
        "text checkpointing naive": _text(v, 300, pooling="naive", checkpointing=True,
                                          dense_layers=(512,)),
        "text grad_accum 2 sparse sgd": _text(v, 300, table_optimizer="sgd",
                                              dense_optimizer="sgd", grad_accum_steps=2),
        "ctr fp32 adam": ctr(),
        "ctr momentum dot": ctr(table_optimizer="momentum", dense_optimizer="momentum",
                                interaction="dot"),
        "ctr adagrad": ctr(table_optimizer="adagrad", dense_optimizer="adagrad"),
        "ctr rowwise bf16_master": ctr(table_optimizer="rowwise_adagrad",
                                       dense_optimizer="adagrad", precision="bf16_master"),
        "ctr mixed_dim adam": ctr(compression="mixed_dim", mixed_dim_alpha=0.3),
        "ctr shared adam": ctr(compression="shared"),
        "ctr hash sparse_adam": ctr(compression="hash", hash_buckets=500_000,
                                    table_optimizer="sparse_adam"),
        "ctr amp_bf16 adam int8": ctr(precision="amp_bf16", serving="int8"),
    }
