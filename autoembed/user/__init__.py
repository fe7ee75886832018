"""The user's code: their model (`model/`) and, in a search, their functions and loop.

`model/` (a layer below `autoembed.torchrec`, which builds on it): a user's own PyTorch
model priced (`estimate_torch_model`), rewritten (`apply`) and found by name (`load`). The
rest (a layer above TorchRec, whose plan a user space names): `space` (the `embedding:` /
`user:` space file), `functions` (recording and resolving the user's functions), `ship`
(shipping them to Ray nodes), `report` (what the user's loop tells autoembed, and the stop it
receives), `run` and `trainer` (one trial of the user's loop as the trial record),
`module_text` (export's module text). This package imports none of them, so
`autoembed.user.model` loads nothing of the layer above.
"""
