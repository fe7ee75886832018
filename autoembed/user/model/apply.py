"""Rewrite a user's model in place by a config: `apply`, `tables`, `materialize`.

`apply(model, config)` replaces each nn.Embedding / nn.EmbeddingBag the config names by module
path with an `autoembed.nn` layer of the table's resolved settings (a table whose settings
change nothing keeps the user's module); what the layer cannot do as torch does is refused
in one line naming the option and the module. What it takes, keeps, ties, starts from and
refuses: docs/apply.md (a `transformers` model's ties: docs/own_model.md). Under
``placement: host_cached`` every named table becomes a host-cached layer of
``cache_rows(config, table)`` device rows. `materialize(model, device)` allocates, re-ties
and initialises a model built on the meta device (and only such a model).
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import functools
import math
import os
import sys
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from autoembed.errors import ConfigError, did_you_mean
from autoembed.models.table_modules import EMBEDDING_TYPES, embedding_modules

__all__ = ["apply", "tables", "materialize", "checkpoint_modules"]

# set on a module whose tied weight(s) are decoded tables: parameter name -> the layer
DECODED = "_autoembed_decoded"
CHECKPOINTED = "_autoembed_checkpointed"  # set on a module whose forward is checkpointed
UNTIED = "_autoembed_untied"  # on a head `untie` gave its own weight: {parameter: its layer}


def tables(model: nn.Module) -> tuple[Any, ...]:
    """The model's embedding modules as config table entries (name = module path)."""
    from autoembed.config import TableConfig

    _a_module(model, "tables")
    out = []
    for path, m in embedding_modules(model):
        m = cast(Any, m)
        out.append(TableConfig(name=path, vocab_size=int(m.num_embeddings),
                               dim=int(m.embedding_dim)))
    if not out:
        raise ConfigError(f"model {type(model).__name__} has no nn.Embedding or "
                          "nn.EmbeddingBag; autoembed rewrites embedding tables")
    return tuple(out)


def _module(model: nn.Module, path: str) -> Any:
    names = [p for p, _ in embedding_modules(model)]
    try:
        m = model.get_submodule(path)
    except AttributeError:
        hint = did_you_mean(path, names) or f"; its tables: {', '.join(names)}"
        raise ConfigError(f"config table '{path}': the model has no module '{path}'{hint}") \
            from None
    if not isinstance(m, EMBEDDING_TYPES):
        raise ConfigError(f"config table '{path}': module '{path}' is a {type(m).__name__}, not "
                          "an nn.Embedding or nn.EmbeddingBag")
    return m


def _check_forward(old: nn.Module, path: str) -> None:
    """A module whose class has a forward of its own (a scaled embedding, say) is refused: the
    rewritten layer would drop what that forward adds."""
    from autoembed import nn as ae_nn

    own = type(old).forward
    if own not in (nn.Embedding.forward, nn.EmbeddingBag.forward, ae_nn.Embedding.forward,
                   ae_nn.EmbeddingBag.forward):
        raise ConfigError(f"config table '{path}': module '{path}' is a {type(old).__name__}, "
                          "whose forward is its own, which a rewritten layer would drop; "
                          "compress a plain nn.Embedding / nn.EmbeddingBag, or leave it out")


def _check_frozen(old: Any, ts: Any) -> None:
    """A frozen table with values (pretrained rows, say) is refused unless fitted: its
    rewritten layer would start at random draws that never train. On the meta device there
    are no values to lose; fake tensors (a priced trace) stand for real ones, so a search
    refuses it when it prices, as its trial would when it trains."""
    w = old.weight
    if w.requires_grad or w.is_meta:
        return
    how = f"compression {ts.compression}" if ts.dim == old.embedding_dim else f"dim {ts.dim}"
    raise ConfigError(f"config table '{ts.name}': module '{ts.name}' is frozen (requires_grad "
                      f"False), so under {how} its rows would start at random and never "
                      "train; apply with from_trained=True (fitted to its values; in a search, "
                      "an apply= that passes it), or leave it out")


def _tied(model: nn.Module, weight: torch.Tensor, skip: nn.Module) -> list[tuple[str, str]]:
    """(module path, parameter name) of other modules holding `weight` itself."""
    out = []
    for path, m in model.named_modules():
        if m is skip:
            continue
        for name, p in m.named_parameters(recurse=False):
            if p is weight:
                out.append((path, name))
    return out


# compression -> (layer setting, resolved table setting) it takes from the config
_SETTINGS = {
    "hash": (("hash_buckets", "hash_buckets"), ("hash_seed", "hash_seed")),
    "qr": (("qr_collisions", "qr_collisions"), ("qr_operation", "qr_operation")),
    "robe": (("robe_size", "robe_size"), ("robe_block", "robe_block"), ("hash_seed", "hash_seed")),
    "tt": (("tt_rank", "tt_rank"),),
    "hot_cold": (("hot_share", "hot_share"), ("hash_buckets", "cold_buckets"),
                 ("hash_seed", "hash_seed")),
}
# torch's options a rewritten layer keeps (`autoembed.nn.layers` honours or refuses each)
_OPTIONS = ("padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")
_BAG_OPTIONS = ("mode", "include_last_offset")


def _owner(model: nn.Module, path: str) -> Any:
    """The innermost transformers model (`PreTrainedModel`) holding module `path`, whose
    `_init_weights` initialises its modules (std config.initializer_range), not their
    `reset_parameters`, and draws nothing on the meta device; None outside one."""
    hf = sys.modules.get("transformers.modeling_utils")  # not imported: no such model
    base = getattr(hf, "PreTrainedModel", None)
    if base is None:
        return None
    parts = path.split(".")
    for k in range(len(parts) - 1, -1, -1):
        owner = model.get_submodule(".".join(parts[:k]))
        if isinstance(owner, base):
            return owner
    return None


def _init_storages(self: Any, module: Any) -> None:
    """transformers' `_init_weights`, which knows no autoembed layer (it would leave the
    rows as they were, uninitialised after `to_empty`, and draw mixed_dim's projection as a
    Linear): a layer's storage draws itself, its projection included, at the moments
    `apply` took (`reset_parameters`); every other module as the class's `_init_weights`."""
    if getattr(module, "draws_init", False):
        module.reset_parameters()
    else:
        type(self)._init_weights(self, module)


def _init_in_owner(owner: nn.Module) -> None:
    """The owner's init (`init_weights()`, `initialize_weights()`) draws its rewritten
    tables (`_init_storages`); bound to it (`_bound`), so a copy of the model draws its own."""
    owner.__dict__["_init_weights"] = _bound(_init_storages, owner)


def _bound(fn: Any, module: nn.Module) -> functools.partial[Any]:
    """`fn` bound to `module` as a method is, for a module's own attribute: a copy of the
    module (deepcopy) binds it to the copy, and it pickles (`torch.save(model)`), which a
    bound method of a function the class does not have cannot (pickle looks it up by name)."""
    return functools.partial(fn, module)


_PROBE_ENTRIES = 1 << 20  # at most this many entries drawn to measure an owner's init


def _owner_moments(old: Any, init_weights: Any) -> tuple[float, float]:
    """(mean, std) of the rows `init_weights` (`_owner`'s) gives the meta module `old`:
    its `reset_parameters`, then `init_weights`, as the model's build runs them, on a CPU
    copy of at most _PROBE_ENTRIES entries (a transformers init draws each entry alike, not
    by the table's rows), padding row left out."""
    from autoembed.nn.draws import table_moments

    rows = min(old.num_embeddings, max(1, _PROBE_ENTRIES // old.embedding_dim))
    probe = copy.deepcopy(old)
    probe.weight = nn.Parameter(torch.empty(rows, old.embedding_dim, dtype=old.weight.dtype,
                                            device="cpu"))
    probe.num_embeddings = rows
    if probe.padding_idx is not None and probe.padding_idx >= rows:
        probe.padding_idx = None
    with torch.no_grad():
        probe.reset_parameters()
        init_weights(probe)
    return table_moments(probe.weight, probe.padding_idx)


def _start_moments(old: Any, init_weights: Any = None) -> tuple[float, float] | None:
    """(mean, std) the rewritten rows start with: the module's own table's
    (`nn.draws.table_moments`, padding row left out); on the meta device, what the model's
    init would draw: `init_weights` given (a transformers model's, `_owner_moments`), else
    its `reset_parameters` (torch's nn.Embedding / EmbeddingBag: N(0, 1); a class's own
    `reset_parameters` run on a CPU copy); fake tensors or a priced factory's call on meta
    (`shapes_only`): None (nothing is drawn)."""
    from torch._subclasses.fake_tensor import is_fake

    from autoembed.nn.draws import DEFAULT, table_moments
    from autoembed.trace.traced_model import shapes_only

    w = old.weight
    if is_fake(w) or shapes_only():
        return None
    pad = getattr(old, "padding_idx", None)
    if not w.is_meta:
        return table_moments(w, pad)
    store = getattr(old, "store", None)  # an autoembed.nn layer: the moments it draws
    if store is not None:
        return getattr(store, "init_moments", DEFAULT)
    if init_weights is not None:
        return _owner_moments(old, init_weights)
    if type(old).reset_parameters in (nn.Embedding.reset_parameters,
                                      nn.EmbeddingBag.reset_parameters):
        return DEFAULT
    probe = copy.deepcopy(old).to_empty(device="cpu")
    with torch.no_grad():
        probe.reset_parameters()
    return table_moments(probe.weight, pad)


def _new_layer(old: Any, ts: Any, hot_sets: Any, config: Any, from_trained: bool,
               init_weights: Any = None) -> Any:
    from autoembed import nn as ae_nn
    from autoembed.config import cache_rows

    w = old.weight
    bag = isinstance(old, (nn.EmbeddingBag, ae_nn.EmbeddingBag))
    kw: dict[str, Any] = {k: getattr(old, k) for k in (*_OPTIONS, *(_BAG_OPTIONS if bag else ()))}
    kw.update(device=w.device, dtype=w.dtype)
    comp = ts.compression
    if config.placement == "host_cached":  # config validation: compression none or hash
        kw.update(placement="host_cached", cache_rows=cache_rows(config, ts),
                  cache_policy=config.cache_policy, table_optimizer=ts.table_optimizer,
                  dynamic_rows=config.dynamic_rows)
    kw.update({key: getattr(ts, field) for key, field in _SETTINGS.get(comp, ())})
    if comp == "hot_cold":
        kw["hot_ids"] = (hot_sets or {}).get(ts.name)
    if ts.dim != old.embedding_dim:
        if comp != "none" or ts.dim > old.embedding_dim:
            raise ConfigError(f"config table '{ts.name}': dim {ts.dim} differs from the "
                              f"module's {old.embedding_dim}; a smaller dim is a mixed_dim "
                              "table (compression none); give compression none or the same dim")
        comp = "mixed_dim"
        kw["small_dim"] = ts.dim
    cls = ae_nn.EmbeddingBag if bag else ae_nn.Embedding
    if not from_trained:
        kw["init"] = _start_moments(old, init_weights)
    try:
        layer = cls(old.num_embeddings, old.embedding_dim, compression=comp, **kw)
    except ConfigError as e:
        raise ConfigError(f"table '{ts.name}' ({type(old).__name__}): {e}") from None
    if not w.requires_grad:
        layer.requires_grad_(False)  # a frozen table stays frozen
    return layer


def _fit(layer: Any, old: Any, name: str) -> None:
    """The new layer's rows fitted to the module's (`fit_to`); on a priced trace (fake
    tensors, or a factory's call on meta for its shapes: `shapes_only`) nothing to fit, as
    the fit changes values, not bytes."""
    from torch._subclasses.fake_tensor import is_fake

    from autoembed.models.compress_init import fit_to
    from autoembed.trace.traced_model import shapes_only

    if shapes_only():
        return
    if old.weight.is_meta:
        raise ConfigError(f"config table '{name}': from_trained needs the trained table, and "
                          "this one is on the meta device; load the trained weights first")
    if not is_fake(old.weight):
        fit_to(layer.store, old.weight)


def _start_cached(layer: Any, old: Any, from_trained: bool) -> None:
    """A host_cached layer starts from the module it replaces: the same rows (compression
    none), or under hash with `from_trained` the bucket means (`hash_init`)."""
    from autoembed.models.compress_init import hash_init

    table = layer.store.table
    w = old.weight
    if w.is_meta:
        return  # materialize draws it
    if table.buckets is None and table.known_rows == w.shape[0]:
        table.load_full(w)  # the dynamic rows beyond keep their draws
    elif from_trained:
        table.load_full(hash_init(w.detach().cpu(), table.buckets, table.seed))


def _load_decoded(head: nn.Module, _args: Any) -> None:
    """Before the head's forward: each tied weight is its layer's decoded table."""
    for name, layer in getattr(head, DECODED).items():
        object.__setattr__(head, name, layer.full_weight())


def _drop_decoded(head: nn.Module, _args: Any, _out: Any) -> None:
    """After it: dropped (autograd keeps what the backward needs)."""
    for name in getattr(head, DECODED):
        object.__setattr__(head, name, None)


def _decode_into(head: nn.Module, name: str, layer: Any) -> None:
    """`head.<name>` is `layer.full_weight()` during each forward. The head holds `layer` in
    an attribute that its hooks read, so a copy of the model reads its own layer."""
    del head._parameters[name]
    decoded = getattr(head, DECODED, None)
    if decoded is None:
        decoded = {}
        head.register_forward_pre_hook(_load_decoded)
        head.register_forward_hook(_drop_decoded)
    object.__setattr__(head, DECODED, {**decoded, name: layer})
    object.__setattr__(head, name, None)


def _config_of(config: Any, hot_sets: Any, model: nn.Module) -> tuple[Any, Any]:
    """(EmbeddingConfig, hot sets) of the forms `apply` takes (`config.as_config`); a config
    file's hot sets file comes with it, unless `hot_sets` is given. A dict or file that
    gives a table no dim (nor the config one) takes the module's."""
    from autoembed.config import as_config

    if hot_sets is None and isinstance(config, (str, os.PathLike)):
        from autoembed.models.hot_cold import hot_sets_beside

        hot_sets = hot_sets_beside(Path(config))
    return as_config(config, table_dims=table_dims(model)), hot_sets


def table_dims(model: nn.Module) -> dict[str, int]:
    """Each embedding module's dim by every path to it: what a config dict or file that
    gives a table no dim (nor a config-wide one) takes for it."""
    return {p: int(cast(Any, m).embedding_dim) for p, m in model.named_modules(
        remove_duplicate=False) if isinstance(m, EMBEDDING_TYPES)}


def _a_module(model: Any, fn: str) -> None:
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{fn}: model = {type(model).__name__}; give the torch.nn.Module")


def _paths(model: nn.Module, module: nn.Module) -> list[str]:
    """Every path at which `module` sits in `model` (a module can be reached by several)."""
    return [p for p, m in model.named_modules(remove_duplicate=False) if m is module]


def _plans(model: nn.Module, config: Any,
           untie: bool) -> list[tuple[Any, Any, list[tuple[str, str]]]]:
    """(table settings, the user's module, its ties: (module path, parameter name) of each
    other parameter holding its weight) of each table `config` names; a ConfigError, before
    any table is rewritten, when a table's vocab_size is not its module's rows, two names
    reach one module, a table's weight is another named table's, or a host_cached table is
    tied (unless `untie`)."""
    from autoembed.config import resolved_tables

    plans: list[tuple[Any, Any, list[tuple[str, str]]]] = []
    for ts in resolved_tables(config.resolve()):  # mixed_dim's dims written
        old = _module(model, ts.name)
        same = next((t.name for t, o, _ in plans if o is old), None)
        if same is not None:
            raise ConfigError(f"tables '{same}' and '{ts.name}' are one module (two paths to "
                              "it); configure it once")
        if ts.vocab_size != old.num_embeddings:  # its shares (hash_buckets 0.1) read it
            raise ConfigError(f"config table '{ts.name}': vocab_size {ts.vocab_size}, but module "
                              f"'{ts.name}' has {old.num_embeddings} rows; give vocab_size "
                              f"{old.num_embeddings} (autoembed.tables(model) lists them)")
        if ts.compression == "mixed_dim":  # its dims resolved: each table is compression none
            ts = dataclasses.replace(ts, compression="none")  # (a smaller dim: a mixed_dim layer)
        plans.append((ts, old, _tied(model, old.weight, old)))
    names = {ts.name for ts, _, _ in plans}
    for ts, _, ties in plans:
        for path, _ in ties:
            if path in names:
                raise ConfigError(f"tables '{ts.name}' and '{path}' share one weight; configure "
                                  "only one of them (the other follows it)")
        if config.placement == "host_cached" and ties and not untie:
            raise ConfigError(f"table '{ts.name}' is tied to '{ties[0][0]}', and a host_cached "
                              "table's rows live on the host, where a head cannot read them "
                              "each step; apply with untie=True or placement device")
    return plans


def _replace(model: nn.Module, old: Any, layer: Any, ties: Sequence[tuple[str, str]],
             untie: bool) -> None:
    """Put `layer` at every path to `old` (one table, replaced everywhere); each tied
    parameter becomes a copy of its rows (`untie`) or reads them from `layer`."""
    paths = _paths(model, old)
    for path in paths:
        parent, _, attr = path.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, layer)
    for name, p in old.named_parameters():  # an autoembed layer's: its storage's
        _mark_replaced(p, f"{paths[0]}.{name}")
    for path, pname in ties:
        head = model.get_submodule(path)
        if untie:  # a copy of the rows as they start (on meta: materialize copies them)
            full = torch.empty_like(old.weight) if old.weight.is_meta else \
                layer.full_weight().detach().clone()
            head._parameters[pname] = nn.Parameter(full, old.weight.requires_grad)
            object.__setattr__(head, UNTIED, {**getattr(head, UNTIED, {}), pname: layer})
        else:
            _decode_into(head, pname, layer)


REPLACED = "_autoembed_replaced"  # set on a replaced module's parameter: its path
_STEP_CHECK: list[Any] = []  # the optimizer step hook, registered once (`_mark_replaced`)
_MARKED = [0]  # weights marked so far: an optimizer checked before a later apply is read again
# optimizer -> (weights marked, parameters it held) when it was last read
_CHECKED: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()


def _mark_replaced(param: nn.Parameter, path: str) -> None:
    """Mark a parameter of a module `apply` replaced: an optimizer built before `apply` still
    holds it, and its step would train it instead of the new layer (the table would never
    change); `_refuse_replaced` refuses that step."""
    setattr(param, REPLACED, path)
    _MARKED[0] += 1
    if not _STEP_CHECK:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        _STEP_CHECK.append(register_optimizer_step_pre_hook(_refuse_replaced))


def _refuse_replaced(optimizer: torch.optim.Optimizer, *_: Any) -> None:
    """Before any optimizer's step: one holding a weight `apply` replaced is a ConfigError
    (read again only after another apply or when its parameters change in number, so a step
    stays cheap)."""
    seen = (_MARKED[0], sum(len(g["params"]) for g in optimizer.param_groups))
    if _CHECKED.get(optimizer) == seen:
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            path = getattr(p, REPLACED, None)
            if path is not None:
                raise ConfigError(f"{type(optimizer).__name__} steps '{path}' of the table "
                                  "autoembed.apply replaced, so the new layer would never "
                                  "train; build the optimizer after apply "
                                  "(autoembed.build_optimizer(model, config))")
    _CHECKED[optimizer] = seen


def apply(model: nn.Module, config: Any, *, untie: bool = False,
          hot_sets: Any = None, from_trained: bool = False,
          checkpoint: Sequence[str] = ()) -> nn.Module:
    """Rewrite the tables `config` names (by module path) in place; returns `model`.
    `hot_sets` (table -> sorted ids, `models.hot_cold.load_hot_sets`): the hot/cold tables'
    hot sets, else ids 0..hot-1. `from_trained`: rows fitted to the trained table
    (`models.compress_init.fit_to`). `checkpoint`: `checkpoint_modules`, after the rewrite.
    Every table is checked and its new layer made before any module is replaced: a refused
    table (ConfigError) leaves the model as it was."""
    from autoembed.config import resolved_tables

    _a_module(model, "apply")
    config, hot_sets = _config_of(config, hot_sets, model)
    if hot_sets is not None:
        from autoembed.models.hot_cold import check_hot_set_names

        check_hot_set_names(hot_sets, [ts.name for ts in resolved_tables(config)
                                       if ts.compression == "hot_cold"])
    if config.robe_shared:  # the layers of autoembed.nn hold one array per table
        raise ConfigError("config key 'robe_shared' = True: apply gives each table of your "
                          "model its own robe array; set robe_shared false (one shared array "
                          "is for config-built models)")
    cached = config.placement == "host_cached"
    layers = []  # every new layer is made (and refused) before any module is replaced
    owners: list[nn.Module] = []  # transformers models whose init draws a new layer
    for ts, old, ties in _plans(model, config, untie):
        if ts.compression == "none" and ts.dim == old.embedding_dim and not cached:
            continue  # nothing changes: keep the user's module (and its ties)
        _check_forward(old, ts.name)
        if not (from_trained or (cached and ts.compression == "none")):
            _check_frozen(old, ts)
        owner = _owner(model, ts.name)
        layer = _new_layer(old, ts, hot_sets, config, from_trained,
                           None if owner is None else owner._init_weights)
        if cached:
            _start_cached(layer, old, from_trained)
        elif from_trained:
            _fit(layer, old, ts.name)
        layers.append((ts.name, old, layer, ties))
        if owner is not None and not from_trained:  # (a fitted table keeps its fit)
            owners.append(owner)
    for name, old, layer, ties in layers:
        _replace(model, old, layer, ties, untie)
        _guard_transformers(model, name, layer, [p for p, _ in ties])
    for owner in owners:
        _init_in_owner(owner)
    if checkpoint:
        checkpoint_modules(model, checkpoint)
    return model


def _checkpointed_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """The module's class forward under `models.checkpointing.checkpointed`."""
    from autoembed.models.checkpointing import checkpointed

    return checkpointed(type(self).forward, self, *args, **kwargs)


def checkpoint_modules(model: nn.Module, names: Sequence[str]) -> list[str]:
    """Run the forward of every module a name matches (its path, or a glob such as
    ``blocks.*``) under gradient checkpointing (`models.checkpointing.checkpointed`); returns
    the paths wrapped (the outermost: a module inside a wrapped one is recomputed with it).
    A name matching no module is a ConfigError (did-you-mean); so is a module holding a head
    that reads a decoded tied table (a recompute could not read it)."""
    _a_module(model, "checkpoint_modules")
    if isinstance(names, str):
        names = [names]
    paths = [p for p, _ in model.named_modules() if p]
    hits: dict[str, str] = {}  # path -> the name that matched it
    for name in names:
        found = [p for p in paths if p == name or fnmatch.fnmatchcase(p, name)]
        if not found:
            hint = did_you_mean(name, paths) or "; give a module path such as " + (
                paths[0] if paths else "'layer'")
            raise ConfigError(f"checkpoint '{name}': the model has no such module{hint}")
        hits.update({p: name for p in found if p not in hits})
    wrapped: list[str] = []
    for path, name in hits.items():
        m = model.get_submodule(path)
        heads = [f"{path}.{p}".rstrip(".") for p, sub in m.named_modules()
                 if getattr(sub, DECODED, False)]
        if heads:
            raise ConfigError(f"checkpoint '{name}': module '{heads[0]}' reads a decoded "
                              "tied table, which a recompute cannot see; checkpoint the "
                              "blocks before it, or apply with untie=True")
        outer = [path.rsplit(".", k)[0] for k in range(1, path.count(".") + 1)]
        if any(o in hits or getattr(model.get_submodule(o), CHECKPOINTED, False)
               for o in outer) or getattr(m, CHECKPOINTED, False):
            continue  # inside a checkpointed module already (a recompute covers it)
        # bound to the module, so a deepcopy (quantize, a saved best) wraps its copy
        object.__setattr__(m, "forward", _bound(_checkpointed_forward, m))
        object.__setattr__(m, CHECKPOINTED, True)
        wrapped.append(path)
    return wrapped


def _guard_transformers(model: nn.Module, path: str, layer: nn.Module, heads: list[str]) -> None:
    """Keep transformers' tie_weights / resize_token_embeddings off a compressed table."""
    if not (callable(getattr(model, "tie_weights", None))
            and callable(getattr(model, "resize_token_embeddings", None))):
        return
    get_input = getattr(model, "get_input_embeddings", None)
    is_input = callable(get_input) and get_input() is layer
    if not heads and not is_input:
        return
    tied = f" (tied to '{', '.join(heads)}')" if heads else ""
    # module-level functions (a closure would not pickle with the model)
    model.__dict__["tie_weights"] = _no_tie
    model.__dict__["resize_token_embeddings"] = functools.partial(_no_resize, path, tied)


def _no_tie(*_: Any, **__: Any) -> None:
    """transformers' tie_weights, a no-op: the tied head reads the decoded table each forward
    (or, under untie, keeps its own weight); rebinding it would point it at the compressed
    storage."""


def _no_resize(path: str, tied: str, *_: Any, **__: Any) -> Any:
    """transformers' resize_token_embeddings of a model whose table `path` is compressed."""
    raise ConfigError(f"resize_token_embeddings: '{path}'{tied} is compressed by autoembed; "
                      "resize the model before autoembed.apply, then apply the config")


def _tie_map(model: nn.Module) -> list[tuple[nn.Module, str, nn.Module, str]]:
    """Every (module, name) whose parameter is one an earlier (module, name) holds."""
    first: dict[int, tuple[nn.Module, str]] = {}
    ties = []
    for m in model.modules():
        for name, p in m.named_parameters(recurse=False):
            if id(p) in first:
                ties.append((m, name, *first[id(p)]))
            else:
                first[id(p)] = (m, name)
    return ties


@torch.no_grad()
def materialize(model: nn.Module, device: str | torch.device = "cpu") -> nn.Module:
    """Allocate a meta-built (and applied) model on `device`, restore the ties `to_empty`
    breaks, and initialise it as its build would: each module by its own `reset_parameters`
    (torch's private `_reset_parameters` where that is a torch module's only one, as in
    nn.MultiheadAttention), a module after the modules it holds, then each transformers
    model by its own `init_weights()` (`_init_weights`; the layers `apply` put in it draw
    themselves there); a head `untie` gave its own weight takes a copy of its table's rows,
    as `apply` gives it on a model with values. Refused (ConfigError) when no parameter is
    on the meta device, or only some are (it would re-initialise weights that have values),
    or when a parameter is left undrawn by all of that (its values would be whatever memory
    held)."""
    _a_module(model, "materialize")
    params = list(model.named_parameters())
    meta = [n for n, p in params if p.is_meta]
    real = [n for n, p in params if not p.is_meta]
    if not meta:
        raise ConfigError("materialize: no parameter of the model is on the meta device, so "
                          "there is nothing to allocate (it would re-initialise every weight); "
                          "call it on a model built under torch.device('meta')")
    if real:
        raise ConfigError(f"materialize: parameter '{real[0]}' has values and '{meta[0]}' is "
                          "on the meta device; materialize re-initialises every parameter: "
                          "build the whole model on meta, or load the real values afterwards")
    for name, b in model.named_buffers():
        if b.is_meta:
            raise ConfigError(f"buffer '{name}' was built on the meta device and has no values "
                              "to materialize; build buffers on a real device (only the "
                              "parameters on meta), or build the model normally")
    ties = _tie_map(model)
    model.to_empty(device=device)
    for m, name, src, src_name in ties:
        m._parameters[name] = src._parameters[src_name]
    for p in model.parameters():
        if p.is_floating_point():
            p.fill_(math.nan)  # undrawn stays NaN (checked below), not stale memory
    for m in reversed(list(model.modules())):  # a module after those it holds
        reset = _reset_of(m)
        if getattr(m, DECODED, False):  # its weight is the table's; other parameters start at 0
            for p in m.parameters(recurse=False):
                p.zero_()
        elif reset is not None:
            reset()
    for owner in _transformers_models(model):
        owner.init_weights()  # type: ignore[operator]
    _copy_untied(model)
    _check_drawn(model)
    return model


@torch.no_grad()
def _copy_untied(model: nn.Module) -> None:
    """Each weight `untie` gave a head starts as a copy of its table's rows, as `apply` on a
    model with values copies them (not by the head's own reset_parameters)."""
    for m in model.modules():
        for pname, layer in getattr(m, UNTIED, {}).items():
            getattr(m, pname).copy_(layer.full_weight())


def _reset_of(m: nn.Module) -> Any:
    """The module's own initialiser: `reset_parameters`, else torch's `_reset_parameters`
    (defined in torch, a subclass of a torch module's included); None."""
    reset = getattr(m, "reset_parameters", None)
    if callable(reset):
        return reset
    private = getattr(type(m), "_reset_parameters", None)
    if callable(private) and getattr(private, "__module__", "").startswith("torch."):
        return m._reset_parameters
    return None


def _transformers_models(model: nn.Module) -> list[nn.Module]:
    """The outermost transformers models (`PreTrainedModel`) in `model`, itself included."""
    hf = sys.modules.get("transformers.modeling_utils")  # not imported: no such model
    base = getattr(hf, "PreTrainedModel", None)
    if base is None:
        return []
    found: dict[str, nn.Module] = {}
    for name, m in model.named_modules():
        inside = any(o == "" or name.startswith(f"{o}.") for o in found)
        if isinstance(m, base) and not inside:
            found[name] = m
    return list(found.values())


def _check_drawn(model: nn.Module) -> None:
    """Refuse a parameter `materialize` left undrawn (still NaN)."""
    for name, p in model.named_parameters():
        if p.is_floating_point() and bool(torch.isnan(p).any()):
            owner = model.get_submodule(name.rpartition(".")[0])
            raise ConfigError(
                f"materialize: parameter '{name}' ({type(owner).__name__}) is drawn by no "
                "reset_parameters and no transformers init, so it has no values; give "
                f"{type(owner).__name__} a reset_parameters, or build the model on a real "
                "device")
