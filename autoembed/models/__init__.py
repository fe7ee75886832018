"""Model building: the embedding model, its optimizers, precision, training step
and serving quantization. Everything here runs on CPU; see each module's docstring."""

from __future__ import annotations

from autoembed.models.device_precision import MasterWeights, check_supported
from autoembed.models.embedding_model import EmbeddingModel, build_model, loss_fn
from autoembed.models.optim import RowWiseAdagrad, build_optimizer, state_bytes
from autoembed.models.quantize import quantize, serving_bytes
from autoembed.models.step import Trainer, make_trainer
from autoembed.nn.hashing import hash_id_reference, hash_ids, qr_indices
from autoembed.nn.rowformat import pack_rows, row_bytes, unpack_rows

__all__ = ["EmbeddingModel", "build_model", "loss_fn", "RowWiseAdagrad", "build_optimizer",
           "state_bytes", "MasterWeights", "check_supported", "Trainer", "make_trainer",
           "quantize", "serving_bytes", "hash_ids", "hash_id_reference", "qr_indices",
           "pack_rows", "unpack_rows", "row_bytes"]
