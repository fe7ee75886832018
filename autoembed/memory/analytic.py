"""Analytic memory model: closed-form bytes of one training step, in microseconds.

The step is zero_grad(set_to_none) -> forward -> backward -> table step -> dense step,
in steady state (optimizer state exists; it is created during the first step, while the
gradients are alive, so the first step peaks at the same figure). Three phases are priced
and the largest is the peak (models/step.py):

  static   = parameters + fp32 masters + optimizer state            (always live)
  backward = static + gradients + held + what the tables saved + the larger of two stages:
             the dense stage (interaction and tower saved blocks and their backward
             transients) and the tables' stage, after those are freed (the interaction
             input's gradient, the largest lookup's transient, sparse values copies);
             under *_master also static + held + fp32 master grads + the largest half
             gradient (the conversion after backward, one parameter at a time)
  step     = static + gradients (fp32 master grads under *_master) + held + optimizer
             temporaries, where held is what the step's caller still holds: the last
             micro-batch (ids and labels), its logits and its loss

Every tensor is priced as the CUDA caching allocator would hand it out (512 B blocks); the
step adds `split_slack`, an allowance for the large-pool blocks the allocator hands out
whole (its rest unsplit), which the order of allocations decides. The reserved peak bounds
the allocator's segments for every block of the step, each kept once (`_phases`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from autoembed.compression import hot_cold_state_bytes
from autoembed.config import (
    WIDE_PREFIX,
    EmbeddingConfig,
    ParamSpec,
    param_specs,
    precision_policy,
    resolved_tables,
)
from autoembed.memory.computed import computed_activations
from autoembed.memory.types import (
    CUDA_CONTEXT_BYTES,
    LARGE_SEGMENT,
    MIN_LARGE_ALLOC,
    ROUND_LARGE,
    SMALL_SIZE,
    GpuShare,
    MemoryEstimate,
    TableMemory,
    overhead_bytes,
    reserved_bound,
    round_block,
)

__all__ = ["analytic_estimate", "sparse_terms", "sparse_gradient", "SparseGradient",
           "optimizer_state_bytes", "serving_row_bytes", "STATE_MULTIPLIER", "with_host_cache",
           "split_slack"]

# Optimizer state tensors per parameter element (TorchRec shard_estimators
# `_get_optimizer_multipler`; torch.optim sources). rowwise_adagrad is per row, priced apart.
STATE_MULTIPLIER = {
    "sgd": 0,
    "momentum": 1,
    "adam": 2,
    "adamw": 2,
    "adagrad": 1,
    "sparse_adam": 2,
    "rowwise_adagrad": 0,
}
# FBGEMM row-wise Adagrad keeps one fp32 accumulator per row (docs/contracts.md#optimizer-state).
ROWWISE_STATE_BYTES = 4
# Param-sized temporaries of the foreach (multi-tensor) step on dense gradients, the path
# CUDA takes by default (torch/optim/*.py `_multi_tensor_*`): Adam/AdamW allocate
# exp_avg_sq_sqrt (1x); Adagrad allocates sqrt(state_sum) and grad * -clr (2x); SGD and
# momentum update in place (0x).
FOREACH_TEMPORARIES = {"sgd": 0, "momentum": 0, "adam": 1, "adamw": 1, "adagrad": 2}
# Row-sized temporaries of the sparse step, in coalesced-gradient rows (beyond the coalesced
# copy itself): SparseAdam builds old exp_avg/exp_avg_sq values, two update values and the
# final update (torch/optim/sparse_adam.py); Adagrad's sparse path builds grad^2, std and the
# update (torch/optim/adagrad.py); row-wise Adagrad the scaled update (models/optim.py);
# plain SGD adds the coalesced gradient in place.
SPARSE_TEMPORARIES = {"sgd": 0, "adagrad": 3, "sparse_adam": 5, "rowwise_adagrad": 1}
INDEX_BYTES = 8  # int64 ids, offsets and sparse-gradient indices
LOSS_BYTES = 4  # the fp32 scalar loss
LABEL_BYTES = {"ctr": 4, "text": 8}  # fp32 click labels, int64 class indices
# FBGEMM inference rows: int8 D + 4 (fp16 scale and bias), int4 D/2 + 4, aligned to 16 B.
ROW_ALIGN = 16
SCALE_BIAS_BYTES = 4


def serving_row_bytes(serving: str, dim: int, param_bytes: int) -> int:
    if serving == "int8":
        return ROW_ALIGN * math.ceil((dim + SCALE_BIAS_BYTES) / ROW_ALIGN)
    if serving == "int4":
        return ROW_ALIGN * math.ceil((dim // 2 + SCALE_BIAS_BYTES) / ROW_ALIGN)
    return dim * param_bytes


def optimizer_state_bytes(optimizer: str, spec: ParamSpec, state_bytes: int) -> int:
    if optimizer == "rowwise_adagrad":
        return round_block(spec.rows * ROWWISE_STATE_BYTES)
    return STATE_MULTIPLIER[optimizer] * round_block(spec.numel * state_bytes)


def _state_blocks(optimizer: str, spec: ParamSpec, state_bytes: int) -> list[int]:
    """The blocks of `optimizer_state_bytes`, one per state tensor."""
    if optimizer == "rowwise_adagrad":
        return [optimizer_state_bytes(optimizer, spec, state_bytes)]
    return [round_block(spec.numel * state_bytes)] * STATE_MULTIPLIER[optimizer]


@dataclass(frozen=True)
class _Priced:
    params: list[int]
    masters: list[int]
    state: list[int]
    grads: list[int]
    master_grads: list[int]
    activations: list[int]  # everything saved for backward, and what the step holds
    backward_transient: list[int]  # the transients of the larger backward stage
    backward_live: list[int]  # the larger backward stage's blocks beyond static and grads
    step_temporaries: list[int]
    table_rows: list[TableMemory]
    serving: int
    sparse_grads: int  # sparse table gradients (param dtype), live from backward to the step
    sparse_step_grads: int  # the same in the step (fp32 under *_master)
    sparse_temporaries: int  # the largest sparse optimizer step's temporaries
    held: list[int]  # live through the step: the last micro-batch, its logits and loss
    bookkeeping: list[int] = field(default_factory=list)  # host_cached: cache slot tables
    # every block the step allocates on the traced path, each once (`reserved_bound`), and
    # the blocks priced by formula in both estimates: the sparse gradients and the largest
    # sparse step's temporaries
    every_block: list[int] = field(default_factory=list)
    sparse_step_blocks: list[int] = field(default_factory=list)


def _price(config: EmbeddingConfig, specs: Sequence[ParamSpec], batch: int) -> _Priced:
    pol = precision_policy(config.precision)
    pb, sb = pol.param_bytes, pol.state_bytes
    acc = config.grad_accum_steps
    params: list[int] = []
    masters: list[int] = []
    state: list[int] = []
    grads: list[int] = []
    master_grads: list[int] = []
    table_temps: dict[str, list[int]] = {}  # foreach: all of each table optimizer's group
    sparse_temps: list[list[int]] = []  # per-tensor loop: only the largest is live
    sparse_g = sparse_mg = 0
    sparse_blocks: list[int] = []  # the sparse gradients' blocks in the step
    dense_grads: list[int] = []  # the gradients the trace sees (dense, and their masters)
    dense_temps: list[int] = []
    serving = 0
    per_table: dict[str, list[int]] = {}
    table_dims: dict[str, tuple[int, int]] = {}
    for s in specs:
        is_table = s.kind == "table"
        opt = s.optimizer
        p = round_block(s.numel * pb)
        params.append(p)
        if pol.master:
            masters.append(round_block(s.numel * 4))
        st = optimizer_state_bytes(opt, s, sb)
        state += _state_blocks(opt, s, sb)
        dim = s.shape[1] if len(s.shape) > 1 else 1
        if s.sparse:
            lookups = math.ceil(batch * s.lookups_per_sample) * acc
            sg = sparse_gradient(lookups, dim, s.rows, opt, config.precision)
            g, mg = sg.backward, sg.step  # mg: the fp32 master gradient under *_master
            sparse_temps.append(list(sg.temporaries))
            sparse_g += g
            sparse_mg += sg.step
            sparse_blocks += sg.step_blocks
        else:
            g = round_block(s.numel * pb)
            mg = round_block(s.numel * 4)
            dense_grads += [g, mg] if pol.master else [g]
            tmp = [round_block(s.numel * sb)] * FOREACH_TEMPORARIES[opt]
            if is_table:
                table_temps.setdefault(opt, []).extend(tmp)
            else:
                dense_temps.extend(tmp)
        grads.append(g)
        if pol.master:
            master_grads.append(mg)
        # wide (per-id bias) tables serve unquantized, like the tower, and are listed apart
        # from the field's deep table (as wide.<field>)
        wide = s.name.startswith(WIDE_PREFIX)
        if is_table and not wide:
            srv = s.rows * serving_row_bytes(config.serving, dim, pb)
        else:
            srv = s.numel * pb
        if is_table:
            key = f"{WIDE_PREFIX}{s.table}" if wide else (s.table or s.name)
            acc_t = per_table.setdefault(key, [0, 0, 0, 0])
            acc_t[0] += p + (masters[-1] if pol.master else 0)
            acc_t[1] += g
            acc_t[2] += st
            acc_t[3] += srv
            r, d = table_dims.get(key, (0, 0))
            table_dims[key] = (r + s.rows, max(d, dim))
        serving += srv
    # the optimizers step one after another: the largest step's temporaries are the peak's
    step_temps = max([*table_temps.values(), *sparse_temps, dense_temps], key=sum)
    foreach_temps = [b for group in table_temps.values() for b in group] + dense_temps
    bookkeeping = []
    if config.placement == "host_cached":
        from autoembed.memory.cache_model import SLOT_BOOKKEEPING_TENSORS

        for s in specs:
            if s.kind == "table":
                bookkeeping += [round_block(s.rows * 8)] * SLOT_BOOKKEEPING_TENSORS
    here = {s.table for s in specs if s.kind == "table"}
    bookkeeping += [  # hot_cold: the sorted hot-id array (a buffer)
        round_block(hot_cold_state_bytes(ts.vocab_size, ts.hot_share))
        for ts in resolved_tables(config) if ts.compression == "hot_cold" and ts.name in here
    ]
    if config.pooling == "idf":  # each table's idf weights: a buffer of V values, served too
        for ts in resolved_tables(config):
            if ts.name in here:
                bookkeeping.append(round_block(ts.vocab_size * pb))
                serving += ts.vocab_size * pb
                per_table[ts.name][3] += ts.vocab_size * pb
    saved = _activations(config, specs, batch)
    tower_stage = [*saved.dense, *saved.dense_transient]
    table_stage = saved.table_transient
    stage, transient = max(
        [(tower_stage, saved.dense_transient), (table_stage, saved.table_transient)],
        key=lambda st: sum(st[0]),
    )
    acts = [*saved.held, *saved.tables, *saved.dense]
    freed = [*saved.dense_transient, *saved.table_transient]
    rows = [TableMemory(k, table_dims[k][0], table_dims[k][1], *v) for k, v in per_table.items()]
    return _Priced(
        params,
        masters,
        state,
        grads,
        master_grads,
        acts,
        transient,
        [*saved.held, *saved.tables, *stage],
        step_temps,
        rows,
        serving,
        sparse_g,
        sparse_mg,
        max(map(sum, sparse_temps), default=0),
        saved.held,
        bookkeeping,
        [*params, *masters, *_state_in_freed(state, [*saved.tables, *saved.dense, *freed]),
         *bookkeeping, *dense_grads, *acts, *freed, *foreach_temps],
        [*sparse_blocks, *max(sparse_temps, key=sum, default=[])],
    )


@dataclass(frozen=True)
class _Saved:
    """The blocks of the forward and backward, in the two stages of the backward: the dense
    stage (tower and interaction) runs first, with everything saved still live; the tables'
    stage follows, once the dense stage's saved blocks are freed."""

    held: list[int]  # live through the step: the last micro-batch, its logits and its loss
    tables: list[int]  # saved by the tables' lookups: live until the tables' stage
    dense: list[int]  # saved by the interaction and the tower: freed before the tables' stage
    dense_transient: list[int]  # live in the dense stage: its largest transient
    table_transient: list[int]  # live in the tables' stage: the largest lookup's transient,
    # the interaction input's gradient and the largest sparse gradient's values copy


def _activations(config: EmbeddingConfig, specs: Sequence[ParamSpec], batch: int) -> _Saved:
    """What the forward saves for backward and what each backward stage adds, as `_Saved`
    (models/step.py `Trainer.step` holds the last micro-batch, its logits and its loss until
    it returns)."""
    pol = precision_policy(config.precision)
    emb_b = pol.param_bytes  # autocast leaves embedding lookups in the parameter dtype
    tower_b = 2 if pol.autocast_dtype else pol.param_bytes
    acts: list[int] = []
    transient = 0
    settings = {ts.name: ts for ts in resolved_tables(config)}
    # The batch itself (autoembed/batch.py): int64 id matrices and the labels.
    held = [round_block(batch * math.ceil(config.lookups_per_sample(t)) * INDEX_BYTES)
            for t in config.tables]
    held.append(round_block(batch * LABEL_BYTES[config.task]))
    computed: set[str] = set()
    sparse_copies: list[int] = []
    for s in specs:
        if s.kind != "table":
            continue
        ts = settings.get(s.table or "")
        # robe / tt fields (a shared robe array: every field of its group), once per field
        fields = [settings[n] for n in (s.table or "").split(",") if n in settings]
        if fields and all(f.compression in ("robe", "tt") for f in fields) and not (
            s.name.startswith(WIDE_PREFIX)
        ):
            for ts in fields:
                if ts.name in computed:  # once per table, not per core
                    continue
                computed.add(ts.name)
                saved, tmp = computed_activations(
                    ts.compression, batch=batch, width=math.ceil(ts.lookups), dim=ts.dim,
                    element_bytes=emb_b, pooling=config.pooling, text=config.task == "text",
                    rank=ts.tt_rank, block=ts.robe_block,
                )
                acts += [*saved, round_block(batch * ts.dim * emb_b)]  # and the pooled output
                transient = max(transient, tmp)
            continue
        dim = s.shape[1]
        lookups = math.ceil(batch * s.lookups_per_sample)
        if s.sparse:  # the sparse backward's values copy of the lookup gradient (one at a time)
            sparse_copies.append(round_block(lookups * dim * emb_b))
        wide = s.name.startswith(WIDE_PREFIX)
        # text ids index an unhashed table as they are (PlainTable.pads_in_place)
        in_place = (config.task == "text" and ts is not None and not ts.qr
                    and ts.hashed[1] is None)
        if ts is not None and ts.qr and config.pooling == "naive" and not wide:
            if s.table not in computed:  # both parts at once, on the first
                computed.add(s.table or "")
                saved, tmp = _qr_naive(ts.qr_operation, lookups, dim, emb_b)
                acts += [*saved, round_block(batch * ts.dim * emb_b)]  # and the pooled output
                transient = max(transient, tmp)
            continue
        if config.pooling == "naive":
            # [B, L, D] (or [lookups, D]) lookups materialised in forward and as the gradient
            # of the lookup in backward (mean pooling's backward expands then divides).
            rows = 2 * round_block(lookups * dim * emb_b)
            if not in_place:  # the valid mask [lookups] (bool), alive through the lookup
                rows += round_block(lookups)
                # saved: the ids the lookup reads (clamped or hashed) and rows * valid's mask
                acts += [round_block(lookups * INDEX_BYTES), round_block(lookups * emb_b)]
            transient = max(transient, rows)
        else:
            # embedding_bag bookkeeping saved for backward: indices, offset2bag, offsets,
            # bag_size, max_indices (aten/src/ATen/native/EmbeddingBag.cpp).
            acts.append(
                round_block(lookups * INDEX_BYTES) * 2 + 3 * round_block(batch * INDEX_BYTES)
            )
            if not in_place and not s.sparse:
                # `_bags`: per_sample_weights (valid as the dtype) and the mean's divisor
                acts.append(round_block(lookups * emb_b))
                if config.pooling == "mean":
                    acts.append(round_block(batch * emb_b))
            if not in_place:  # forward: the ids read (clamped or hashed), valid, the sum
                transient = max(transient, round_block(lookups * INDEX_BYTES)
                                + round_block(lookups) + round_block(batch * dim * emb_b))
            if config.pooling == "idf":  # the bag's weights and their sums, saved
                acts += [round_block(lookups * emb_b), round_block(batch * emb_b)]
        acts.append(round_block(batch * dim * emb_b))  # pooled output
    f = len(config.tables)
    d = config.dim
    width_out = 1 if config.task == "ctr" else config.num_classes
    grad_in = round_block(batch * f * d * emb_b)  # the interaction input's gradient
    dense = [round_block(batch * f * d * emb_b)]  # interaction input (concat / stack)
    dense_t = grad_in
    for s in specs:  # a hidden layer's backward: its output's gradient, ReLU's, its input's
        if s.name.startswith("tower.") and s.name.endswith(".weight") and s.shape[0] != width_out:
            out, inp = s.shape
            dense_t = max(dense_t, 2 * round_block(batch * out * tower_b)
                          + round_block(batch * inp * tower_b))
    if config.task == "ctr" and config.interaction == "dot" and f > 1:
        # backward of mean(stacked) and bmm(stacked, stacked^T): the mean's gradient, the
        # two bmm gradients [B, F, D] and the gram's gradient [B, F, F] (index_put)
        dense_t = max(dense_t, 3 * grad_in + round_block(batch * f * f * emb_b))
    tower = [s for s in specs if s.name.startswith("tower.") and s.name.endswith(".weight")]
    # a layer's saved input is the previous layer's ReLU output, and the first layer's the
    # concat (the interaction input above) unless dot builds it apart or autocast halves it
    dot = config.task == "ctr" and config.interaction == "dot"
    for k, s in enumerate(tower):
        out, inp = s.shape
        if pol.autocast_dtype:  # autocast caches a half copy of each weight for the forward
            dense.append(round_block(out * inp * 2))
            if k == 0:
                dense.append(round_block(batch * inp * 2))  # the half input it saves
        elif k == 0 and dot:
            dense.append(round_block(batch * inp * tower_b))
        if out != width_out:
            dense.append(round_block(batch * out * tower_b))  # ReLU output
    held.append(round_block(batch * width_out * 4))  # logits (fp32 bounds the half ones)
    held.append(round_block(LOSS_BYTES))
    return _Saved(held, acts, dense, [dense_t], [grad_in, transient, max(sparse_copies, default=0)])


def _qr_naive(operation: str, lookups: int, part_dim: int, emb_b: int) -> tuple[list[int], int]:
    """(saved blocks, backward transient) of a qr table's naive lookup (models/embedding.py
    `QRTable._naive`): each part's rows are masked (rows * valid, which saves the cast mask
    [lookups, 1]) and the embedding saves its ids (quotient, remainder: int64 [lookups]);
    mult saves both masked parts [lookups, Dq]. In backward the mean's gradient [lookups, D]
    and the two parts' gradients [lookups, Dq] are live together."""
    rows = round_block(lookups * part_dim * emb_b)
    saved = 2 * [round_block(lookups * INDEX_BYTES), round_block(lookups * emb_b)]
    if operation == "mult":
        saved += [rows, rows]
    full = 2 * part_dim if operation == "concat" else part_dim
    return saved, round_block(lookups * full * emb_b) + 2 * rows


def split_slack(blocks: Sequence[int]) -> int:
    """An allowance for the bytes the caching allocator adds to `blocks` by not splitting.

    A large-pool request (over 1 MiB) takes a whole free block when the rest would be at most
    1 MiB (CUDACachingAllocator.cpp `should_split`), and max_memory_allocated counts whole
    blocks: a rest left at a segment's end, or by a freed block reused for a smaller request,
    rides along. Which blocks get one depends on the order of allocations and frees (the
    traced estimate replays it). Priced: a large block (10 MiB and over) gets its segment's
    end or 1 MiB when a block up to 20 MiB larger may be freed for it (`_large_rest`);
    mid-size blocks of several sizes 1 MiB per 20 MiB of them; of one size, which reuse each
    other's blocks exactly, the end of each full 20 MiB segment (when at most 1 MiB).
    Measured on traced steps: never above this.
    """
    mid = [b for b in blocks if SMALL_SIZE < b < MIN_LARGE_ALLOC]
    large = [b for b in blocks if b >= MIN_LARGE_ALLOC]
    sizes = set(mid + large)
    total = sum(_large_rest(b, sizes) for b in large)
    if len(set(mid)) > 1 or (mid and large):
        return total + SMALL_SIZE * -(-sum(mid) // LARGE_SEGMENT)
    if mid:
        rest = LARGE_SEGMENT % mid[0]
        full = len(mid) // (LARGE_SEGMENT // mid[0])
        return total + (full * rest if rest <= SMALL_SIZE else 0)
    return total


def _large_rest(block: int, sizes: set[int]) -> int:
    """`split_slack` of one large block: its segment's end (rounded up to 2 MiB) when at most
    1 MiB, or 1 MiB when a block of another size up to 20 MiB larger may be freed for it."""
    if any(block < s <= block + LARGE_SEGMENT for s in sizes):
        return SMALL_SIZE
    rest = -block % ROUND_LARGE
    return rest if rest <= SMALL_SIZE else 0


def _state_in_freed(state: list[int], transients: list[int]) -> list[int]:
    """The optimizer state's blocks as the segments they may cost: state is created in the
    first step, once the backward has freed its transients, and best fit hands a large state
    block (>= 10 MiB) the smallest freed transient at least its size, whose tensor then needs
    a new segment in the next step: such a state block costs that transient's block."""
    large = sorted(b for b in transients if b >= MIN_LARGE_ALLOC)
    return [next((b for b in large if b >= s), s) if s >= MIN_LARGE_ALLOC else s for s in state]


def _phases(pr: _Priced) -> tuple[int, int, str]:
    """(allocated peak, reserved peak, phase) of the larger of the backward and the step.

    The reserved peak is `types.reserved_bound` of every block the step allocates, each
    once, as if none were freed: segments are never returned, and one freed in one phase may
    not fit the next phase's blocks (a backward's 256 MiB activations cannot hold the step's
    1 GB Adam temporary), so no phase's blocks alone bound them. The sparse gradients and
    the sparse step's temporaries (formula in both estimates: a fake step cannot size them)
    count among those blocks, or, where more, as the bytes the traced estimate adds."""
    static = [*pr.params, *pr.masters, *pr.state, *pr.bookkeeping]
    backward = [*static, *pr.backward_live, *pr.grads]
    step = [*static, *(pr.master_grads or pr.grads), *pr.held, *pr.step_temporaries]
    # the allowance is measured and priced for the step only (docs/ARCHITECTURE.md)
    priced = [(sum(step) + split_slack(step), "step"), (sum(backward), "backward")]
    if pr.master_grads:  # after backward, half gradients become fp32 ones one at a time
        to_master = [*static, *pr.held, *pr.master_grads, max(pr.grads)]
        priced.append((sum(to_master), "backward"))
    peak, phase = max(priced, key=lambda p: p[0])  # a tie is the step's
    blocks = pr.every_block
    # the sparse blocks in the same segments, or (if more) added whole, as the traced adds them
    reserved = max(reserved_bound([*blocks, *pr.sparse_step_blocks]),
                   reserved_bound(blocks) + sum(pr.sparse_step_blocks))
    return peak, reserved, phase


def _shard_specs(config: EmbeddingConfig, gpus: int, sharding: str) -> list[list[ParamSpec]]:
    """Per-GPU parameter lists: tables placed whole (table-wise, greedy largest-first onto
    the least-loaded GPU) or split by rows (row-wise); dense parts replicated. Each table
    shard serves the global batch (gpus x batch_size), spread evenly over its shards."""
    from dataclasses import replace as dc_replace

    specs = param_specs(config)
    dense = [s for s in specs if s.kind != "table"]
    tables = [s for s in specs if s.kind == "table"]
    out: list[list[ParamSpec]] = [list(dense) for _ in range(gpus)]
    if sharding == "row":
        for s in tables:
            rows = -(-s.rows // gpus)  # integer ceil: exact for any row count
            for g in range(gpus):
                out[g].append(dc_replace(s, shape=(rows, *s.shape[1:])))
        return out
    groups: dict[str, list[ParamSpec]] = {}
    for s in tables:
        groups.setdefault(s.table or s.name, []).append(s)
    load = [0] * gpus
    for _, group in sorted(groups.items(), key=lambda kv: -sum(x.numel for x in kv[1])):
        g = load.index(min(load))
        load[g] += sum(x.numel for x in group)
        out[g].extend(dc_replace(x, lookups_per_sample=x.lookups_per_sample * gpus) for x in group)
    return out


def analytic_estimate(
    config: EmbeddingConfig,
    *,
    gpus: int = 1,
    sharding: str = "table",
    reserve: int = 0,
    context_bytes: int = CUDA_CONTEXT_BYTES,
) -> MemoryEstimate:
    """Price `config` in closed form. With gpus > 1 the figures are those of the fullest GPU."""
    config = config.resolve()
    _check_host_cached_gpus(config, gpus)
    overhead = overhead_bytes(reserve, context_bytes)
    shares: list[tuple[_Priced, int, int, str, list[ParamSpec]]] = []
    shard_lists = [list(param_specs(config))] if gpus == 1 else _shard_specs(config, gpus, sharding)
    for specs in shard_lists:
        pr = _price(config, specs, config.batch_size)
        peak, reserved, phase = _phases(pr)
        shares.append((pr, peak, max(reserved, peak), phase, specs))
    worst = max(range(len(shares)), key=lambda i: shares[i][2])
    pr, peak, reserved, phase, _ = shares[worst]
    full = shares[0][0] if gpus == 1 else _price(config, param_specs(config), config.batch_size)
    per_gpu: tuple[GpuShare, ...] = ()
    if gpus > 1:
        per_gpu = tuple(
            GpuShare(
                i,
                tuple(sorted({s.table or s.name for s in sp if s.kind == "table"})),
                pk,
                rs + overhead,
            )
            for i, (_, pk, rs, _, sp) in enumerate(shares)
        )
    est = MemoryEstimate(
        method="analytic",
        parameters=sum(pr.params) + sum(pr.masters),
        gradients=max(sum(pr.grads), sum(pr.master_grads)),
        optimizer_state=sum(pr.state),
        activations=sum(pr.activations),
        temporaries=sum(pr.step_temporaries) + sum(pr.backward_transient),
        allocated_peak=peak,
        reserved_peak=reserved,
        overhead=overhead,
        device_total=reserved + overhead,
        serving_bytes=full.serving,
        tables=tuple(full.table_rows),
        peak_phase=phase,
        gpus=gpus,
        sharding=sharding,
        per_gpu=per_gpu,
    )
    return with_host_cache(est, config)


def _check_host_cached_gpus(config: EmbeddingConfig, gpus: int) -> None:
    if config.placement == "host_cached" and gpus != 1:
        from autoembed.errors import ConfigError

        raise ConfigError(
            f"gpus = {gpus}: placement host_cached is priced for one GPU (its cache); use "
            "--gpus 1, or placement device to shard the tables"
        )


def with_host_cache(est: MemoryEstimate, config: EmbeddingConfig) -> MemoryEstimate:
    """`est` with the host bytes and cache pricing of a host_cached config (unchanged for
    placement device). The device bookkeeping is already in the peak."""
    if config.placement != "host_cached":
        return est
    from autoembed.memory.cache_model import cache_tables

    cache = cache_tables(config)
    return replace(est, host_bytes=sum(c.host_bytes for c in cache), cache=cache)


@dataclass(frozen=True)
class SparseGradient:
    """One table's sparse gradient (one row per id looked up:
    docs/contracts.md#sparse-gradients) and its sparse
    optimizer step, in 512 B blocks: `backward`, its values (parameter dtype) and int64
    indices, live from the backward; `step_blocks`, the same in the step (fp32 values under
    *_master); `temporaries`, the step's coalesced copy (values and indices of the distinct
    rows) and the optimizer's row-sized temporaries (`SPARSE_TEMPORARIES`)."""

    backward: int
    step_blocks: tuple[int, int]
    temporaries: tuple[int, ...]

    @property
    def step(self) -> int:
        return sum(self.step_blocks)


def sparse_gradient(
    lookups: int, dim: int, rows: int, optimizer: str, precision: str
) -> SparseGradient:
    """`SparseGradient` of a [rows, dim] table looked up `lookups` times in a step and stepped
    by `optimizer` (a name of `SPARSE_TEMPORARIES`; another steps like sgd) at `precision`."""
    pol = precision_policy(precision)
    pb, sb = pol.param_bytes, pol.state_bytes
    grad_b = 4 if pol.master else pb
    index = round_block(lookups * INDEX_BYTES)
    uniq = min(rows, lookups)
    return SparseGradient(
        backward=round_block(lookups * dim * pb) + index,
        step_blocks=(round_block(lookups * dim * grad_b), index),
        temporaries=(round_block(uniq * dim * grad_b), round_block(uniq * INDEX_BYTES),
                     *[round_block(uniq * dim * sb)] * SPARSE_TEMPORARIES.get(optimizer, 0)),
    )


def sparse_terms(config: EmbeddingConfig) -> tuple[int, int, int]:
    """(sparse gradients, the same during the step, largest sparse-step temporaries) in
    bytes: what a fake-tensor trace cannot see, since a sparse gradient's row count is
    data-dependent (docs/contracts.md#sparse-gradients)."""
    config = config.resolve()
    pr = _price(config, param_specs(config), config.batch_size)
    return pr.sparse_grads, pr.sparse_step_grads, pr.sparse_temporaries
