"""A user's own PyTorch model: price its whole training step (`estimate.estimate_torch_model`;
the public `autoembed.estimate_model` is `torchrec.public.estimate_model`, which dispatches
TorchRec models and calls this for the rest), rewrite it (`apply`), load it by name (`load`).
The step itself runs with autoembed's precision machinery (`models.user_step.UserStep`)."""
