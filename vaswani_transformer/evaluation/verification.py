"""A model folder must match its weights, checked before anything of it loads.

transformers loads what it can and initialises the rest at random: a config.json edited after the weights were
saved (another layer count, head count, activation or model type), a model.safetensors missing a tensor or holding
NaN, a damaged generation_config.json, all translate into garbage with exit status 0. `verify_model_folder` reads
the weights' names and shapes from the safetensors header (`safe_open`, nothing unpickled) and refuses, naming the
file and the fix:

- weights the config does not describe: names missing or unexpected, other shapes, NaN or infinite values
  (model.safetensors);
- a config the weights cannot have produced: layer counts, table sizes, biases and position tables read from the
  weights' names and shapes (config.json);
- settings that change no shape (heads, activation, embedding scale, positions, token ids, model type) other than
  those the weights were saved with: config.json's own `architecture_fingerprint`, written whenever a config is
  saved (one without it is refused), and the run's train_options.json where the folder holds one, which names the
  setting that differs (docs/hub.md);
- generation settings that cannot decode (generation_config.json) and token ids outside the vocabulary;
- an FSMT tokenizer's merges.txt that is not a list of BPE merges (`check_merges`).
"""

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError, safe_open
from transformers import GenerationConfig

from ..files.reading import read_json, read_text_lines
from ..modeling.configuration_vaswani_transformer import (
    FINGERPRINT_KEY,
    SHAPE_FREE_SETTINGS,
    VaswaniTransformerConfig,
)
from ..modeling.modeling_vaswani_transformer import (
    VaswaniTransformerForConditionalGeneration,
    VaswaniTransformerModel,
)

SAVE_AGAIN = "save the model and tokenizer again (save_pretrained) or copy the folder anew"
RESTORE_CONFIG = "restore the folder's own config.json (copy the folder anew), or save the model again"
# This package's layers hold their feed-forward sublayer (§3.3) under this name; no other family's weights do.
OWN_LAYER_NAME = ".feed_forward.fc1.weight"
LAYER = re.compile(r"^(?:model\.)?(encoder|decoder)\.layers\.(\d+)\.")
# The generation settings checked before decoding, each with what it must be.
COUNTS = {"num_beams": 1, "num_return_sequences": 1, "max_length": 2, "max_new_tokens": 1}
NON_NEGATIVE = ("min_length", "min_new_tokens", "no_repeat_ngram_size")
TOKEN_IDS = (
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
)
# A lower bound on the output's length longer than this many tokens can only be met with junk (§6.1's output
# limit is the source + 50, within the model's positions).
LONGEST_MINIMUM = ("min_length", "min_new_tokens")
VERSION_LINE = re.compile(r"#version: ")


def weight_files(folder: Path) -> list[Path]:
    """model.safetensors, or the shards its index names."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return [folder / "model.safetensors"]
    weight_map = read_json(index, SAVE_AGAIN)
    if not isinstance(weight_map, dict) or not isinstance(weight_map.get("weight_map"), dict):
        raise ValueError(f"{index} has no weight_map: {SAVE_AGAIN}.")
    return [folder / name for name in sorted(set(map(str, weight_map["weight_map"].values())))]


def readable_file(path: Path) -> None:
    """The path is a file this process can read: a FileNotFoundError for one that is missing, a ValueError naming
    what it is instead (a folder, a pipe) or why it cannot be read."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing; a saved model folder holds it ({SAVE_AGAIN}).")
    if not path.is_file():
        raise ValueError(f"{path} is not a regular file (a folder, a pipe or a device): {SAVE_AGAIN}.")
    try:
        with path.open("rb"):
            pass
    except OSError as error:
        raise ValueError(
            f"{path} cannot be read ({error.strerror}): give this user read access, or {SAVE_AGAIN}."
        ) from None


def weight_shapes(files: Iterable[Path]) -> dict[str, tuple[int, ...]]:
    """Every tensor's name and shape, from the safetensors headers (no tensor is read); a file that is missing,
    not safetensors (truncated, overwritten) or whose header claims more bytes than it holds is an error naming
    it."""
    shapes: dict[str, tuple[int, ...]] = {}
    for path in files:
        readable_file(path)
        try:
            with safe_open(path, framework="pt") as tensors:
                shapes |= {name: tuple(tensors.get_slice(name).get_shape()) for name in tensors.keys()}  # noqa: SIM118
        except (SafetensorError, RuntimeError, OSError) as error:  # truncated by a full disk, a forged header
            raise ValueError(f"{path} is damaged ({error}): {SAVE_AGAIN}.") from None
    return shapes


def check_finite(files: Iterable[Path]) -> None:
    """No weight holds NaN or an infinity (a run that diverged, a damaged copy): an error naming the file and the
    first such tensor."""
    for path in files:
        for name, tensor in _tensors(path):
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise ValueError(
                    f"{path}: the weight {name} holds NaN or infinite values (a training run that diverged, "
                    "or a damaged copy): this model cannot translate; use an earlier checkpoint or copy the "
                    "folder anew."
                )


def _tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor of a safetensors file, read one at a time; one whose bytes the file does not hold (a header
    that claims more) is an error naming the file."""
    with safe_open(path, framework="pt") as tensors:
        for name in tensors.keys():  # noqa: SIM118
            try:
                tensor = tensors.get_tensor(name)
            except (SafetensorError, RuntimeError, OSError) as error:
                raise ValueError(f"{path} is damaged ({name}: {error}): {SAVE_AGAIN}.") from None
            yield name, tensor


def _layer_count(shapes: Mapping[str, tuple[int, ...]], stack: str) -> int:
    indices = {int(match[2]) for name in shapes if (match := LAYER.match(name)) and match[1] == stack}
    return max(indices) + 1 if indices else 0


def _shape(shapes: Mapping[str, tuple[int, ...]], *names: str) -> tuple[int, ...] | None:
    """The shape of the first of `names` (with or without the `model.` prefix) that the weights hold."""
    for name in names:
        for key in (f"model.{name}", name):
            if key in shapes:
                return shapes[key]
    return None


def weights_say(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """What the weights' names and shapes fix of the config: layer counts, sizes, biases, positions."""
    said: dict[str, Any] = {
        "num_encoder_layers": _layer_count(shapes, "encoder"),
        "num_decoder_layers": _layer_count(shapes, "decoder"),
        "attention_bias": _shape(shapes, "encoder.layers.0.self_attn.q_proj.bias") is not None,
    }
    if (table := _shape(shapes, "encoder.embed_tokens.weight")) is not None:
        said["vocab_size"], said["d_model"] = table
    if (fc1 := _shape(shapes, "encoder.layers.0.feed_forward.fc1.weight")) is not None:
        said["d_ff"] = fc1[0]
    positions = _shape(shapes, "encoder.embed_positions.weight")
    said["position_embedding_type"] = "learned" if positions is not None else "sinusoidal"
    if positions is not None:
        said["max_position_embeddings"] = positions[0]
    return said


def check_config_fits_weights(
    config_file: Path, config: VaswaniTransformerConfig, shapes: Mapping[str, tuple[int, ...]]
) -> None:
    """Refuse a config.json whose sizes the weights contradict, naming each key, its value and the weights'."""
    contradictions = [
        f"{key} {getattr(config, key)!r} (the weights have {value!r})"
        for key, value in weights_say(shapes).items()
        if getattr(config, key) != value
    ]
    if contradictions:
        raise ValueError(
            f"{config_file} does not belong to the weights in model.safetensors: it says "
            f"{'; '.join(contradictions)}. It was edited or copied from another model: {RESTORE_CONFIG}."
        )


def expected_shapes(config: VaswaniTransformerConfig, with_head: bool) -> tuple[dict[str, tuple], set[str]]:
    """The names and shapes of the weights a model of `config` saves, and those of them that may be left out (tied
    copies of the shared table, §3.4), from a model built on the meta device (no memory, no initialisation)."""
    model_class = VaswaniTransformerForConditionalGeneration if with_head else VaswaniTransformerModel
    with torch.device("meta"):
        model = model_class(config)
    shapes = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    optional = set(model.all_tied_weights_keys) | set(model._keys_to_ignore_on_save or ())
    return shapes, optional


def check_weights_fit_config(
    weights: Path, config: VaswaniTransformerConfig, shapes: Mapping[str, tuple[int, ...]]
) -> None:
    """Refuse weights missing a tensor the config needs, holding one it has no place for, or of another shape."""
    expected, optional = expected_shapes(config, with_head=any(name.startswith("model.") for name in shapes))
    missing = sorted(set(expected) - set(shapes) - optional)
    unexpected = sorted(set(shapes) - set(expected))
    reshaped = sorted(name for name in set(shapes) & set(expected) if shapes[name] != expected[name])
    problems = [
        f"{len(names)} {what} ({', '.join(names[:3])}{', …' if len(names) > 3 else ''})"
        for what, names in (
            ("weights missing", missing),
            ("weights the model has no place for", unexpected),
            ("weights of another shape than config.json's", reshaped),
        )
        if names
    ]
    if problems:
        raise ValueError(
            f"{weights} is not a whole model of this config: {'; '.join(problems)}. transformers would "
            f"initialise what is missing at random: {SAVE_AGAIN}."
        )


def run_settings(folder: Path) -> dict[str, Any] | None:
    """The shape-free settings the folder's train_options.json (written by vaswani-train) trained with, or None:
    no such file, or one that does not say (a foreign record is not evidence)."""
    try:
        options = json.loads((folder / "train_options.json").read_bytes())
        config = VaswaniTransformerConfig.from_preset(options["preset"], **options["config_overrides"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {name: getattr(config, name) for name in SHAPE_FREE_SETTINGS}


def check_architecture_record(
    config_file: Path, raw: Mapping[str, Any], config: VaswaniTransformerConfig
) -> None:
    """The settings that change no shape are those the weights were saved with: the run's train_options.json,
    where the folder has one, names each that differs; config.json's fingerprint, which every config this package
    saves records, catches any."""
    trained = run_settings(config_file.parent)
    differing = [
        f"{name} {getattr(config, name)!r} (the run trained with {value!r})"
        for name, value in (trained or {}).items()
        if getattr(config, name) != value
    ]
    recorded = raw.get(FINGERPRINT_KEY)
    if not differing and recorded == config.architecture_fingerprint():
        return
    if differing:
        what = f"says {'; '.join(differing)}, as train_options.json records"
    elif recorded is None:
        what = f"records no {FINGERPRINT_KEY} (every config.json this package saves records one)"
    else:
        what = (
            f"has settings other than those the weights were saved with (its {FINGERPRINT_KEY} differs: one of "
            f"{', '.join(SHAPE_FREE_SETTINGS)} was changed)"
        )
    raise ValueError(
        f"{config_file} {what}. These weights compute something else with them: {RESTORE_CONFIG}."
    )


def check_token_ids(path: Path, settings: Mapping[str, Any], vocab_size: int, fix: str) -> None:
    """Every token id in `settings` (a config or generation config) is an id of the vocabulary."""
    for name in TOKEN_IDS:
        value = settings.get(name)
        values = value if isinstance(value, list) else [value]
        if value is not None and not all(type(v) is int and 0 <= v < vocab_size for v in values):
            raise ValueError(
                f"{path}: {name} {value!r} is not a token id of the model's {vocab_size:,}-token vocabulary "
                f"(0 to {vocab_size - 1:,}): {fix}."
            )


def _generation_problem(name: str, value: Any) -> str | None:
    """What is wrong with one generation setting (None: nothing, or not a setting checked here)."""
    if name in COUNTS and value is not None and (type(value) is not int or value < COUNTS[name]):
        return f"give a whole number of at least {COUNTS[name]}"
    if name in NON_NEGATIVE and value is not None and (type(value) is not int or value < 0):
        return "give a whole number of at least 0"
    if name == "length_penalty" and (type(value) not in (int, float) or not math.isfinite(value)):
        return "give a finite number (the paper: 0.6)"
    if name == "early_stopping" and value not in (True, False, "never"):
        return 'give true, false or "never"'
    return None


def check_generation_config(folder: Path, vocab_size: int, max_positions: int | None = None) -> None:
    """generation_config.json, where the folder has one, is JSON whose decoding settings can decode: an error
    naming the file, the key and the fix otherwise (transformers ignores a damaged file, losing the model's α); a
    minimum length beyond the model's `max_positions` would pad every translation with junk."""
    path = folder / "generation_config.json"
    if not path.is_file():
        return
    fix = "correct it, or delete it to decode with the model's defaults (beam 4, α = 0.6)"
    settings = read_json(path, fix)
    if not isinstance(settings, dict):
        raise ValueError(f"{path} is not a JSON object of generation settings: {fix}.")
    for name, value in settings.items():
        if problem := _generation_problem(name, value):
            raise ValueError(f"{path}: {name} {value!r} cannot decode: {problem}; or {fix}.")
    for name in LONGEST_MINIMUM:
        if max_positions is not None and (settings.get(name) or 0) > max_positions:
            raise ValueError(
                f"{path}: {name} {settings[name]:,} is longer than any translation of this model "
                f"(max_position_embeddings {max_positions:,}): every output would be padded with junk to reach it; "
                f"give 0, or {fix}."
            )
    beams, returned = settings.get("num_beams") or 1, settings.get("num_return_sequences") or 1
    if returned > beams:
        raise ValueError(f"{path}: num_return_sequences {returned} exceeds num_beams {beams}: {fix}.")
    check_token_ids(path, settings, vocab_size, fix)
    try:  # transformers' own checks of the settings together, which name no file
        GenerationConfig.from_dict(settings)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error} ({fix}).") from None


def check_merges(merges: Iterable[tuple[str, ...]], path: str) -> None:
    """BPE merges as subword-nmt learns them (Sennrich et al., 2016): each joins two symbols, and each symbol is
    one character (with the `</w>` word end) or the result of an earlier merge. Any other list tokenises text
    otherwise than the model was trained on."""
    made: set[str] = set()
    for number, merge in enumerate(merges, start=1):
        if number == 1 and merge and VERSION_LINE.match(" ".join(merge)):
            continue  # subword-nmt's header line, which FSMTTokenizer reads as a merge that never applies
        parts = [part.removesuffix("</w>") for part in merge]
        if len(merge) != 2 or not all(
            len(part) == 1 or symbol in made for part, symbol in zip(parts, merge, strict=True)
        ):
            raise ValueError(
                f"{path}: merge {number} ({' '.join(merge)!r}) is not a BPE merge of two known symbols (each one "
                "character or an earlier merge's result): the file is damaged or not this model's; copy the "
                "model's own merges.txt."
            )
        made.add(merge[0] + merge[1])


def merges_in(path: Path) -> list[tuple[str, ...]]:
    """merges.txt's merges as FSMTTokenizer reads them (the first two fields of each line); a file that is not
    UTF-8 is an error naming it."""
    lines = read_text_lines(path, "copy the model's own")
    return [tuple(line.split()[:2]) for line in lines if line]


def _raw_config(folder: Path) -> dict[str, Any]:
    raw = read_json(folder / "config.json", SAVE_AGAIN)
    if not isinstance(raw, dict):
        raise ValueError(f"{folder / 'config.json'} is not a JSON object: {SAVE_AGAIN}.")
    return raw


def _config(
    config_file: Path, raw: dict[str, Any], shapes: Mapping[str, tuple[int, ...]]
) -> VaswaniTransformerConfig:
    """This package's config of config.json's values, refused naming the file where it holds another model type or
    values the config refuses."""
    if raw.get("model_type") != VaswaniTransformerConfig.model_type:
        raise ValueError(
            f"{config_file} says model_type {raw.get('model_type')!r}, but the weights are this package's "
            f"({VaswaniTransformerConfig.model_type}): transformers would load another model with almost every "
            f"weight missing: {RESTORE_CONFIG}."
        )
    vocab_size = weights_say(shapes).get("vocab_size", raw.get("vocab_size", 0))
    check_token_ids(config_file, raw, vocab_size, RESTORE_CONFIG)
    try:
        return VaswaniTransformerConfig.from_dict(raw)
    except (
        StrictDataclassError,
        TypeError,
        ValueError,
    ) as error:  # a value of the wrong type, or out of range
        raise ValueError(f"{config_file}: {error} ({RESTORE_CONFIG}).") from None


def verify_model_folder(folder: Path) -> None:
    """Refuse (ValueError, FileNotFoundError) a model folder whose config.json, model.safetensors,
    generation_config.json or merges.txt do not match each other (the module's docstring). A folder of another
    model family is checked only for readable, finite weights and its generation settings."""
    files = weight_files(folder)
    shapes = weight_shapes(files)
    raw = _raw_config(folder)
    if raw.get("model_type") == VaswaniTransformerConfig.model_type or any(
        name.endswith(OWN_LAYER_NAME) for name in shapes
    ):
        config_file = folder / "config.json"
        config = _config(config_file, raw, shapes)
        check_config_fits_weights(config_file, config, shapes)
        check_weights_fit_config(files[0] if len(files) == 1 else folder, config, shapes)
        check_architecture_record(config_file, raw, config)
    check_finite(files)
    vocab_size = weights_say(shapes).get("vocab_size", raw.get("vocab_size"))
    positions = raw.get("max_position_embeddings")
    if isinstance(vocab_size, int):
        check_generation_config(folder, vocab_size, positions if isinstance(positions, int) else None)
    if (folder / "merges.txt").is_file():
        check_merges(merges_in(folder / "merges.txt"), str(folder / "merges.txt"))
