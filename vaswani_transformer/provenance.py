"""Where a model's weights and data come from, for its model card: the corpus a recipe trains on (its Hub dataset
id, description and credit), and the original a converted model was made from (`vaswani-convert` records it in
the folder's `conversion.json`: its Hub id, language pair, licence and citations)."""

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError

from .files.paths import is_local_path

ORIGIN_FILE = "conversion.json"
NOT_RECORDED = "not recorded (the folder has no train_options.json, which vaswani-train writes)"
VASWANI_BIBTEX = """@inproceedings{vaswani2017attention,
  title = {Attention Is All You Need},
  author = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and
            Gomez, Aidan N. and Kaiser, {\\L}ukasz and Polosukhin, Illia},
  booktitle = {Advances in Neural Information Processing Systems},
  volume = {30},
  year = {2017}
}"""
# fairseq's README: "fairseq(-py) is MIT-licensed. The license applies to the pre-trained models as well.", and
# the citation it asks for.
FAIRSEQ_LICENSE = "mit"
FAIRSEQ_BIBTEX = """@inproceedings{ott2019fairseq,
  title = {fairseq: A Fast, Extensible Toolkit for Sequence Modeling},
  author = {Ott, Myle and Edunov, Sergey and Baevski, Alexei and Fan, Angela and Gross, Sam and Ng, Nathan and
            Grangier, David and Auli, Michael},
  booktitle = {Proceedings of NAACL-HLT 2019: Demonstrations},
  year = {2019}
}"""
MULTI30K_CREDIT = (
    "Multi30k (Elliott et al., 2016, W16-3210), derived from Flickr30K: for non-commercial research and "
    "educational use only, as its authors state."
)
WMT14_CREDIT = "WMT 2014 English-German (Bojar et al., 2014): see the licences of its component corpora."
TATOEBA = "Tatoeba English-German sentence pairs (tatoeba.org, via manythings.org/anki)"
TATOEBA_CREDIT = (  # as corpora/tatoeba_en_de/CREDIT.md
    "The training pairs are sentences of the Tatoeba Project (https://tatoeba.org) and its contributors, "
    "paired by https://www.manythings.org/anki/ (its file of 2018-05-13), licensed Creative Commons Attribution "
    "2.0 (CC-BY 2.0 FR, https://creativecommons.org/licenses/by/2.0/); attribution: www.manythings.org/anki and "
    "tatoeba.org. The card's `datasets` entry, Helsinki-NLP/tatoeba, is the Hub's copy of the same project's "
    "sentences (OPUS, a later snapshot)."
)


@dataclass(frozen=True)
class Corpus:
    """A training corpus as the card names it: Hub dataset id, description, the kind of text it holds (what
    the model knows), and its credit."""

    hub_id: str | None
    description: str
    kind: str
    credit: str


TATOEBA_CORPUS = Corpus(
    "Helsinki-NLP/tatoeba",
    TATOEBA,
    "short everyday sentences (Tatoeba's: a median of 6 English words, 89% under 10)",
    TATOEBA_CREDIT,
)
WMT14 = Corpus(
    "wmt/wmt14",
    "WMT 2014 English-German",
    "news, parliament proceedings and web text (WMT 2014)",
    WMT14_CREDIT,
)
RECIPE_CORPORA = {
    "multi30k": Corpus(
        "bentrevett/multi30k",
        "Multi30k Task 1 (Elliott et al., 2016)",
        "one-sentence image descriptions (Flickr30K captions)",
        MULTI30K_CREDIT,
    ),
    "wmt14-base": WMT14,
    "wmt14-big": WMT14,
}


def training_corpus(options: dict[str, Any]) -> Corpus:
    """The corpus a vaswani-train run's options name: the embedded Tatoeba corpus, a recipe's, or the user's
    files; `NOT_RECORDED` without options."""
    if not options:
        return Corpus(None, NOT_RECORDED, "its training data", "Not recorded.")
    if options.get("train_source") is None:
        return TATOEBA_CORPUS
    files = f"{options['train_source']} / {options.get('train_target')}"
    own = Corpus(
        None, files, f"the text of {files}", f"Training data: {files}; see its own licence and citation."
    )
    return RECIPE_CORPORA.get(options.get("recipe") or "", own)


@dataclass
class Origin:
    """The original a converted model was made from: what it was (`source`, in `format`), its Hub id where it
    came from the Hub, its language pair, licence (None: not stated where it came from) and BibTeX citations."""

    source: str
    format: str
    base_model: str | None
    license: str | None
    citations: list[str]
    languages: list[str] = field(default_factory=list)


def original_card(name: str) -> str | None:
    """The README.md (model card) of an FSMT folder or Hub id, None where it has none or cannot be had (offline
    and not in the cache)."""
    if is_local_path(name):
        path = Path(name) / "README.md"
        return path.read_text(encoding="utf-8") if path.is_file() else None
    try:
        return Path(hf_hub_download(name, "README.md")).read_text(encoding="utf-8")
    except (OSError, EntryNotFoundError):
        return None


def card_license(card: str) -> str | None:
    """The licence a model card's metadata states, as a Hub licence id ("Apache 2.0" → "apache-2.0")."""
    license_ = ModelCard(card).data.license
    return re.sub(r"\s+", "-", str(license_).strip().lower()) if license_ else None


def card_citations(card: str) -> list[str]:
    """The BibTeX entries of a model card: its fenced blocks that hold one."""
    blocks = re.findall(r"```[a-zA-Z]*\n(.*?)```", card, flags=re.DOTALL)
    return [block.strip() for block in blocks if block.lstrip().startswith("@")]


def fsmt_origin(name: str) -> Origin:
    """An FSMT model's origin, its licence and citations read from its card where it has one."""
    card = original_card(name)
    return Origin(
        source=name,
        format="FSMT",
        base_model=None if is_local_path(name) else name,
        license=card_license(card) if card else None,
        citations=card_citations(card) if card else [],
    )


def fairseq_origin(checkpoint_dir: Path) -> Origin:
    """A released fairseq checkpoint's origin: fairseq's licence, which covers its pre-trained models, and the
    citation fairseq asks for."""
    return Origin(str(checkpoint_dir), "fairseq", None, FAIRSEQ_LICENSE, [FAIRSEQ_BIBTEX])


def write_origin(folder: Path, origin: Origin) -> None:
    """Record `origin` in a converted model's folder (`ORIGIN_FILE`)."""
    (folder / ORIGIN_FILE).write_text(json.dumps(asdict(origin), indent=2) + "\n", encoding="utf-8")


def read_origin(folder: Path) -> Origin | None:
    """The origin `vaswani-convert` recorded in a converted folder, None in any other."""
    path = folder / ORIGIN_FILE
    return Origin(**json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None
