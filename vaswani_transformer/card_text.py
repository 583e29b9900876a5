"""The model card's sentences that follow from what the model is (`hub.build_model_card` fills the template with
them): how to install the package, what loading the folder needs, and the Limitations section."""

import hashlib
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from .extras import repository_url as _repository_url
from .provenance import Corpus, Origin

LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "ru": "Russian"}
# The package is not on PyPI: it installs from a clone of its repository, or from the repository's URL where the
# package's metadata names one (pyproject.toml's [project.urls]).
CLONE_INSTALL = "`pip install -e {target}` in a clone of its repository, as it is not on PyPI"
GIT_INSTALL = "`pip install 'vaswani_transformer{extra} @ git+{url}'`"


def language_name(code: str) -> str:
    """A language's English name for the card ("de" → "German"); the code where the card knows no name."""
    return LANGUAGE_NAMES.get(code, code)


def original_link(origin: Origin) -> str:
    """The original of a converted model, linked where it is on the Hub."""
    if origin.base_model:
        return f"[{origin.base_model}](https://huggingface.co/{origin.base_model})"
    return f"`{Path(origin.source).name}`"


# What each file a saved folder carries does, in the card's words (`saving_vaswani_transformer.FOLDER_CODE`)
FOLDER_CODE_ROLES = {
    "configuration_vaswani_transformer.py": "The hyper-parameters (§3) and their checks; the "
    "fingerprint of the settings that change what the weights compute.",
    "presets_vaswani_transformer.py": "Table 3's named model sizes, and two CPU sizes (plain data).",
    "modeling_vaswani_transformer.py": "The model in the paper's order: positions (§3.5), attention (§3.2), "
    "feed-forward (§3.3), post-norm layers (§3.1), the stacks with the tied, scaled embeddings (§3.4).",
    "generation_vaswani_transformer.py": "§6.1 decoding: `generate()`'s default output limit and the beam search "
    "with the configured length penalty, on transformers' documented `custom_generate`.",
    "loss_vaswani_transformer.py": "§5.4 label smoothing: the training loss per target token.",
    "fast_path_vaswani_transformer.py": "Speed machinery behind `config.fast_path` (faster CPU dropout draws, a "
    "bfloat16 residual stream under autocast); it changes no result.",
    "saving_vaswani_transformer.py": "`save_pretrained`: copies the pipeline and handler beside the model and "
    "declares the pipeline in config.json.",
    "pipeline_vaswani_transformer.py": "The `vaswani-translation` pipeline: texts in, translations out, through "
    "the model's `generate()`.",
    "handler.py": "Inference Endpoints' custom handler: each request's texts through the pipeline.",
}


def package_version() -> str:
    """This package's version, as a card names the release that wrote a folder's code."""
    try:
        return metadata.version("vaswani_transformer")
    except metadata.PackageNotFoundError:
        return "unknown"


def code_files_table(folder: Path, names: tuple[str, ...]) -> str:
    """A Markdown table of the code files `folder` carries: each file's sha256 and what it does."""
    rows = ["| File | sha256 | What it does |", "| --- | --- | --- |"]
    for name in names:
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        rows.append(f"| `{name}` | `{digest}` | {FOLDER_CODE_ROLES[name]} |")
    return "\n".join(rows)


def install_command(extra: str = "") -> str:
    """How to install the package (with `extra`), in the card's words: from its repository's URL where its
    metadata names one, else from a clone (it is not on PyPI)."""
    extra = f"[{extra}]" if extra else ""
    if url := _repository_url():
        return GIT_INSTALL.format(extra=extra, url=url)
    return CLONE_INSTALL.format(target=f"'.{extra}'" if extra else ".")


def requirements(tokenizer_class: str) -> str:
    """What loading the folder with transformers alone needs installed."""
    if tokenizer_class == "FSMTTokenizer":
        return (
            "`pip install torch transformers sacremoses` (the FSMT tokenizer's Moses steps need sacremoses)"
        )
    return "`pip install torch transformers`"


# What the folder's own code imports beyond the standard library, by the name the package's metadata requires it
# under: the model (torch, transformers) and handler.py's sentence splitting (sentencex, the serve extra).
FOLDER_REQUIREMENTS = ("torch", "transformers", "sentencex")


def folder_requirements(tokenizer_class: str) -> str:
    """requirements.txt of a published folder (Inference Endpoints installs it for handler.py): the versions this
    package requires of what the folder's code imports, and sacremoses for the FSMT tokenizer."""
    wanted = [*FOLDER_REQUIREMENTS, *(["sacremoses"] if tokenizer_class == "FSMTTokenizer" else [])]
    required: dict[str, str] = {}
    for line in metadata.requires("vaswani_transformer") or []:
        requirement = Requirement(line)
        required.setdefault(requirement.name, f"{requirement.name}{requirement.specifier}")
    return "".join(f"{required.get(name, name)}\n" for name in wanted)


def decoding_limitation(settings: dict[str, Any], length_penalty_type: str) -> str:
    """Where the length penalty and output limit that `generate()` uses (`settings`, as
    `engines.torch_engine.decoding_settings` reports them) live, and what loses them."""
    limit = settings.get("max_new_tokens", settings.get("max_length"))
    if length_penalty_type == "gnmt":
        return (
            f"The paper's length penalty ((5 + |Y|) / 6)^α (α = {settings.get('length_penalty')}) and the output "
            f"limit ({limit} tokens) live in this model's code: loaded through another class they are lost."
        )
    penalty = (
        f"transformers' length penalty |Y|^α (α = {settings['length_penalty']}) and "
        if settings["num_beams"] > 1
        else ""
    )
    return (
        f"It decodes with {penalty}an output limit of {limit} tokens from its generation_config.json, as its "
        "original does: a longer translation is cut there."
    )


def limitations(
    corpus: Corpus,
    origin: Origin | None,
    languages: list[str] | None,
    options: dict[str, Any],
    lowercase: bool,
    decoding: str,
) -> str:
    """The Limitations section, from what the model is: its data (`corpus`, or a converted model's `origin`),
    language pair, training lengths (`options`), casing and decoding (`decoding_limitation`'s sentence)."""
    items = [
        f"Trained on {corpus.kind} only: expect poor translations of text unlike it."
        if origin is None
        else f"Trained on its original's data: see {original_link(origin)} for what it knows."
    ]
    if languages:
        source, target = map(language_name, languages)
        items.append(
            f"Translates {source} into {target} only: text in another language, or the other direction, "
            "gives a wrong translation, not an error."
        )
    if options.get("max_length"):
        items.append(f"Trained on pairs of at most {options['max_length']} tokens a side.")
    if lowercase:
        items.append("Its tokenizer lowercases the input, and its translations come out lowercase.")
    elif options:
        items.append(
            "ALL-CAPS input degenerates (repeated or missing words): the training text is cased as ordinary "
            "prose, so write it in sentence case first."
        )
    items.append(
        "A line of several sentences comes back as one run-on sentence: split it first, as "
        f"`vaswani-translate --split_sentences` and `vaswani-serve` do (the package's `serve` extra, "
        f"{install_command('serve')})."
    )
    items.append(decoding)
    return "\n".join(f"- {item}" for item in items)
