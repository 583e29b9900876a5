"""Figures people would rather see than read: the training curve, attention (§3.2) and positions (§3.5).

Figures are built with matplotlib's object API (`Figure`), so importing this module changes no global state.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from matplotlib.backend_bases import FigureCanvasBase
from matplotlib.figure import Figure
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .decoding.translate import translate
from .files.writing import file_written_whole
from .modeling.modeling_vaswani_transformer import (
    VaswaniTransformerSinusoidalPositionalEncoding,
    shift_tokens_right,
)

AttentionKind = Literal["cross", "encoder", "decoder"]


def _series(log_history: Sequence[dict], key: str) -> tuple[list[int], list[float]]:
    """Steps and values of one logged quantity."""
    entries = [entry for entry in log_history if key in entry and "step" in entry]
    return [entry["step"] for entry in entries], [entry[key] for entry in entries]


def training_losses_logged(log_history: Sequence[dict]) -> bool:
    """Whether a Trainer's `log_history` holds a training loss: a run that ends (on a time budget, say) before its
    first logging step has none, and no curve to draw."""
    return bool(_series(log_history, "loss")[0])


def plot_training_curve(
    log_history: Sequence[dict], path: str | Path, unigram_floor: float | None = None, *, choose: str = "path"
) -> Path:
    """Training (and dev) loss with the learning rate, and greedy dev BLEU, from a Trainer's `log_history`."""
    steps, losses = _series(log_history, "loss")
    if not steps:
        raise ValueError("log_history has no training-loss entries (set logging_steps below max_steps)")
    dev_steps, dev_bleu = _series(log_history, "eval_bleu")
    figure = Figure(figsize=(7, 6.5 if dev_steps else 4))
    loss_axis, *bleu_axis = figure.subplots(2 if dev_steps else 1, 1, sharex=True, squeeze=False)[:, 0]
    loss_axis.plot(steps, losses, color="tab:blue", label="training loss (label-smoothed)")
    loss_axis.plot(*_series(log_history, "eval_loss"), "o-", color="tab:green", label="dev loss (plain NLL)")
    if unigram_floor is not None:
        loss_axis.axhline(unigram_floor, color="grey", lw=0.8, ls="--", label="unigram floor (collapse)")
    loss_axis.set_ylabel("loss per target token")
    loss_axis.legend(loc="upper right", fontsize=8)
    rate_axis = loss_axis.twinx()
    rate_axis.plot(*_series(log_history, "learning_rate"), color="tab:orange", lw=0.8)
    rate_axis.set_ylabel("learning rate (eq. 3 × lr_scale)", color="tab:orange")
    loss_axis.set_title("Training")
    if bleu_axis:
        bleu_axis[0].plot(dev_steps, dev_bleu, "o-", color="tab:red")
        bleu_axis[0].set_ylabel("dev BLEU (greedy)")
    (bleu_axis[0] if bleu_axis else loss_axis).set_xlabel("step")
    figure.tight_layout()
    return _save(figure, Path(path), choose, dpi=120)


# The heat map is 960 × 480 pixels (8 × 4 inches at 120 dpi): a table of 2^22 values (2,048 positions of
# d_model 2,048, or 8,192 of 512) is already several values a pixel and peaks near 0.3 GB; 8,192 × 8,192 peaked
# at 4 GB, and 10^9 positions asked for terabytes until the kernel killed the process.
MAX_ENCODING_VALUES = 2**22


def figure_formats() -> list[str]:
    """The file suffixes matplotlib writes figures in (png, pdf, svg, …), without the dot."""
    return sorted(FigureCanvasBase.get_supported_filetypes())


def check_figure_file(path: str | Path) -> None:
    """A figure's file name ends in a format matplotlib writes (".png", ".pdf", ".svg", …); else a ValueError
    naming them, before any drawing (savefig would find out only at the end)."""
    formats = figure_formats()
    if Path(path).suffix.lower().removeprefix(".") not in formats:
        raise ValueError(
            f"{path}: give a file name ending in a format matplotlib writes "
            f"({', '.join('.' + name for name in formats)}), e.g. .png"
        )


def check_positional_encoding_size(d_model: int, length: int) -> None:
    """At most MAX_ENCODING_VALUES values in the table drawn (ValueError naming --length and --d_model)."""
    if d_model * length > MAX_ENCODING_VALUES:
        raise ValueError(
            f"--length {length:,} × --d_model {d_model:,} is {d_model * length:,} values; the picture draws at "
            f"most {MAX_ENCODING_VALUES:,} (it is 960 × 480 pixels): lower --length or --d_model (the paper's "
            "figure: 100 positions, 512 channels)."
        )


def plot_positional_encoding(d_model: int, length: int, path: str | Path, *, choose: str = "path") -> Path:
    """Heat map of PE(pos, i) for the first `length` positions (sin on even, cos on odd channels); a table too
    large to draw or a file format matplotlib does not write is a ValueError before any work."""
    check_positional_encoding_size(d_model, length)
    check_figure_file(path)
    table = VaswaniTransformerSinusoidalPositionalEncoding(d_model)(torch.arange(length))
    figure = Figure(figsize=(8, 4))
    axis = figure.subplots()
    image = axis.imshow(table.numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
    axis.set_xlabel("channel i")
    axis.set_ylabel("position")
    axis.set_title(f"Sinusoidal positional encoding, d_model = {d_model}")
    figure.colorbar(image, ax=axis)
    figure.tight_layout()
    return _save(figure, Path(path), choose, dpi=120)


@dataclass
class AttentionMaps:
    """One sentence pair's attention weights, padding removed, one (heads, queries, keys) tensor per layer.

    `target_tokens[i]` is the token the decoder predicts at position i (the last is </s>); cross-attention row i
    is where the decoder looked while predicting it.
    """

    source_tokens: list[str]
    target_tokens: list[str]
    encoder: list[torch.Tensor]  # per layer: (heads, src_len, src_len)
    decoder: list[torch.Tensor]  # per layer: (heads, tgt_len, tgt_len)
    cross: list[torch.Tensor]  # per layer: (heads, tgt_len, src_len)

    def of(self, kind: AttentionKind) -> tuple[list[torch.Tensor], list[str], list[str]]:
        """The layers of one kind of attention with their query and key tokens."""
        if kind == "encoder":
            return self.encoder, self.source_tokens, self.source_tokens
        if kind == "decoder":
            return self.decoder, self.target_tokens, self.target_tokens
        return self.cross, self.target_tokens, self.source_tokens


@torch.inference_mode()
def attention_maps(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    translations: Sequence[str] | None = None,
) -> list[AttentionMaps]:
    """Attention weights of the model reading `sources` and producing `translations` (default: its own).

    The sentences run as one padded batch through eager attention (sdpa returns no weights); each result keeps
    only its real tokens.
    """
    if translations is None:
        translations = translate(sources, model, tokenizer)
    if len(translations) != len(sources):
        raise ValueError(f"{len(sources)} sources but {len(translations)} translations.")
    device = model.device
    source = tokenizer(list(sources), padding=True, return_tensors="pt").to(device)
    labels = tokenizer(list(translations), padding=True, return_tensors="pt").to(device)
    config = model.config
    decoder_input_ids = shift_tokens_right(
        labels["input_ids"], config.pad_token_id, config.decoder_start_token_id
    )
    implementation, was_training = model.config._attn_implementation, model.training
    model.set_attn_implementation("eager")
    model.eval()
    try:
        outputs = model(
            input_ids=source["input_ids"],
            attention_mask=source["attention_mask"],
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=labels["attention_mask"],
            output_attentions=True,
        )
    finally:
        model.set_attn_implementation(implementation)
        model.train(was_training)
    maps = []
    for index in range(len(sources)):
        src_len, tgt_len = (
            int(source["attention_mask"][index].sum()),
            int(labels["attention_mask"][index].sum()),
        )
        maps.append(
            AttentionMaps(
                source_tokens=tokenizer.convert_ids_to_tokens(source["input_ids"][index, :src_len].tolist()),
                target_tokens=tokenizer.convert_ids_to_tokens(labels["input_ids"][index, :tgt_len].tolist()),
                encoder=[
                    layer[index, :, :src_len, :src_len].float().cpu() for layer in outputs.encoder_attentions
                ],
                decoder=[
                    layer[index, :, :tgt_len, :tgt_len].float().cpu() for layer in outputs.decoder_attentions
                ],
                cross=[
                    layer[index, :, :tgt_len, :src_len].float().cpu() for layer in outputs.cross_attentions
                ],
            )
        )
    return maps


def plot_attention(
    maps: AttentionMaps,
    path: str | Path,
    *,
    kind: AttentionKind = "cross",
    layer: int = -1,
    choose: str = "path",
) -> Path:
    """Every head of one layer in a grid, and their average, as heat maps with token labels and a colour bar."""
    layers, query_tokens, key_tokens = maps.of(kind)
    if not -len(layers) <= layer < len(layers):
        raise ValueError(
            f"layer {layer} does not exist: the model has {len(layers)} layers of {kind} attention."
        )
    weights = layers[layer]
    panels = [*weights, weights.mean(0)]
    titles = [f"head {head + 1}" for head in range(len(weights))] + ["average of the heads"]
    columns = math.ceil(math.sqrt(len(panels)))
    rows = math.ceil(len(panels) / columns)
    cell = 0.16 * max(len(key_tokens), len(query_tokens)) + 1.2
    figure = Figure(figsize=(columns * cell + 1.2, rows * cell + 0.8), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for axis, panel, title in zip(axes, panels, titles, strict=False):
        image = axis.imshow(panel.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axis.set_title(title, fontsize=9)
        axis.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=7)
        axis.set_yticks(range(len(query_tokens)), query_tokens, fontsize=7)
    for axis in axes[len(panels) :]:
        axis.set_visible(False)
    number = layer % len(layers) + 1
    names = {
        "cross": f"Encoder-decoder attention, decoder layer {number} of {len(layers)} (rows: target, columns: source)",
        "encoder": f"Encoder self-attention, layer {number} of {len(layers)}",
        "decoder": f"Decoder self-attention (masked), layer {number} of {len(layers)}",
    }
    figure.suptitle(names[kind])
    figure.colorbar(image, ax=list(axes[: len(panels)]), shrink=0.6, label="attention weight")
    return _save(figure, Path(path), choose, dpi=110)


def _save(figure: Figure, path: Path, choose: str, dpi: int) -> Path:
    """Save a figure whole or not at all (`files.file_written_whole`): a full disk or read-only folder leaves no
    half-written picture and is a WriteError naming `path` and `choose`, the flag that picks another place."""
    with file_written_whole(path, choose) as temporary:
        figure.savefig(temporary, dpi=dpi)
    return path
