"""Published weights of the paper's architecture as model folders of this package: fairseq's released Transformer
checkpoints (`convert_fairseq`) and transformers' FSMT models (`convert_fsmt`), converted exactly."""

import lazy_loader

# Each name is imported from its module on first use (PEP 562), so that importing one module of the package
# does not import them all.
__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "fsmt": ["convert_fairseq", "convert_fsmt"],
    },
)
