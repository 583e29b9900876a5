"""`translate(..., split_sentences=...)`: a paragraph is translated sentence by sentence with the
splitter of `vaswani-serve` and `vaswani-translate --split_sentences`, and joined back with its own spacing."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from tests.conftest import SMALL_MODEL, save_small_model
from vaswani_transformer import translate
from vaswani_transformer.decoding.sentences import split_sentences

SENTENCES = ["No.", "Who are you?", "Tom is reading a book in the garden."]  # distinct translations here
# greedy, and an output limit that does not depend on the other sources of a batch (§6.1's is the longest + 50)
DECODING = {"num_beams": 1, "max_new_tokens": 8, "dtype": torch.float32}


@pytest.fixture(scope="module")
def recorded_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = save_small_model(
        tmp_path_factory.mktemp("sample") / "model"
    )  # distinct translations per sentence
    (folder / "train_options.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de"}))
    return folder


@pytest.fixture(scope="module")
def loaded(recorded_folder: Path):
    return AutoModelForSeq2SeqLM.from_pretrained(recorded_folder), AutoTokenizer.from_pretrained(
        recorded_folder
    )


def test_a_paragraph_is_its_sentences_translated_one_by_one_and_joined_with_its_spacing(loaded) -> None:
    """Before, `split_sentences` reached generate() as an unknown keyword and failed."""
    paragraph = f"{SENTENCES[0]}  {SENTENCES[1]}\n{SENTENCES[2]} "
    one, two, three = (translate(sentence, *loaded, **DECODING) for sentence in SENTENCES)
    assert len({one, two, three}) == 3 and all((one, two, three))
    expected = f"{one}  {two}\n{three} "
    assert translate(paragraph, *loaded, split_sentences=True, **DECODING) == expected
    texts = [paragraph, "", SENTENCES[0]]
    assert translate(texts, *loaded, split_sentences="en", **DECODING) == [expected, "", one]
    assert translate(paragraph, *loaded, **DECODING) != expected  # unsplit: one run-on sentence


def test_the_splitter_is_the_server_s_and_its_pieces_give_the_text_back() -> None:
    paragraph = "Hello Mr. Smith.  How are you?\nI am fine."
    sentences = split_sentences(paragraph, "en")
    assert [sentence.text for sentence in sentences] == ["Hello Mr. Smith.", "How are you?", "I am fine."]
    assert "".join(f"{s.before}{s.text}{s.after}" for s in sentences) == paragraph


def test_a_model_that_records_no_language_asks_for_one(loaded) -> None:
    model = AutoModelForSeq2SeqLM.from_pretrained(SMALL_MODEL)  # no train_options.json, no langs
    with pytest.raises(
        ValueError, match=r"does not record its source language: name it, split_sentences='en'"
    ):
        translate(SENTENCES[0], model, loaded[1], split_sentences=True, **DECODING)
    assert translate(SENTENCES[0], model, loaded[1], split_sentences="en", **DECODING) == translate(
        SENTENCES[0], model, loaded[1], **DECODING
    )


def test_the_folders_pipeline_splits_as_translate_does(recorded_folder: Path, loaded, tmp_path: Path) -> None:
    """The pipeline and handler.py, which a published folder serves with, had no splitting: paragraphs came out
    run-on."""
    from transformers import pipeline

    folder = tmp_path / "model"
    shutil.copytree(recorded_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "langs": ["en", "de"]}))  # as the job writes it
    translator = pipeline("vaswani-translation", model=str(folder), device="cpu")
    paragraph = f"{SENTENCES[0]}  {SENTENCES[1]}\n{SENTENCES[2]} "
    options = {
        **{key: value for key, value in DECODING.items() if key != "dtype"},
        "decoding_dtype": torch.float32,
    }
    expected = translate([paragraph, SENTENCES[0]], *loaded, split_sentences=True, **DECODING)
    split = translator([paragraph, SENTENCES[0]], split_sentences=True, **options)
    assert [result["translation_text"] for result in split] == expected
    assert translator(paragraph, split_sentences="en", **options) == [{"translation_text": expected[0]}]
    with pytest.raises(ValueError, match="one translation text per input"):
        translator(paragraph, split_sentences=True, num_return_sequences=2, num_beams=2)
