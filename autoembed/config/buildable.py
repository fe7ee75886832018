"""What a valid config's model or optimizers cannot do, told before anything is built
(`check_model_rules`): read by `models.check_buildable` (train, search) and by `estimate`'s
config, so a config that cannot train is refused where it is priced too. Pure Python."""

from __future__ import annotations

from autoembed.config.layout import WIDE_PREFIX, param_specs
from autoembed.config.value import EmbeddingConfig, resolved_tables
from autoembed.errors import ConfigError

__all__ = ["check_model_rules", "NO_SPARSE_DECAY"]

# torch's optimizers that take sparse gradients but cannot decay them (torch 2.13): Adagrad
# raises "weight_decay option is not compatible with sparse gradients", SGD raises
# "add(sparse, dense) is not supported", SparseAdam has no weight_decay argument.
NO_SPARSE_DECAY = ("sgd", "adagrad", "sparse_adam")


def check_model_rules(config: EmbeddingConfig) -> None:
    """Reject, with a ConfigError naming the value and the fix, what `config.validate` lets
    through but the model or its optimizers cannot do: idf pooling outside a text task, a
    weight decay on a table optimizer with sparse gradients, int4 serving of an odd width."""
    if config.pooling == "idf" and config.task != "text":
        raise ConfigError("config key 'pooling' = 'idf': weighs the tokens of text documents; "
                          f"use pooling mean for task {config.task}")
    for i, ts in enumerate(resolved_tables(config)):
        if config.weight_decay > 0 and ts.table_optimizer in NO_SPARSE_DECAY:
            key = "table_optimizer" if ts.table_optimizer == config.table_optimizer else (
                f"tables[{i}].table_optimizer")
            raise ConfigError(
                f"config key 'weight_decay' = {config.weight_decay!r}: {key} "
                f"'{ts.table_optimizer}' takes sparse gradients and cannot apply weight decay; "
                "set weight_decay 0, or use table_optimizer rowwise_adagrad, adam, adamw or "
                "momentum"
            )
    if config.serving == "int4":
        for s in param_specs(config):
            if s.kind == "table" and not s.name.startswith(WIDE_PREFIX) and s.shape[1] % 2:
                raise ConfigError(
                    f"config key 'dim' = {config.dim}: serving int4 packs two values a byte but "
                    f"'{s.name}' has {s.shape[1]} columns (qr concat stores dim/2); use a dim "
                    "divisible by 4, serving int8, or another qr_operation"
                )
