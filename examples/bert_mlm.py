"""BERT with its masked-LM head (Hugging Face `transformers`, built from a BertConfig: no
download), a large vocabulary, the MLM decoder tied to the word embeddings. The model
returns its own `.loss` when given labels.

    pip install -e '.[transformers]'
    python -m examples.bert_mlm
"""

from __future__ import annotations

import torch

SIZES = {
    "full": {"vocab": 500_000, "hidden": 768, "layers": 12, "heads": 12, "batch": 32,
             "seq": 512},
    "test": {"vocab": 200_000, "hidden": 128, "layers": 2, "heads": 2, "batch": 8, "seq": 64},
    "twin": {"vocab": 1000, "hidden": 16, "layers": 1, "heads": 2, "batch": 2, "seq": 8},
}


def build_model(vocab: int = 500_000, hidden: int = 768, layers: int = 12, heads: int = 12,
                **_: int) -> torch.nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * hidden,
                        max_position_embeddings=512, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    return BertForMaskedLM(config)


def make_example(vocab: int = 500_000, batch: int = 32, seq: int = 512,
                 **_: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, vocab, (batch, seq))
    labels = torch.full_like(ids, -100)
    labels[:, ::7] = ids[:, ::7]  # ~15% of positions are predicted
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def full_model() -> torch.nn.Module:
    return build_model(**SIZES["full"])


def full_example() -> dict[str, torch.Tensor]:
    return make_example(**SIZES["full"])


if __name__ == "__main__":
    import sys

    from examples._demo import demo

    demo(sys.modules[__name__])
