"""A GPT-style language model in plain torch: token + position embeddings, causal
self-attention blocks, and an output layer tied to the token embedding (the B x S x V logits
are usually the biggest activation).

    python -m examples.gpt_lm
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {
    "full": {"vocab": 256_000, "dim": 512, "layers": 4, "heads": 8, "batch": 8, "seq": 512},
    "test": {"vocab": 120_000, "dim": 128, "layers": 2, "heads": 4, "batch": 4, "seq": 64},
    "twin": {"vocab": 1000, "dim": 16, "layers": 1, "heads": 2, "batch": 2, "seq": 8},
}


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        att = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, max_len: int = 1024) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.tok.weight  # tied

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids[:, :-1]) + self.pos(pos[:-1])
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())


def build_model(vocab: int = 256_000, dim: int = 512, layers: int = 4, heads: int = 8,
                **_: int) -> GPT:
    return GPT(vocab, dim, layers, heads)


def make_example(vocab: int = 256_000, batch: int = 8, seq: int = 512, **_: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq + 1))


def full_model() -> GPT:
    return build_model(**SIZES["full"])


def full_example() -> torch.Tensor:
    return make_example(**SIZES["full"])


if __name__ == "__main__":
    import sys

    from examples._demo import demo

    demo(sys.modules[__name__])
