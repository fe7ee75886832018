"""Pricing a step, what `autoembed estimate` runs: `price` (a config, or the user's own model
through `user_model_cli`, a TorchRec model per rank through `torchrec_cli`), `suggest` (what
would fit the budget) and `estimate_options` (the command's options, declared once)."""
