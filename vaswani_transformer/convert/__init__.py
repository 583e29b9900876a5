"""Published weights of the paper's architecture as model folders of this package: fairseq's released Transformer
checkpoints (`fairseq`) and transformers' FSMT models (`fsmt`), converted exactly (issue 52)."""
