"""The site's figures that are made, not measured: `python docs/figures.py` writes both.

- docs/model.svg: the Transformer as this package builds it, after the paper's Figure 1 (Vaswani et al., 2017);
- docs/decisions/init_study_{tiny_small,base_big}.png: benchmarks/init_study.png (16 panels, 1,848 pixels wide,
  unreadable at the site's column width) cut into its two halves, two presets each, at full resolution.

The model drawing is our own, not the paper's picture: the encoder and decoder stacks (N = `num_encoder_layers` /
`num_decoder_layers`), each sub-layer followed by Add & Norm (post-norm, §3.1), the sinusoidal positions added to
embeddings scaled by √d_model (§3.4, §3.5), and one embedding matrix shared by source, target and the pre-softmax
projection (§3.4). The numbers in the labels are read from `VaswaniTransformerConfig()`, the paper's base model,
so the picture follows the config's defaults.
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib import image
from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

from vaswani_transformer import VaswaniTransformerConfig  # noqa: E402

DOCS = Path(__file__).parent
OUTPUT = DOCS / "model.svg"
INIT_STUDY = DOCS.parent / "benchmarks" / "init_study.png"
# benchmarks/init_study.py's figure: a title band, then 4 columns of panels (tiny, small, base, big); its
# pixels at which the title band ends and the second column's panels end.
INIT_STUDY_TITLE_BOTTOM = 47
INIT_STUDY_HALF = 912
COLOURS = {  # the paper's palette, lighter
    "attention": "#f9d9a6",
    "feed_forward": "#c9e6f7",
    "norm": "#f5f3b4",
    "embedding": "#f6c7c7",
    "linear": "#d8d0ef",
    "softmax": "#cdeccf",
    "stack": "#f0f0f0",
}
BOX_WIDTH = 3.6
BOX_HEIGHT = 0.42


def box(axes: plt.Axes, x: float, y: float, text: str, colour: str, height: float = BOX_HEIGHT) -> None:
    """A rounded box centred on x, bottom at y."""
    patch = FancyBboxPatch(
        (x - BOX_WIDTH / 2, y), BOX_WIDTH, height, boxstyle="round,pad=0.02,rounding_size=0.08",
        facecolor=COLOURS[colour], edgecolor="#333333", linewidth=1.0,
    )  # fmt: skip
    axes.add_patch(patch)
    axes.text(x, y + height / 2, text, ha="center", va="center", fontsize=8.5)


def arrow(axes: plt.Axes, start: tuple[float, float], end: tuple[float, float], **style: object) -> None:
    axes.add_patch(
        FancyArrowPatch(
            start, end, arrowstyle="-|>", mutation_scale=10, color="#333333", linewidth=1.0, **style
        )
    )


def stack(axes: plt.Axes, x: float, y: float, rows: list[tuple[str, str]], layers: int, side: str) -> float:
    """A stack of sub-layers, each with its Add & Norm, inside a grey frame marked "N×"; returns its top."""
    height = len(rows) * 2 * (BOX_HEIGHT + 0.22) + 0.2
    frame = FancyBboxPatch(
        (x - BOX_WIDTH / 2 - 0.25, y), BOX_WIDTH + 0.5, height, boxstyle="round,pad=0.02,rounding_size=0.15",
        facecolor=COLOURS["stack"], edgecolor="#777777", linewidth=1.0,
    )  # fmt: skip
    axes.add_patch(frame)
    label_x = x - BOX_WIDTH / 2 - 0.45 if side == "left" else x + BOX_WIDTH / 2 + 0.45
    axes.text(label_x, y + height / 2, f"{layers}×", ha="center", va="center", fontsize=12, fontweight="bold")
    level = y + 0.2
    for text, colour in rows:
        box(axes, x, level, text, colour)
        arrow(axes, (x, level + BOX_HEIGHT), (x, level + BOX_HEIGHT + 0.22))
        level += BOX_HEIGHT + 0.22
        box(axes, x, level, "Add & Norm (post-norm)", "norm", height=0.3)
        # the residual path around the sub-layer (§3.1, §5.4: x + Dropout(Sublayer(x)), then LayerNorm)
        edge = x + BOX_WIDTH / 2 if side == "left" else x - BOX_WIDTH / 2
        bend = 0.18 if side == "left" else -0.18
        axes.plot([edge - bend * 0.2, edge + bend, edge + bend], [level - 0.5, level - 0.5, level + 0.15],
                  color="#555555", linewidth=0.9)  # fmt: skip
        arrow(axes, (edge + bend, level + 0.15), (edge, level + 0.15))
        level += 0.3 + 0.22
        if (text, colour) != rows[-1]:
            arrow(axes, (x, level - 0.22), (x, level))
    return y + height


def draw(config: VaswaniTransformerConfig, output: Path) -> None:
    figure, axes = plt.subplots(figsize=(8.4, 6.8))
    axes.set_xlim(-0.4, 10.8)
    axes.set_ylim(-0.1, 8.3)
    axes.axis("off")
    encoder_x, decoder_x = 2.4, 7.8
    # inputs, shared embedding, positions
    axes.text(encoder_x, 0.15, "source tokens (joint BPE)", ha="center", fontsize=9)
    axes.text(decoder_x, 0.15, "target tokens, shifted right", ha="center", fontsize=9)
    for x in (encoder_x, decoder_x):
        arrow(axes, (x, 0.45), (x, 0.7))
        box(axes, x, 0.7, f"Embedding × √{config.d_model}", "embedding")
        axes.text(x, 1.42, "⊕", ha="center", va="center", fontsize=16)
        arrow(axes, (x, 1.12), (x, 1.3))
        arrow(axes, (x, 1.55), (x, 1.85))
    axes.text(5.1, 1.42, "sinusoidal positions\n(§3.5; sin, cos interleaved)", ha="center", va="center",
              fontsize=8)  # fmt: skip
    arrow(axes, (4.0, 1.42), (encoder_x + 0.22, 1.42))
    arrow(axes, (6.2, 1.42), (decoder_x - 0.22, 1.42))
    heads = config.num_heads
    encoder_top = stack(
        axes, encoder_x, 1.85,
        [(f"Multi-head self-attention ({heads} heads)", "attention"), (f"Feed forward {config.d_model}→{config.d_ff}→{config.d_model}", "feed_forward")],
        config.num_encoder_layers, "left",
    )  # fmt: skip
    decoder_top = stack(
        axes, decoder_x, 1.85,
        [("Masked multi-head self-attention", "attention"), ("Multi-head encoder-decoder attention", "attention"),
         (f"Feed forward {config.d_model}→{config.d_ff}→{config.d_model}", "feed_forward")],
        config.num_decoder_layers, "right",
    )  # fmt: skip
    # the encoder's output feeds every decoder layer's encoder-decoder attention (keys and values)
    cross_y = 1.85 + 0.2 + 2 * (BOX_HEIGHT + 0.22) + BOX_HEIGHT / 2
    axes.plot([encoder_x, encoder_x, 5.1, 5.1], [encoder_top, encoder_top + 0.3, encoder_top + 0.3, cross_y],
              color="#333333", linewidth=1.0)  # fmt: skip
    arrow(axes, (5.1, cross_y), (decoder_x - BOX_WIDTH / 2, cross_y))
    axes.text(encoder_x, encoder_top + 0.45, "encoder output (keys, values)", ha="center", fontsize=8)
    # output head: the softmax's weights are the embedding's
    arrow(axes, (decoder_x, decoder_top), (decoder_x, decoder_top + 0.3))
    box(axes, decoder_x, decoder_top + 0.3, "Linear (= embedding matrixᵀ)", "linear")
    arrow(axes, (decoder_x, decoder_top + 0.3 + BOX_HEIGHT), (decoder_x, decoder_top + 0.55 + BOX_HEIGHT))
    box(axes, decoder_x, decoder_top + 0.55 + BOX_HEIGHT, "Softmax", "softmax")
    axes.text(
        decoder_x, decoder_top + 0.75 + 2 * BOX_HEIGHT, "next-token probabilities", ha="center", fontsize=9
    )
    shared = (f"one embedding matrix ({config.vocab_size:,} × {config.d_model}):\n"
              "source, target and the pre-softmax projection (§3.4)")  # fmt: skip
    axes.text(encoder_x, decoder_top + 0.55, shared, ha="center", va="center", fontsize=8, color="#8a1c1c",
              bbox={"boxstyle": "round", "facecolor": COLOURS["embedding"], "edgecolor": "#8a1c1c"})  # fmt: skip
    axes.set_title(
        "The Transformer (after Vaswani et al., 2017, Figure 1): the base model's sizes", fontsize=10
    )
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, sharp and searchable
    figure.savefig(output, bbox_inches="tight", facecolor="white", metadata={"Date": None})
    plt.close(figure)


def split_init_study(figure: Path, folder: Path) -> list[Path]:
    """The initialisation study's figure as two pictures of two presets each, without the title band (the page
    says it)."""
    pixels = image.imread(figure)[INIT_STUDY_TITLE_BOTTOM:]
    halves = {"tiny_small": pixels[:, :INIT_STUDY_HALF], "base_big": pixels[:, INIT_STUDY_HALF:]}
    written = []
    for name, half in halves.items():
        written.append(folder / f"init_study_{name}.png")
        image.imsave(written[-1], half)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"the model's picture (default {OUTPUT})")
    arguments = parser.parse_args()
    draw(VaswaniTransformerConfig(), arguments.output)
    split_init_study(INIT_STUDY, DOCS / "decisions")


if __name__ == "__main__":
    main()
