"""What users hand translate() and the `vaswani-translation` pipeline first: every kind of
input gives one result per sentence, blank sentences give empty translations, bad arguments are named."""

import types

import pytest
import torch
from transformers import pipeline
from transformers.pipelines.pt_utils import KeyDataset

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.decoding.translate import translate

SENTENCES = ["a b c", "d e", "f g h i", "j", "k l"]


@pytest.fixture(scope="module")
def model() -> VaswaniTransformerForConditionalGeneration:
    """Random weights never end a translation: an output limit of source + 8 (not the paper's + 50) keeps each
    decoding short; what these tests check (one result per sentence, its shape) does not depend on it."""
    torch.manual_seed(0)
    return VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=30, max_length_offset=8)).eval()


@pytest.fixture(scope="module")
def translator(model, letter_tokenizer):
    return pipeline("vaswani-translation", model=model, tokenizer=letter_tokenizer)


def texts(results: list) -> list:
    """The translations' texts, in the results' shape (a list of them per sentence with several each)."""
    return [texts(result) if isinstance(result, list) else result["translation_text"] for result in results]


@pytest.mark.parametrize("batch_size", [1, 2])
def test_generators_and_datasets_give_one_result_per_sentence_as_lists_do(translator, batch_size) -> None:
    expected = texts(translator(SENTENCES, batch_size=batch_size))
    assert len(expected) == len(SENTENCES) and all(expected)
    streamed = translator((s for s in SENTENCES), batch_size=batch_size)
    assert isinstance(streamed, types.GeneratorType) or hasattr(
        streamed, "__next__"
    )  # streams, as transformers'
    assert texts(list(streamed)) == expected
    dataset = KeyDataset([{"en": sentence} for sentence in SENTENCES], "en")
    assert texts(list(translator(dataset, batch_size=batch_size))) == expected
    assert texts(translator(tuple(SENTENCES), batch_size=batch_size)) == expected


def test_several_translations_per_sentence_come_as_a_list_for_every_kind_of_input(translator) -> None:
    settings = {"num_beams": 3, "num_return_sequences": 2, "batch_size": 2}
    expected = texts(translator(SENTENCES, **settings))
    assert [len(per_sentence) for per_sentence in expected] == [2] * len(SENTENCES)
    assert texts(list(translator((s for s in SENTENCES), **settings))) == expected
    assert texts(translator(SENTENCES[0], **settings)) == expected[0]


def test_nothing_to_translate_gives_an_empty_list(translator) -> None:
    assert translator([]) == []
    assert list(translator(s for s in [])) == []
    assert list(translator(KeyDataset([], "en"))) == []


def test_blank_sentences_give_empty_translations(translator, model, letter_tokenizer) -> None:
    with_blanks = ["", SENTENCES[0], "   ", SENTENCES[1], "\t"]
    words = translate(SENTENCES[:2], model, letter_tokenizer)
    assert all(words)
    assert translate(with_blanks, model, letter_tokenizer) == ["", words[0], "", words[1], ""]
    assert translate(["", " "], model, letter_tokenizer) == ["", ""]
    assert translate("", model, letter_tokenizer) == ""
    assert translator("") == [{"translation_text": ""}]
    for batch_size in (1, 5):
        words = texts(translator(SENTENCES[:2], batch_size=min(batch_size, 2)))
        assert texts(translator(with_blanks, batch_size=batch_size)) == ["", words[0], "", words[1], ""]
    assert texts(translator(["", "  "], batch_size=2)) == ["", ""]
    assert texts(translator([""], num_return_sequences=2, num_beams=2)) == [["", ""]]


def test_translate_takes_one_string_and_gives_one_string(model, letter_tokenizer) -> None:
    one = translate(SENTENCES[0], model, letter_tokenizer, num_beams=1)
    assert isinstance(one, str) and one
    assert [one] == translate(SENTENCES[:1], model, letter_tokenizer, num_beams=1)


@pytest.mark.parametrize(
    "argument",
    [
        {"num_beams": 0},
        {"num_beams": -2},
        {"num_return_sequences": 0},
        {"max_new_tokens": -1},
        {"max_length": -5},
        {"min_new_tokens": -1},
        {"num_beams": 2.5},
    ],
)
def test_bad_decoding_arguments_are_named_before_any_decoding(
    translator, model, letter_tokenizer, argument
) -> None:
    name = next(iter(argument))
    calls = []
    original = model.generate
    model.generate = lambda *args, **kwargs: calls.append(kwargs) or original(*args, **kwargs)
    try:
        with pytest.raises(ValueError, match=f"^{name} must be"):
            translate(SENTENCES, model, letter_tokenizer, **argument)
        with pytest.raises(ValueError, match=f"^{name} must be"):
            translator(SENTENCES, **argument)
    finally:
        del model.generate
    assert calls == []


def test_translate_gives_each_sentence_s_n_best_as_generate_does(model, letter_tokenizer) -> None:
    """It refused several translations a sentence; the server's LibreTranslate alternatives ask for them."""
    found = translate(
        SENTENCES, model, letter_tokenizer, num_beams=3, num_return_sequences=2, dtype=torch.float32
    )
    assert len(found) == len(SENTENCES)
    for sentence, best in zip(SENTENCES, found, strict=True):
        outputs = model.generate(
            **letter_tokenizer([sentence], return_tensors="pt"), num_beams=3, num_return_sequences=2
        )
        assert best == [
            text.strip() for text in letter_tokenizer.batch_decode(outputs, skip_special_tokens=True)
        ]
    with pytest.raises(ValueError, match="num_return_sequences"):
        translate(SENTENCES, model, letter_tokenizer, num_return_sequences=2, split_sentences="en")


# What users of transformers 4's translation pipeline bring to this one


def test_any_iterable_of_strings_is_taken_a_datasets_column_included(translator) -> None:
    from datasets import Dataset

    expected = translator(SENTENCES, batch_size=2)
    column = Dataset.from_dict({"en": SENTENCES})["en"]  # a datasets Column: a TypeError before
    assert translator(column, batch_size=2) == expected
    streamed = translator(map(str, SENTENCES), batch_size=2)  # an iterator is translated as it is read
    assert not isinstance(streamed, list) and list(streamed) == expected


def test_return_tensors_gives_the_token_ids_of_the_translation(translator, letter_tokenizer) -> None:
    texts_only = translator(SENTENCES[:2], num_beams=1)
    ids_only = translator(SENTENCES[:2], num_beams=1, return_tensors=True)
    assert all(set(result) == {"translation_token_ids"} for result in ids_only)
    decoded = [
        letter_tokenizer.decode(r["translation_token_ids"], skip_special_tokens=True) for r in ids_only
    ]
    assert decoded == texts(texts_only)
    both = translator(SENTENCES[:2], num_beams=1, return_tensors=True, return_text=True)
    assert texts(both) == texts(texts_only) and all("translation_token_ids" in result for result in both)
    assert translator(SENTENCES[:2], num_beams=1, return_text=True) == texts_only
    with pytest.raises(ValueError, match="leaves nothing to return"):
        translator(SENTENCES[:2], return_text=False)


def test_truncation_cuts_a_long_source_to_the_models_positions(model, letter_tokenizer) -> None:
    translator = pipeline("vaswani-translation", model=model, tokenizer=letter_tokenizer)
    limit = model.config.max_position_embeddings
    long = " ".join(["a", "b", "c"] * limit)  # 3 × the positions the model has
    cut = translate(
        long, model, letter_tokenizer, num_beams=1, max_new_tokens=5
    )  # translate() cuts it itself
    result = translator(long, truncation=True, num_beams=1, max_new_tokens=5)
    assert texts(result) == [cut]
    cut_source = " ".join(long.split()[: limit - 1])  # the end of sentence takes the last position
    assert texts(translator(cut_source, num_beams=1, max_new_tokens=5)) == [cut]


def test_src_lang_and_tgt_lang_are_checked_against_the_models_pair(model, letter_tokenizer, tmp_path) -> None:
    model.save_pretrained(tmp_path)
    letter_tokenizer.save_pretrained(tmp_path)
    (tmp_path / "train_options.json").write_text('{"source_lang": "en", "target_lang": "de"}')
    translator = pipeline("vaswani-translation", model=str(tmp_path))
    expected = translator(SENTENCES[:2], num_beams=1)
    assert translator(SENTENCES[:2], num_beams=1, src_lang="en", tgt_lang="de_DE") == expected
    with pytest.raises(ValueError, match=r"src_lang='fr', but this model translates en to de only"):
        translator(SENTENCES[:2], src_lang="fr")
    with pytest.raises(ValueError, match=r"tgt_lang='en', but this model translates en to de only"):
        translator(SENTENCES[:2], src_lang="en", tgt_lang="en")
