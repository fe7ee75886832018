"""Search BERT's masked-LM training (examples/bert_mlm.py's model, CPU-sized layers) in your
own loop, under a memory budget: the compression of its tied vocabulary, the precision, and
batch x sequence.

    python -m examples.bert_search
    autoembed search --budget 1300MB --space examples/bert_search_space.yaml \\
        --model examples.bert_search:build --example examples.bert_search:example \\
        --train examples.bert_search:train --executor local

The word embeddings (50,000 x 64) are tied to the MLM decoder: autoembed rewrites the table
as the proposal says and the decoder reads the decoded table (`autoembed.apply`). The batch
x sequence sets the MLM logits ([batch, seq, 50,000]), the largest tensors of the step: the
budget binds on them. The data are synthetic token streams with a learnable rule (each
token 1 to 3 above the previous one, over the first 2,000 ids); the loop is AdamW with
the precision's autocast, and reports quality = minus the validation MLM loss (higher is
better).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from examples.bert_mlm import build_model

VOCAB, HIDDEN, LAYERS, HEADS = 50_000, 64, 2, 2
ACTIVE = 2_000  # ids the streams use
EVAL_EVERY = 20


def build(params: Mapping[str, Any]) -> torch.nn.Module:
    torch.manual_seed(params.get("seed", 0))
    return build_model(vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, heads=HEADS)


def batch(n: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    """n streams of `seq` tokens, every 7th position masked (to predict)."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, ACTIVE, (n, 1), generator=g)
    steps = torch.randint(1, 4, (n, seq - 1), generator=g)
    ids = torch.cat([start, start + steps.cumsum(1)], 1) % ACTIVE
    labels = torch.full_like(ids, -100)
    labels[:, 3::7] = ids[:, 3::7]
    inputs = ids.clone()
    inputs[:, 3::7] = 103  # BERT's [MASK] id
    return {"input_ids": inputs, "attention_mask": torch.ones_like(ids), "labels": labels}


def example(params: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """One batch as the forward takes it, at this trial's batch and sequence length."""
    return batch(params["batch_size"], params["seq_len"], 0)


def _autocast(params: Mapping[str, Any]) -> Any:
    amp = params["embedding"]["precision"] == "amp_bf16"
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp)


@torch.no_grad()
def validate(model: torch.nn.Module, params: Mapping[str, Any]) -> float:
    model.eval()
    with _autocast(params):
        loss = sum(float(model(**batch(16, params["seq_len"], 10_000 + i)).loss)
                   for i in range(4)) / 4
    model.train()
    return -loss


def train(model: torch.nn.Module, params: Mapping[str, Any], report: Any) -> dict[str, float]:
    """AdamW for `steps` steps, the validation MLM loss every EVAL_EVERY steps."""
    opt = torch.optim.AdamW(model.parameters(), lr=params["lr"])
    bs = params["batch_size"]
    for step in range(1, params["steps"] + 1):
        opt.zero_grad()  # the last step's gradients freed before the forward, as priced
        with _autocast(params):
            loss = model(**batch(bs, params["seq_len"], step)).loss
        loss.backward()
        opt.step()
        if step % EVAL_EVERY == 0:
            with report.evaluating():
                q = validate(model, params)
            report(step=step, samples=step * bs, quality=q, loss=float(loss))
    return {"quality": validate(model, params)}


if __name__ == "__main__":
    import autoembed

    result = autoembed.search(budget="1300MB", model=build, example=example, train=train,
                              space="examples/bert_search_space.yaml", executor="local")
    print(result)
