"""The user's code: their model (`model/`) and, in a search, their functions and loop (the
modules: docs/ARCHITECTURE.md, the "the user's code" and "layers and user models" rows).
`model/` is a layer below `autoembed.torchrec`, which builds on it; the rest is a layer above
TorchRec, whose plan a user space names. This package imports none of them, so
`autoembed.user.model` loads nothing of the layer above.
"""
