"""Share a trained model: its model card, the folder that goes to the Hub, and the push.

`write_hub_folder` writes exactly what `push_to_hub` uploads (weights, configs, tokenizer, the model's code and
the translation pipeline as remote code, scores, training curve, options and the card), so a `--local_dir`
folder and a pushed repo load alike, with or without this package installed.
"""

import json
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData

from .card_text import (
    code_files_table,
    decoding_limitation,
    folder_requirements,
    install_command,
    language_name,
    limitations,
    original_link,
    package_version,
    requirements,
)
from .claims import claimed_output
from .data.tokenization import lowercases
from .decoding.sentences import recorded_languages
from .decoding.translate import translate
from .engines.torch_engine import decoding_settings
from .evaluation.loading import FSMT_TOKENIZER_FILES, load_for_decoding, tokenizer_files
from .files.reading import read_json
from .files.writing import folder_written_whole
from .modeling.saving_vaswani_transformer import FOLDER_CODE, declare_pipeline
from .provenance import ORIGIN_FILE, VASWANI_BIBTEX, Corpus, Origin, read_origin, training_corpus
from .trust import check_remote_code

REQUIRED_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer_config.json",  # with the tokenizer's own files (`loading.tokenizer_files`)
)
OPTIONAL_FILES = (
    "special_tokens_map.json",
    "scores.json",
    "dev_scores.json",
    "train_options.json",
    "training_run.json",
    "training_curve.png",
    ORIGIN_FILE,
)
CARD_FILE = "README.md"
REQUIREMENTS_FILE = "requirements.txt"  # what Inference Endpoints installs for the folder's handler.py


@dataclass(frozen=True)
class CardFacts:
    """What `vaswani-push` is told of a folder that does not record it (a `Seq2SeqTrainer` fine-tune, any
    `save_pretrained` folder): its language pair, its training dataset on the Hub, its licence, and the scores
    file of its evaluation (`vaswani-evaluate`'s scores.json). Each given one fills the card; the pair is also
    written into the published config.json (`langs`), so the published folder serves and splits sentences by it."""

    source_lang: str | None = None
    target_lang: str | None = None
    dataset: str | None = None
    license: str | None = None
    scores: Path | None = None

    @property
    def languages(self) -> tuple[str, str] | None:
        return (self.source_lang, self.target_lang) if self.source_lang and self.target_lang else None


SCORE_KEYS = ("sacrebleu", "tokenized_bleu", "num_sentences")


def read_scores(path: Path) -> dict[str, Any]:
    """An evaluation's scores file (vaswani-evaluate's scores.json), checked to hold what the card reports."""
    scores = read_json(path, "give a scores.json that vaswani-evaluate wrote")
    if not isinstance(scores, dict) or not all(key in scores for key in SCORE_KEYS):
        raise ValueError(
            f"{path} is not an evaluation's scores (it needs {', '.join(SCORE_KEYS)}): give a scores.json that "
            "vaswani-evaluate wrote."
        )
    return scores


@dataclass
class TrainedModel:
    """What a run folder says about its model: config, decoding, options, scores, how it was trained, and
    the model's translation of the first example sentence."""

    folder: Path
    config: Any
    decoding: dict[str, Any]
    options: dict[str, Any]
    scores: dict[str, Any] | None
    run: dict[str, Any]
    num_parameters: int
    example: tuple[str, str]
    lowercase: bool  # the tokenizer lowercases its input
    origin: Origin | None  # the original of a converted model
    languages: tuple[str, str] | None  # (source, target): as pushed, trained or converted


def model_files(folder: Path) -> list[str]:
    """What a saved model folder must hold: weights, configs, tokenizer, and the model's code (`FOLDER_CODE`)."""
    return [*REQUIRED_FILES, *tokenizer_files(folder), *FOLDER_CODE]


def _links_outside(folder: Path, name: str) -> bool:
    """Whether folder/name is a symbolic link that leads out of the folder (a push would publish its target)."""
    path = folder / name
    return path.is_symlink() and not path.resolve().is_relative_to(folder.resolve())


def check_model_folder(model_dir: str | Path) -> Path:
    """The folder, if it holds a complete saved model of its own files; otherwise a FileNotFoundError naming what
    is missing, or a ValueError naming the files that link out of it or that ask to run code of the folder
    (`trust.check_remote_code`: a published folder holds only this package's code, so no flag allows it)."""
    folder = Path(model_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder (give the final model folder of a training run).")
    check_remote_code(folder, allowed_by=None)
    missing = [name for name in model_files(folder) if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} is not a complete saved model: {', '.join(missing)} missing. Push the `final` folder "
            "written by vaswani-train, or save the package's model with model.save_pretrained() and "
            "tokenizer.save_pretrained()."
        )
    _check_auto_map(folder)
    if linked := [name for name in [*model_files(folder), *OPTIONAL_FILES] if _links_outside(folder, name)]:
        raise ValueError(
            f"{folder}: {', '.join(linked)} link to files outside the folder; the Hub folder takes only the model "
            "folder's own files. Copy them in (cp -L) if they are meant to be published."
        )
    return folder


def _check_auto_map(folder: Path) -> None:
    """Every class config.json's `auto_map` names is in a file the folder holds: without this package, the
    published folder loads (trust_remote_code=True) from those files alone."""
    config = read_json(folder / "config.json", "save the model again (save_pretrained)")
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    for auto_class, references in (auto_map or {}).items():
        for reference in references if isinstance(references, list) else [references]:
            module = str(reference).split("--")[-1].split(".")[0]  # "repo--module.Class" names another repo's
            if reference is None or (folder / f"{module}.py").is_file():
                continue
            raise ValueError(
                f"{folder / 'config.json'}: its auto_map names {auto_class}: {reference}, but the folder holds "
                f"no {module}.py, so the published folder would not load with trust_remote_code=True. Save the "
                "model again (save_pretrained writes the model's code and the auto_map naming it)."
            )


def _json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def read_trained_model(model_dir: str | Path, facts: CardFacts = CardFacts()) -> TrainedModel:
    """Everything the model card reports, read from a saved model folder, with what `facts` add to it."""
    folder = check_model_folder(model_dir)
    model, tokenizer = load_for_decoding(folder, device="cpu")
    options = _json(folder / "train_options.json") or {}
    origin = read_origin(folder)
    languages = _recorded_pair(folder, facts, origin)
    source = (options.get("examples") or ["A man is reading a book."])[0]
    (translation,) = translate([source], model, tokenizer)
    return TrainedModel(
        folder=folder,
        config=model.config,
        decoding=decoding_settings(model),
        options=options,
        scores=read_scores(facts.scores) if facts.scores is not None else _json(folder / "scores.json"),
        run=_json(folder / "training_run.json") or {},
        num_parameters=model.num_parameters(),
        example=(source, translation),
        lowercase=lowercases(tokenizer),
        origin=origin,
        languages=languages,
    )


def _recorded_pair(folder: Path, facts: CardFacts, origin: Origin | None) -> tuple[str, str] | None:
    """The language pair the card states: the one the push is told, else the folder's (`recorded_languages`: its
    training options or its config's `langs`; else its original's); a ValueError where the push is told another
    pair than the folder records."""
    recorded = recorded_languages(folder) or (
        tuple(origin.languages) if origin and origin.languages else None
    )
    if facts.languages and recorded and tuple(recorded) != facts.languages:
        raise ValueError(
            f"--source_lang {facts.source_lang} --target_lang {facts.target_lang}, but {folder} records the pair "
            f"{recorded[0]}→{recorded[1]}: leave the flags out, or push the folder of the model they describe."
        )
    return facts.languages or (tuple(recorded) if recorded else None)


def _eval_results(trained: TrainedModel, dataset_id: str | None, dataset_name: str) -> list[EvalResult]:
    """The measured BLEU scores as model-index entries (sacreBLEU with its signature, and tokenised BLEU)."""
    if trained.scores is None:
        return []
    scores = trained.scores
    common = {
        "task_type": "translation",
        "task_name": "Translation",
        "dataset_type": dataset_id or "custom",
        "dataset_name": f"{dataset_name}, test: {_test_set_name(trained)}",
        "dataset_split": "test",
        "metric_type": "bleu",
    }
    return [
        EvalResult(
            **common,
            metric_value=round(scores["sacrebleu"]["score"], 2),
            metric_name="sacreBLEU",
            metric_config=scores["sacrebleu"]["signature"],
        ),
        EvalResult(
            **common,
            metric_value=round(scores["tokenized_bleu"]["score"], 2),
            metric_name="tokenised BLEU (Moses)",
            metric_config="tokenised BLEU on Moses-tokenised text, as papers report",
        ),
    ]


def _evaluation_text(trained: TrainedModel) -> str:
    if trained.scores is None:
        return "Not evaluated: the folder has no scores.json (vaswani-evaluate writes one)."
    scores = trained.scores
    return (
        "| test set | sentences | sacreBLEU | tokenised BLEU |\n| --- | --- | --- | --- |\n"
        f"| {_test_set_name(trained)} | "
        f"{scores['num_sentences']:,} | {scores['sacrebleu']['score']:.2f} | "
        f"{scores['tokenized_bleu']['score']:.2f} |\n\n"
        f"sacreBLEU signature: `{scores['sacrebleu']['signature']}`. Decoding: "
        f"{_decoding_text(scores.get('decoding', trained.decoding))}{_length_penalty_choice_text(scores)}."
    )


def _length_penalty_choice_text(scores: dict[str, Any]) -> str:
    """How α was chosen, where the run chose it on dev (`--length_penalty_choices`)."""
    tried = scores.get("length_penalty_on_dev")
    if not tried:
        return ""
    each = ", ".join(f"{bleu:.2f} at α = {alpha}" for alpha, bleu in tried.items())
    return f"; α chosen after training by dev sacreBLEU, as §6.1 chose it on the development set ({each})"


def _decoding_text(settings: dict[str, Any]) -> str:
    beams = settings.get("num_beams", 1)
    text = f"beam {beams}" if beams > 1 else "greedy"
    if beams > 1:
        form = "((5 + |Y|) / 6)^α" if settings.get("length_penalty_type") == "gnmt" else "|Y|^α"
        text += f", length penalty α = {settings.get('length_penalty')} in the form {form}"
    limit = settings.get("max_new_tokens", settings.get("max_length"))
    text += f", output limit: {limit} tokens" if limit is not None else ""
    return text + (
        f", computed in {settings['dtype']}" if settings.get("dtype", "float32") != "float32" else ""
    )


def _positions_text(config: Any) -> str:
    """The card's words for the model's positions, and the attention biases of a converted fairseq model."""
    if config.sinusoid_layout == "halves":
        text = f"fairseq's sinusoidal positions (sines before cosines, counted from {config.position_offset})"
    else:
        text = "interleaved sinusoidal positions"
    return text + (", biases on the attention projections" if config.attention_bias else "")


def _decoding_origin(config: Any) -> str:
    """Whose decoding the generation config holds: the paper's (GNMT length penalty), or a converted model's own."""
    return (
        "with the paper's beam search (§6.1)"
        if config.length_penalty_type == "gnmt"
        else "as its original does"
    )


def _tokenizer_class(folder: Path) -> str:
    """The transformers class that loads the folder's tokenizer without the model's code."""
    return "FSMTTokenizer" if tokenizer_files(folder) == FSMT_TOKENIZER_FILES else "PreTrainedTokenizerFast"


def _final_model_text(options: dict[str, Any], run: dict[str, Any]) -> str:
    """What the final weights are, as the run recorded making them (training_run.json's `final_weights`: an
    average of fewer checkpoints than --average_last asked, where the run saved fewer); without that record,
    what the options asked for."""
    made = run.get("final_weights") or {"made_by": options["final_model"]}
    checkpoints = made.get("checkpoints", [])
    if made["made_by"] == "average":
        count = len(checkpoints) or options["average_last"]
        names = f": {', '.join(checkpoints)}" if checkpoints else ""
        return f"the average of the last {count} checkpoints (§6.1{names})"
    if made["made_by"] == "best":
        return "the checkpoint with the best dev BLEU" + (f" ({checkpoints[0]})" if checkpoints else "")
    return "the weights after the last step" + (f" (step {made['step']:,})" if "step" in made else "")


def _test_set_name(trained: TrainedModel) -> str:
    test_source = trained.options.get("test_source")
    if test_source:
        return Path(test_source).name
    return f"{trained.scores['num_sentences']:,} held-out pairs" if trained.scores else "held-out pairs"


def _training_text(trained: TrainedModel, description: str) -> str:
    """The Training section: data, recipe and schedule, hardware and time."""
    options, run = trained.options, trained.run
    if trained.origin is not None:
        return (
            f"Converted by `vaswani-convert {trained.origin.format.lower()}` from {original_link(trained.origin)}, "
            "its weights unchanged: trained by the original's authors, as its card and paper describe."
        )
    if not options:
        return "Not recorded: the folder has no train_options.json (vaswani-train writes one)."
    lines = [
        f"- Data: {description}",
        f"- Recipe `{options.get('recipe') or 'custom'}`: {_length_text(options)} of batches of about "
        f"{options['max_tokens']:,} source + {options['max_tokens']:,} target tokens per process, warm-up "
        f"{options['warmup_steps']:,} steps, learning rate {options['lr_scale']:g} × eq. (3) of the paper, "
        f"label smoothing 0.1; final model: {_final_model_text(options, trained.run)}.",
    ]
    if run:
        lines.append(
            f"- Hardware and time: {run['hardware']}, {_precision_text(run)}, {run['steps']:,} steps in "
            f"{run['train_seconds'] / 60:.1f} min (torch {run['versions']['torch']}, "
            f"transformers {run['versions']['transformers']})."
        )
    return "\n".join(lines)


def _length_text(options: dict[str, Any]) -> str:
    """How long the recipe trains: a step count, or a time budget with the step count as its cap."""
    if options.get("max_train_minutes") is None:
        return f"{options['max_steps']:,} updates"
    return f"{options['max_train_minutes']:g} minutes of training (at most {options['max_steps']:,} updates)"


def _training_summary(options: dict[str, Any], origin: Origin | None) -> str:
    """The introduction's claim about training: the paper's loss and optimiser only where the folder records a
    vaswani-train run (a model fine-tuned elsewhere, say with the stock Trainer, may have used anything)."""
    if origin is not None:
        return f"Converted from {original_link(origin)} ({origin.format}), its weights unchanged."
    if not options:
        return "How it was trained is not recorded in its folder (no train_options.json)."
    return (
        "Trained by `vaswani-train` with label smoothing 0.1 and Adam(0.9, 0.98, 1e-9) on the warm-up / "
        "inverse-square-root schedule."
    )


def _recorded_base_model(folder: Path) -> str | list[str] | None:
    """The `base_model` a card already in the folder names (the Trainer's card of a fine-tune does), else None."""
    card_file = folder / CARD_FILE
    return ModelCard.load(card_file).data.base_model if card_file.is_file() else None


def _precision_text(run: dict[str, Any]) -> str:
    """The training precision, with who chose it when the run recorded that."""
    chosen_by = run.get("mixed_precision_chosen_by")
    return f"{run['mixed_precision']} ({chosen_by})" if chosen_by else run["mixed_precision"]


def _languages(trained: TrainedModel) -> list[str] | None:
    """The model's (source, target) languages, as the push is told or its folder records them."""
    return list(trained.languages) if trained.languages else None


def _card_data(trained: TrainedModel, corpus: Corpus, repo_id: str, license_id: str | None) -> ModelCardData:
    """The card's metadata. The `license_id` a push is told wins; otherwise a converted model keeps its original's
    licence (none where the original's card states none) and names it as `base_model`, and a model trained here
    is under the package's apache-2.0."""
    origin = trained.origin
    return ModelCardData(
        language=_languages(trained),
        license=license_id or (origin.license if origin else "apache-2.0"),
        library_name="transformers",
        # no pipeline_tag: "translation" would point the Hub's widget at a pipeline transformers 5 no longer has
        tags=["translation", "vaswani_transformer", "custom_code"],
        base_model=origin.base_model if origin else _recorded_base_model(trained.folder),
        datasets=[corpus.hub_id] if corpus.hub_id else None,
        metrics=["bleu"],
        model_name=repo_id.rpartition("/")[2],
        eval_results=_eval_results(trained, corpus.hub_id, corpus.description) or None,
    )


def build_model_card(model_dir: str | Path, repo_id: str, facts: CardFacts = CardFacts()) -> ModelCard:
    """The model card of a trained or converted folder, with what `facts` tell of it: metadata (languages,
    licence, datasets, base model, model-index) and text."""
    trained = read_trained_model(model_dir, facts)
    options, config = trained.options, trained.config
    corpus = pushed_corpus(facts.dataset) if facts.dataset else training_corpus(options)
    languages = _languages(trained)
    template = resources.files("vaswani_transformer").joinpath("model_card.md").read_text(encoding="utf-8")
    return ModelCard.from_template(
        _card_data(trained, corpus, repo_id, facts.license),
        template_str=template,
        repo_id=repo_id,
        language_pair=(
            f"{'→'.join(map(language_name, languages))} translation" if languages else "translation"
        ),
        example_source_literal=json.dumps(trained.example[0], ensure_ascii=False),
        example_translation_literal=json.dumps(trained.example[1], ensure_ascii=False),
        decoding=_decoding_text(trained.decoding),
        decoding_origin=_decoding_origin(config),
        positions=_positions_text(config),
        tokenizer_class=_tokenizer_class(trained.folder),
        requirements=requirements(_tokenizer_class(trained.folder)),
        install=install_command(),
        package_version=package_version(),
        code_files=code_files_table(trained.folder, FOLDER_CODE),
        serve_install=install_command("serve"),
        preset=options.get("preset", "custom"),
        d_model=config.d_model,
        d_ff=config.d_ff,
        num_heads=config.num_heads,
        num_encoder_layers=config.num_encoder_layers,
        num_decoder_layers=config.num_decoder_layers,
        dropout=config.dropout,
        num_parameters=f"{trained.num_parameters:,}",
        vocab_size=f"{config.vocab_size:,}",
        lowercase_note=", lowercased input" if trained.lowercase else "",
        init_scheme=config.init_scheme,
        training=_training_text(trained, corpus.description),
        training_summary=_training_summary(options, trained.origin),
        evaluation=_evaluation_text(trained),
        limitations=limitations(
            corpus,
            trained.origin,
            languages,
            options,
            trained.lowercase,
            decoding_limitation(trained.decoding, config.length_penalty_type),
        ),
        data_credit=f"See {original_link(trained.origin)}." if trained.origin else corpus.credit,
        citations="\n\n".join([VASWANI_BIBTEX, *(trained.origin.citations if trained.origin else [])]),
    )


def pushed_corpus(dataset: str) -> Corpus:
    """The training data a push names: a Hub dataset id."""
    return Corpus(
        dataset,
        f"the Hub dataset [{dataset}](https://huggingface.co/datasets/{dataset})",
        f"the text of {dataset}",
        f"Training data: [{dataset}](https://huggingface.co/datasets/{dataset}); see its card for its licence and "
        "citation.",
    )


def write_hub_folder(
    model_dir: str | Path,
    local_dir: str | Path,
    repo_id: str,
    choose: str = "--local_dir",
    facts: CardFacts = CardFacts(),
) -> list[Path]:
    """Write into `local_dir` (new or empty) exactly the files `push_to_hub` uploads; returns them.

    `local_dir` is claimed first (`claims.claimed_output`: a second writer stops, naming this one), and the files
    go to a temporary folder beside it, renamed to `local_dir` once complete (`files.writing.folder_written_whole`): a
    failure leaves no partial folder, and a full disk or read-only folder is a WriteError naming `local_dir`, the
    free space there and `choose`."""
    destination = Path(local_dir)
    with claimed_output(destination, choose):
        _write_hub_files(check_model_folder(model_dir), destination, repo_id, choose, facts)
    return sorted(destination.iterdir())


def _write_hub_files(
    source: Path, destination: Path, repo_id: str, choose: str, facts: CardFacts = CardFacts()
) -> None:
    if destination.exists() and any(destination.iterdir()):
        raise FileExistsError(f"{destination} is not empty: give a new or empty folder for the Hub files.")
    # before any file is written: fails on an unreadable folder
    card = build_model_card(source, repo_id, facts)
    with folder_written_whole(destination, choose) as staging:
        _fill_hub_folder(source, staging, card, facts)


def _fill_hub_folder(source: Path, folder: Path, card: ModelCard, facts: CardFacts) -> None:
    """The model's files, the pipeline's code, the config naming it (and the pair the push is told), the scores
    the push is told, and the card."""
    # copyfile, not copy2: new files with the user's usual permissions (safetensors writes weights 0600)
    for name in [*model_files(source), *OPTIONAL_FILES]:
        if (source / name).is_file():
            shutil.copyfile(source / name, folder / name)
    if facts.scores is not None:
        shutil.copyfile(facts.scores, folder / "scores.json")
    declare_pipeline(folder / "config.json")  # the pipeline the folder holds, copied above
    if facts.languages:
        record_languages(folder / "config.json", facts.languages)
    (folder / REQUIREMENTS_FILE).write_text(folder_requirements(_tokenizer_class(source)), encoding="utf-8")
    card.save(folder / CARD_FILE)


def record_languages(config_file: Path, languages: tuple[str, str]) -> None:
    """The pair in config.json's `langs` (as converted models record it: `decoding.sentences.recorded_languages`
    reads it), for a folder that records it nowhere else."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config_file.write_text(
        json.dumps({**config, "langs": list(languages)}, indent=2) + "\n", encoding="utf-8"
    )


def push_to_hub(
    model_dir: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
    facts: CardFacts = CardFacts(),
) -> str:
    """Create (or reuse) the Hub repo and upload the model folder in one commit; returns the commit's URL.

    The token comes from `token`, else from the usual places (HF_TOKEN, `hf auth login`).
    """
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="vaswani-hub-") as staging:
        _write_hub_files(check_model_folder(model_dir), Path(staging), repo_id, "TMPDIR", facts)
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=staging,
            revision=revision,
            commit_message=commit_message or f"Upload {Path(model_dir).name} (vaswani_transformer)",
        )
    return commit.commit_url
