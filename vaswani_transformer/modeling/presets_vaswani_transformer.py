"""The named model sizes: rows of the paper's Table 3 (every value not named is the base model's), and two CPU
sizes. Plain data that imports nothing, so that a command's options (`--preset`) and its `--help` build without
torch; `VaswaniTransformerConfig.from_preset` applies them."""

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "base": {},
    "big": {"d_model": 1024, "d_ff": 4096, "num_heads": 16, "dropout": 0.3},
    # Row (A): vary the number of heads at constant computation (d_k = d_v = d_model / h).
    "base-h1": {"num_heads": 1},
    "base-h4": {"num_heads": 4},
    "base-h16": {"num_heads": 16},
    "base-h32": {"num_heads": 32},
    # Row (B): smaller attention key size.
    "base-dk16": {"d_k": 16},
    "base-dk32": {"d_k": 32},
    # Row (E): learned positional embeddings instead of sinusoids.
    "base-learned-positions": {"position_embedding_type": "learned"},
    # Not in the paper: CPU-sized models. `tiny` is the size of the published text-only Multi30k baseline
    # (Wu et al., ACL 2021); `small` sits between it and base.
    "tiny": {"d_model": 128, "d_ff": 256, "num_heads": 4, "num_encoder_layers": 4, "num_decoder_layers": 4},
    "small": {"d_model": 256, "d_ff": 1024, "num_heads": 4, "num_encoder_layers": 3, "num_decoder_layers": 3},
}
