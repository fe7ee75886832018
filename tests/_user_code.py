"""Source of a user's own model module, shared by the tests that write one to disk and
search it (the Ray cluster, the SIGKILL resume): a mean-pooled bag classifier whose forward
returns its loss, and `build(params)` at `params["dim"]`."""

BAG_MODEL = '''
import torch
from torch import nn


class Bag(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.emb = nn.Embedding(1000, dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, ids, y):
        return nn.functional.cross_entropy(self.out(self.emb(ids).mean(1)), y)


def build(params):
    torch.manual_seed(0)
    return Bag(params["dim"])
'''


def install_loop(root, package: str, source: str, monkeypatch):
    """Write `source` as `<root>/src/<package>/loop.py`, importable (and found again by
    Ray workers, which start in `root`); returns the fresh module."""
    import importlib
    import sys

    pkg = root / "src" / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "loop.py").write_text(source)
    monkeypatch.setenv("RAY_worker_niceness", "0")
    monkeypatch.syspath_prepend(str(root / "src"))
    monkeypatch.chdir(root)
    sys.modules.pop(f"{package}.loop", None)
    return importlib.import_module(f"{package}.loop")
