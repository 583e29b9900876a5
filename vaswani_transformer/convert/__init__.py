"""Published weights of the paper's architecture as model folders of this package: fairseq's released Transformer
checkpoints (`convert_fairseq`) and transformers' FSMT models (`convert_fsmt`), converted exactly (issue 52)."""

from .fsmt import convert_fairseq, convert_fsmt

__all__ = ["convert_fairseq", "convert_fsmt"]
