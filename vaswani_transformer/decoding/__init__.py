"""The package's decoding runtime around the model's `generate()`: `translate()` (batches, workers, memory budget,
progress), CUDA graphs, the precision rule, sentence splitting and the package's pipeline. A saved folder carries
none of it (docs/architecture.md): a release of the package can change it without touching folders already shared.
"""

# Sentences per decoding batch: beam search drops each sentence once its beams are final, so a larger batch costs
# few idle rows and takes fewer steps per sentence (docs/decisions/decoding-batches.md). Here, beside no import, so
# that the commands' --help names it without importing torch.
BATCH_SIZE = 128
