"""Dynamic vocabulary: rows for ids never seen when the table was sized (new users, tokens):
`capacity` extra rows after `base` known ones, each taken by the first id >= base to come,
then a fallback to ``base + hash_ids(id, capacity, seed)``, and freed by `release(rows)`
(docs/host_cache.md, "Dynamic vocabulary"); the caller resets the freed rows' weights and
optimizer state. Host-side bookkeeping: `owner` (int64 [capacity], the id holding each extra
row, -1 free) and a dict id -> row for the lookup (Python objects, not priced; the tensor is).
"""

from __future__ import annotations

import torch

from autoembed.nn.hashing import hash_ids

__all__ = ["DynamicIds"]

FREE = -1


class DynamicIds:
    """Maps raw ids to rows; ids below `base` unchanged, others as described above."""

    def __init__(self, base: int, capacity: int, seed: int = 0) -> None:
        if base < 1 or capacity < 1:
            raise ValueError(f"base={base}, capacity={capacity}: both must be >= 1")
        self.base = base
        self.capacity = capacity
        self.seed = seed
        self.owner = torch.full((capacity,), FREE, dtype=torch.int64)
        self._row_of: dict[int, int] = {}
        self._free = list(range(capacity - 1, -1, -1))  # pop() gives the lowest free row
        self.assigned = 0  # ids that got a row of their own
        self.folded = 0  # lookups of new ids that fell back to a hash bucket

    @property
    def free_rows(self) -> int:
        return len(self._free)

    def row_of(self, raw_id: int) -> int | None:
        """The table row `raw_id` holds of its own (None: it has none)."""
        k = self._row_of.get(raw_id)
        return None if k is None else self.base + k

    def map(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows of `ids` (int64, any shape, ids >= 0); assigns rows to new ids in order of
        first appearance (row-major over `ids`)."""
        out = ids.clone()
        new = ids >= self.base
        if not bool(new.any()):
            return out
        raw = ids[new]
        uniq, inverse = torch.unique(raw, sorted=True, return_inverse=True)
        first = torch.full((uniq.numel(),), raw.numel(), dtype=torch.int64)
        first.scatter_reduce_(0, inverse, torch.arange(raw.numel()), reduce="amin")
        rows = torch.full_like(uniq, -1)
        for k in torch.argsort(first).tolist():  # in order of first appearance
            i = int(uniq[k])
            r = self._row_of.get(i)
            if r is None and self._free:
                r = self._free.pop()
                self._row_of[i] = r
                self.owner[r] = i
                self.assigned += 1
            if r is not None:
                rows[k] = r
        fall = rows < 0
        if bool(fall.any()):
            rows[fall] = hash_ids(uniq[fall], self.capacity, self.seed)
            self.folded += int(fall[inverse].sum())  # lookups, not distinct ids
        out[new] = self.base + rows[inverse]
        return out

    def load_owner(self, owner: torch.Tensor) -> None:
        """Rebuild the map from an `owner` tensor (a checkpoint's)."""
        self.owner.copy_(owner)
        self._row_of = {int(i): k for k, i in enumerate(self.owner.tolist()) if i != FREE}
        self._free = [k for k in range(self.capacity - 1, -1, -1) if int(self.owner[k]) == FREE]
        self.assigned = len(self._row_of)

    def release(self, rows: torch.Tensor) -> list[int]:
        """Free extra rows (table rows >= base); return the ids that held them."""
        gone: list[int] = []
        for r in rows.tolist():
            k = r - self.base
            if not 0 <= k < self.capacity:
                last = self.base + self.capacity - 1
                raise ValueError(f"row {r} is not an extra row ({self.base}..{last})")
            i = int(self.owner[k])
            if i == FREE:
                continue
            del self._row_of[i]
            self.owner[k] = FREE
            self._free.append(k)
            gone.append(i)
        self._free.sort(reverse=True)
        return gone

