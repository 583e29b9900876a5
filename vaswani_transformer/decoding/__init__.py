"""The package's decoding runtime around the model's `generate()`: `translate()` (batches, workers, memory budget,
progress), CUDA graphs, the precision rule, sentence splitting and the package's pipeline. A saved folder carries
none of it (docs/architecture.md): a release of the package can change it without touching folders already shared.
"""
