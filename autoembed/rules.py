"""Constraints declared once (after scikit-learn's `utils/_param_validation.py`).

A `Rule` says what one value may be and words it once, as its `noun` ("an integer >= 1"):
``check(key, value)`` raises ``ConfigError("config key 'KEY' = VALUE: must be NOUN")``.
Config fields carry their rule in their dataclass metadata (`field_rule`), and
`EmbeddingConfig.validate`, the search-space loader and the CLI all read it there. A public
function's argument or a CLI option is checked by ``check_argument(name, value)``:
``NAME = VALUE: RULE``, the one shape for those. Pure Python: no torch, no YAML.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from autoembed.errors import ConfigError

__all__ = ["Rule", "Is", "Each", "OneOf", "Integer", "Interval", "Positive", "CountOrShare", "Flag",
           "config_error", "field_rule", "check_fields", "is_number", "plain", "or_list"]


def config_error(key: str, value: Any, rule: str) -> ConfigError:
    """The one message shape: config key 'KEY' = VALUE: RULE."""
    return ConfigError(f"config key '{key}' = {value!r}: {rule}")


def or_list(items: Sequence[Any]) -> str:
    """`items` as a help lists choices: "a, b or c" ("a" for one)."""
    names = [str(i) for i in items]
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def is_number(v: Any) -> bool:
    """A finite int or float (bools are not numbers here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class Rule:
    """What a value may be. `kind` tells a search space how to range over it: "choice",
    "int", "float" or "count_or_share"."""

    kind = ""
    sep = " = "  # between an argument's name and its value: "NAME = VALUE: RULE"

    def ok(self, value: Any) -> bool:
        raise NotImplementedError

    @property
    def noun(self) -> str:
        """What a good value is, in words: "an integer >= 1"."""
        raise NotImplementedError

    @property
    def text(self) -> str:
        """The rule in words, the one wording every check uses."""
        return f"must be {self.noun}"

    def check(self, key: str, value: Any, where: str = "config key",
              error: type[ConfigError] = ConfigError) -> None:
        """A key's value: raises `error` "WHERE 'KEY' = VALUE: RULE" (`where` names the
        file or kind of key: "config key", "search space 'x.yaml': key", ...)."""
        if not self.ok(value):
            raise error(f"{where} '{key}' = {value!r}: {self.text}")

    def check_argument(self, name: str, value: Any, error: type[ConfigError] = ConfigError,
                       sep: str | None = None) -> None:
        """A function's argument or a CLI option (`name`: as the caller spells it):
        raises `error` "NAME = VALUE: RULE" (`sep` in place of " = ": "NAME VALUE: RULE")."""
        if not self.ok(value):
            raise error(f"{name}{self.sep if sep is None else sep}{value!r}: {self.text}")


@dataclass(frozen=True)
class Is(Rule):
    """A value of `test`'s type(s), or one the predicate `test` accepts (non-empty too with
    `filled`); `words` says what it is ("a mapping")."""

    test: type | tuple[type, ...] | Callable[[Any], bool]
    words: str
    filled: bool = False

    def ok(self, value: Any) -> bool:
        if isinstance(self.test, (type, tuple)):
            good = isinstance(value, self.test)
        else:
            good = self.test(value)
        return bool(good and (not self.filled or len(value) > 0))

    @property
    def noun(self) -> str:
        return self.words


@dataclass(frozen=True)
class Each(Rule):
    """A list (or another of `seq`) whose every item passes `item`, of `length` items
    when given, not empty with `filled`, no item twice with `distinct`; `words` says what
    it is."""

    item: Rule | None
    words: str
    length: int | None = None
    filled: bool = False
    seq: tuple[type, ...] = (list, tuple)
    distinct: bool = False

    def ok(self, value: Any) -> bool:
        if not isinstance(value, self.seq):
            return False
        items: Sequence[Any] = value  # type: ignore[assignment]
        return (self.length in (None, len(items)) and (not self.filled or len(items) > 0)
                and (self.item is None or all(self.item.ok(v) for v in items))
                and (not self.distinct or _distinct(items)))

    @property
    def noun(self) -> str:
        return self.words


def _distinct(items: Sequence[Any]) -> bool:
    """No item twice (unhashable items: compared by equality)."""
    try:
        return len(set(items)) == len(items)
    except TypeError:
        return all(a != b for i, a in enumerate(items) for b in items[i + 1:])


@dataclass(frozen=True)
class OneOf(Rule):
    """One of `choices` (bools only match bools); `note` follows the default wording."""

    choices: tuple[Any, ...]
    note: str = ""
    kind = "choice"

    def ok(self, value: Any) -> bool:
        try:
            return any(value == c and isinstance(value, bool) == isinstance(c, bool)
                       for c in self.choices)
        except TypeError:
            return False

    @property
    def noun(self) -> str:
        return f"one of {', '.join(map(str, self.choices))}{' ' * bool(self.note)}{self.note}"


@dataclass(frozen=True)
class Flag(OneOf):
    """true or false."""

    choices: tuple[Any, ...] = (True, False)

    @property
    def noun(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class Integer(Rule):
    """An integer >= `minimum`, and <= `maximum` when given (bools are not integers here);
    `note` follows the default wording."""

    minimum: int
    maximum: int | None = None
    note: str = ""
    kind = "int"

    def ok(self, value: Any) -> bool:
        return (not isinstance(value, bool) and isinstance(value, int) and value >= self.minimum
                and (self.maximum is None or value <= self.maximum))

    @property
    def noun(self) -> str:
        bound = (f">= {self.minimum}" if self.maximum is None
                 else f"in {self.minimum}..{self.maximum}")
        return f"an integer {bound}{' ' * bool(self.note)}{self.note}"


@dataclass(frozen=True)
class Interval(Rule):
    """A finite number in [low, high], or (low, high] with `open_low` (no upper end where
    `high` is inf)."""

    low: float
    high: float = math.inf
    open_low: bool = False
    kind = "float"

    def ok(self, value: Any) -> bool:
        if not is_number(value):
            return False
        above = value > self.low if self.open_low else value >= self.low
        return bool(above and value <= self.high)

    @property
    def noun(self) -> str:
        if self.high == math.inf:
            return f"a number {'>' if self.open_low else '>='} {self.low}"
        return f"a number in {'(' if self.open_low else '['}{self.low}, {self.high}]"


@dataclass(frozen=True)
class Positive(Rule):
    """A number > 0 (an integer with `integer`, else finite: `inf` bounds nothing; bools
    are not numbers here). Its message keeps the shape a search's counts always had:
    "NAME VALUE: RULE"."""

    integer: bool = True
    sep = " "

    def ok(self, value: Any) -> bool:
        kinds = (int,) if self.integer else (int, float)
        return (isinstance(value, kinds) and not isinstance(value, bool) and value > 0
                and (not isinstance(value, float) or math.isfinite(value)))

    @property
    def noun(self) -> str:
        return f"{'an integer' if self.integer else 'a finite number'} > 0"


@dataclass(frozen=True)
class CountOrShare(Rule):
    """An integer count >= `minimum`, or a float share of a table's rows in (0, 1)."""

    minimum: int
    kind = "count_or_share"

    def ok(self, value: Any) -> bool:
        if isinstance(value, float):
            return math.isfinite(value) and 0.0 < value < 1.0
        return Integer(self.minimum).ok(value)

    @property
    def noun(self) -> str:
        return (f"an integer >= {self.minimum} (a count) or a float in (0, 1) "
                "(a share of the table's rows)")


def field_rule(rule: Rule, *, flag: str | None = None) -> dict[str, Any]:
    """Dataclass field metadata: the field's `rule` and, when the CLI spells it otherwise,
    its `flag` (``--batch`` for batch_size). A None value is allowed where the field's
    default is None."""
    meta: dict[str, Any] = {"rule": rule}
    if flag is not None:
        meta["flag"] = flag
    return meta


def check_fields(obj: Any, where: str = "", what: str = "config key",
                 error: type[ConfigError] = ConfigError) -> None:
    """Check every field of a dataclass against the rule in its metadata (`field_rule`),
    each key named `where.FIELD` (`Rule.check`'s `what`, `error`); a None value passes
    where the field's default is None."""
    prefix = f"{where}." if where else ""
    for f in fields(obj):
        rule = f.metadata.get("rule")
        value = getattr(obj, f.name)
        if rule is None or (value is None and f.default is None):
            continue
        rule.check(f"{prefix}{f.name}", value, what, error)


def plain(v: Any) -> Any:
    """`v` as JSON-safe plain data: mappings as dicts with str keys, sequences as lists, and
    NaN/inf as None (JSON has none). The one sanitiser for files, records and params."""
    if isinstance(v, Mapping):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
