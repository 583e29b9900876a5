"""Reading a fairseq checkpoint (`model.pt`, a pickle) without running its code.

torch's weights-only unpickler reads tensors and plain containers; this module lets through only what else a fairseq
checkpoint pickles — `argparse.Namespace`, and fairseq's own training-state objects as inert records — and refuses
every other pickled class or function by name before loading, since unpickling it could run code.
"""

import argparse
import io
import pickletools
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

# Globals that a fairseq checkpoint pickles and that torch's weights-only unpickler does not allow by itself:
# `args` is an argparse.Namespace (a `cfg` dict may hold some too), and the training state of fairseq 0.6-0.8
# (2018-2019, when the released WMT models were trained) holds its meters, `extra_state["train_meters"]`, whose
# values may be numpy scalars.
NAMESPACE = "argparse.Namespace"
TRAINING_STATE_MODULES = ("fairseq.", "numpy.")  # read as inert records (`InertRecord`), never imported
TORCH_PLAIN_GLOBALS = {  # what torch's weights-only unpickler allows outside torch: containers and bytes
    "collections.OrderedDict",
    "collections.Counter",
    "_codecs.encode",
    "builtins.bytearray",
    "builtins.set",
    "builtins.complex",
}
OMEGACONF_FIX = (
    "re-save it with its cfg as plain containers, where fairseq and omegaconf are installed and you trust the file: "
    'python -c "import torch; from omegaconf import OmegaConf; from fairseq import checkpoint_utils; '
    "s = torch.load('model.pt', weights_only=False); "
    "s['cfg'] = OmegaConf.to_container(s['cfg'], resolve=True, enum_to_str=True); "
    "checkpoint_utils.torch_persistent_save(s, 'model.plain.pt')\" and put model.plain.pt in its place as model.pt"
)
STRIP_FIX = (
    "if the file is yours and you trust it, keep only its model and args: "
    "python -c \"import torch; s = torch.load('model.pt', weights_only=False); "
    "torch.save({'args': s.get('args'), 'cfg': s.get('cfg'), 'model': s['model']}, 'model.stripped.pt')\" "
    "and put model.stripped.pt in its place as model.pt"
)


class InertRecord:
    """What an object of fairseq's training state (a meter, a numpy scalar) becomes when model.pt is read: the arguments and
    the state it was pickled with, kept as data. None of fairseq's code is imported or run, so no pickled name can
    run code through it; nothing of the conversion reads these records."""

    pickled_as = ""
    arguments: tuple[Any, ...]
    state: Any = None

    def __new__(cls, *arguments: Any) -> "InertRecord":
        record = super().__new__(cls)
        record.arguments = arguments
        return record

    def __init__(self, *arguments: Any) -> None:
        """Called by the unpickler's REDUCE with the same arguments that `__new__` kept."""

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __repr__(self) -> str:
        return f"<inert {self.pickled_as}>"


def inert_record_class(name: str) -> type[InertRecord]:
    """A class of its own for the pickled name `name` (the unpickler finds allowed globals by identity)."""
    return type(name.rsplit(".", 1)[-1], (InertRecord,), {"pickled_as": name})


def pickle_streams(path: Path) -> Iterator[io.BytesIO]:
    """The pickles of a torch.save file: the zip archive's data.pkl (torch >= 1.6), or the legacy format's leading
    pickles (magic number, protocol, system info, the object, its storage keys) read one after the other."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            data = next((name for name in archive.namelist() if name.endswith("data.pkl")), None)
            if data is None:
                raise ValueError(
                    f"{path} is a zip archive without data.pkl: not a checkpoint torch.save wrote."
                )
            yield io.BytesIO(archive.read(data))
        return
    with path.open("rb") as file:
        for _ in range(5):
            yield file  # genops reads one pickle and stops at its STOP


def pickled_globals(path: Path) -> set[str]:
    """Every class or function that model.pt's pickles name ("module.name"), read from the opcodes without running
    any of them (pickletools)."""
    names = set()
    try:
        for stream in pickle_streams(path):
            for opcode, argument, _ in pickletools.genops(stream):
                if opcode.name == "GLOBAL":
                    module, name = str(argument).split(" ", 1)
                    names.add(f"{module}.{name}")
                elif opcode.name == "STACK_GLOBAL":  # protocol 4: the names come from the stack
                    names.add("a STACK_GLOBAL (pickle protocol 4), which torch.save does not write")
    except (ValueError, EOFError) as error:  # not a pickle, or cut short
        raise ValueError(
            f"{path} is not a checkpoint torch.save wrote, or it is damaged ({error}): "
            f"download the archive again."
        ) from None
    return names


def refused_globals(names: set[str]) -> list[str]:
    """The pickled names that are neither torch's nor plain containers nor a fairseq checkpoint's own."""
    return sorted(
        name
        for name in names
        if not name.startswith("torch.")
        and name not in TORCH_PLAIN_GLOBALS
        and name != NAMESPACE
        and not name.startswith(TRAINING_STATE_MODULES)
    )


def load_checkpoint(path: Path) -> dict[str, Any]:
    """model.pt as a dict, read by torch's weights-only unpickler with only what a fairseq checkpoint needs
    allowed: tensors and plain containers (torch's own allowlist), argparse.Namespace, and fairseq's training-state
    classes as inert records. Any other pickled class or function is refused by name before loading (it could run
    code); so is a cfg pickled as omegaconf objects, with the command that re-saves it as plain containers."""
    names = pickled_globals(path)
    refused = refused_globals(names)
    if any(name.startswith("omegaconf.") for name in refused):
        raise ValueError(
            f"{path} pickles its cfg as omegaconf objects ({', '.join(refused)}), which this converter does not "
            f"load (unpickling them runs their code): {OMEGACONF_FIX}."
        )
    if refused:
        raise ValueError(
            f"{path} pickles {', '.join(refused)}, which a fairseq checkpoint does not hold; loading it could run "
            f"code, so it is refused (only tensors, plain containers, argparse.Namespace and fairseq's training "
            f"state are read): {STRIP_FIX}."
        )
    inert = [(inert_record_class(name), name) for name in names if name.startswith(TRAINING_STATE_MODULES)]
    try:
        with torch.serialization.safe_globals([argparse.Namespace, *inert]):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch's own refusal (a pickled torch module, say), or a damaged file
        # torch's message is not repeated: it advises weights_only=False, which would run what the file pickles
        raise ValueError(f"{path} cannot be read safely ({type(error).__name__}): {STRIP_FIX}.") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("model"), Mapping):
        raise ValueError(
            f"{path} holds no fairseq checkpoint (a dict with the model's weights under 'model')."
        )
    return checkpoint
