"""Models written the way users write them, each priced, rewritten and trained by autoembed
(README, "Your own model"). Each module has `build_model(**size)`, `make_example(**size)`
and `SIZES` ("full": the real size; "test": what fits a CPU test; "twin": a warm-up model)."""
