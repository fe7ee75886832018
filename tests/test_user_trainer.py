"""The executor's side of a user trial: a plain-data payload run on a node."""

from __future__ import annotations

import json

import pytest

import examples.text_search as ts
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.user.functions import FunctionRef, record_function
from autoembed.user.ship import StaleCode
from autoembed.user.trainer import make_payload, run_payload

PARAMS = {"dim": 8, "lr": 0.05, "batch_size": 64, "steps": 50}
CONFIG = EmbeddingConfig(tables=(TableConfig("embedding", ts.VOCAB, dim=8),))


def refs(**over: FunctionRef) -> dict[str, FunctionRef]:
    out = {r: record_function(f, r) for r, f in
           (("model", ts.build), ("example", ts.example), ("train", ts.train))}
    return {**out, **over}


def test_payload_is_plain_json() -> None:
    p = {**make_payload(refs(), PARAMS, CONFIG, metrics=("loss",), target=0.5), "number": 3}
    assert json.loads(json.dumps(p)) == p
    assert p["functions"]["train"]["qualname"] == "train"


def test_a_node_with_another_copy_refuses_before_building() -> None:
    stale = FunctionRef("examples.text_search", "train", "0" * 64)
    p = {**make_payload(refs(train=stale), PARAMS, CONFIG), "number": 0}
    with pytest.raises(StaleCode, match="node 7 has another copy of 'examples.text_search'"):
        run_payload(p, where="node 7")


def test_runs_the_users_loop_and_stops_on_the_channel() -> None:
    p = json.loads(json.dumps({**make_payload(refs(), PARAMS, CONFIG, metrics=("loss",)),
                               "number": 1}))
    final = run_payload(p, channel=lambda ev: ev.step < 25)
    assert final["status"] == "pruned"
    assert [e["step"] for e in final["result"]["curve"]] == [25]
