"""fairseq checkpoint folders → transformers FSMT folders: the same model, fairseq's token ids, and the
checkpoints this package's model cannot hold (or that could run code) refused before anything is written."""

import shutil
from pathlib import Path

import pytest
import torch
from sacremoses import MosesPunctNormalizer, MosesTokenizer
from transformers import AutoTokenizer, FSMTForConditionalGeneration, FSMTTokenizer

from tests.convert.fairseq_fixture import (
    LANGUAGES,
    SENTENCES,
    CopiesAFile,
    DictConfig,
    make_fairseq_checkpoint,
    pretend_modules,
    save_model_pt,
)
from vaswani_transformer.convert.fairseq import write_fsmt_folder
from vaswani_transformer.convert.safe_checkpoint import load_checkpoint

UNKNOWN, END = 3, 2  # fairseq's <unk> and </s>


def fairseq_ids(dictionary: Path) -> dict[str, int]:
    """The ids fairseq's Dictionary gives a dict file's symbols: <s>, <pad>, </s>, <unk>, then its lines."""
    symbols = ["<s>", "<pad>", "</s>", "<unk>"]
    symbols += [line.split(" ")[0] for line in dictionary.read_text(encoding="utf-8").splitlines()]
    return {symbol: index for index, symbol in enumerate(symbols)}


def fairseq_encoding(sentence: str, segmenter: FSMTTokenizer, ids: dict[str, int]) -> list[int]:
    """What fairseq's hub encodes `sentence` to: Moses tokens, subword-nmt pieces (`@@` on all but a word's last;
    FSMTTokenizer's BPE applies the codes), each piece's dictionary id or <unk>, and </s>."""
    pieces = []
    for word in MosesTokenizer(lang=LANGUAGES[0]).tokenize(
        sentence, aggressive_dash_splits=True, escape=True
    ):
        segments = segmenter.bpe(word).split(" ")
        pieces += [segment + "@@" for segment in segments[:-1]] + [segments[-1].removesuffix("</w>")]
    return [ids.get(piece, UNKNOWN) for piece in pieces] + [END]


@pytest.mark.parametrize("layout", ["args", "cfg", "cfg-namespace", "legacy"])
def test_a_fairseq_checkpoint_becomes_the_fsmt_model_it_was_made_from(tmp_path: Path, layout: str) -> None:
    made = make_fairseq_checkpoint(tmp_path, layout)
    out = tmp_path / "out"
    with pretend_modules():  # fairseq importable: reading its meters must still run none of its code
        write_fsmt_folder(made.folder, out)
    assert not made.marker.exists()

    converted = FSMTForConditionalGeneration.from_pretrained(out).eval()
    original_weights, converted_weights = made.model.state_dict(), converted.state_dict()
    assert converted_weights.keys() == original_weights.keys()
    for name, tensor in original_weights.items():
        assert torch.equal(converted_weights[name], tensor), name
    for field in (
        "d_model",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention_heads",
        "decoder_attention_heads",
    ):
        assert getattr(converted.config, field) == getattr(made.model.config, field)
    assert converted.config.langs == LANGUAGES and converted.config.tie_word_embeddings
    settings = {key: getattr(converted.config, key) for key in ("num_beams", "length_penalty", "max_length")}
    assert settings == {"num_beams": 5, "length_penalty": 1.0, "max_length": 200}

    inputs = made.tokenizer(SENTENCES, return_tensors="pt", padding=True)
    decoder_input_ids = inputs.input_ids[:, :6].roll(1, dims=1)
    with torch.no_grad():
        logits = [m(**inputs, decoder_input_ids=decoder_input_ids).logits for m in (made.model, converted)]
    assert torch.equal(logits[0], logits[1])
    for beams in (1, 4):
        outputs = [
            m.generate(**inputs, num_beams=beams, do_sample=False, max_new_tokens=10, early_stopping=True)
            for m in (made.model, converted)
        ]
        assert torch.equal(outputs[0], outputs[1])
        assert len(set(outputs[0][:, 1:].flatten().tolist())) > 2  # not one token repeated: the test can fail


def test_the_tokenizer_gives_fairseqs_ids(tmp_path: Path) -> None:
    made = make_fairseq_checkpoint(tmp_path)
    write_fsmt_folder(made.folder, tmp_path / "out")
    converted = FSMTTokenizer.from_pretrained(tmp_path / "out")
    auto = AutoTokenizer.from_pretrained(tmp_path / "out")
    ids = fairseq_ids(made.folder / "dict.en.txt")
    normalizer = MosesPunctNormalizer(lang=LANGUAGES[0])
    expected = []
    for sentence in SENTENCES:
        assert normalizer.normalize(sentence) == sentence  # the premise of comparing with fairseq's hub
        expected.append(fairseq_encoding(sentence, made.tokenizer, ids))
    assert converted(SENTENCES).input_ids == expected
    assert auto(SENTENCES).input_ids == expected
    assert made.tokenizer(SENTENCES).input_ids == expected
    flat = [token for sentence in expected for token in sentence]
    assert UNKNOWN in flat and len(set(flat)) > 20
    words = sum(len(MosesTokenizer(lang="en").tokenize(sentence)) for sentence in SENTENCES)
    assert len(flat) > words + len(SENTENCES)  # BPE split words into pieces


# --- refusals: ValueError naming what differs, before anything is written


def refused(folder: Path, out: Path, message: str) -> None:
    """write_fsmt_folder refuses `folder` with `message`, leaving nothing beside `out`."""
    before = sorted(out.parent.iterdir())
    with pytest.raises(ValueError, match=message):
        write_fsmt_folder(folder, out)
    assert not out.exists()
    assert sorted(out.parent.iterdir()) == before


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"encoder_normalize_before": True}, "encoder_normalize_before = True .pre-norm encoder layers"),
        ({"arch": "transformer_wmt_en_de_big_t2t"}, "architecture transformer_wmt_en_de_big_t2t is pre-norm"),
        ({"arch": "lightconv_wmt_en_de"}, "not one of fairseq's post-norm Transformer"),
        ({"encoder_layerdrop": 0.2}, "encoder_layerdrop = 0.2 .LayerDrop in the encoder"),
        ({"decoder_learned_pos": True}, "learned decoder positions"),
        ({"layernorm_embedding": True}, "a layer norm on the embeddings"),
        ({"activation_fn": "swish"}, "activation_fn = 'swish'"),
        ({"share_all_embeddings": False}, "share_all_embeddings is off"),
        ({"no_scale_embedding": True}, "not scaled"),
    ],
)
def test_an_architecture_this_model_cannot_hold_is_refused(
    tmp_path: Path, changes: dict, message: str
) -> None:
    made = make_fairseq_checkpoint(tmp_path, **changes)
    refused(made.folder, tmp_path / "out", message)
    refused(made.folder, tmp_path / "out", "cannot hold it")


@pytest.mark.parametrize(
    "changes",
    [
        {"bpe": "sentencepiece"},
        {"tokenizer": "space"},
        {"moses_no_escape": True},
        {"task": "translation_multi_simple_epoch"},
    ],
)
def test_a_text_pipeline_the_tokenizer_does_not_reproduce_is_refused(tmp_path: Path, changes: dict) -> None:
    made = make_fairseq_checkpoint(tmp_path, **changes)
    (name, value), *_ = changes.items()
    refused(
        made.folder, tmp_path / "out", f"trained on text made otherwise .{name} = {value!r}.*ids would differ"
    )


def test_separate_dictionaries_are_refused(tmp_path: Path) -> None:
    made = make_fairseq_checkpoint(tmp_path)
    target = made.folder / "dict.de.txt"
    lines = target.read_text(encoding="utf-8").splitlines()
    target.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n", encoding="utf-8")
    refused(made.folder, tmp_path / "out", "dict.en.txt and .*dict.de.txt differ: the model has separate")


def test_one_joined_dict_txt_converts(tmp_path: Path) -> None:
    made = make_fairseq_checkpoint(tmp_path)
    (made.folder / "dict.en.txt").rename(made.folder / "dict.txt")
    (made.folder / "dict.de.txt").unlink()
    write_fsmt_folder(made.folder, tmp_path / "out")
    assert (
        FSMTTokenizer.from_pretrained(tmp_path / "out")(SENTENCES).input_ids
        == made.tokenizer(SENTENCES).input_ids
    )


def test_missing_files_are_named_with_the_fix(tmp_path: Path) -> None:
    made = make_fairseq_checkpoint(tmp_path)
    (made.folder / "bpecodes").unlink()
    refused(
        made.folder,
        tmp_path / "out",
        "has no bpecodes or code .the BPE codes.: give the folder of an unpacked",
    )
    (made.folder / "model.pt").rename(made.folder / "model1.pt")
    refused(
        made.folder,
        tmp_path / "out",
        "holds an ensemble .model1.pt. and no model.pt.*copy the member you want",
    )


def test_a_pickled_class_that_runs_code_is_refused_and_does_not_run(tmp_path: Path) -> None:
    made = make_fairseq_checkpoint(tmp_path)
    source, copied = made.folder / "bpecodes", tmp_path / "copied-by-the-pickle"
    checkpoint = load_checkpoint(made.folder / "model.pt")
    checkpoint["extra_state"]["payload"] = CopiesAFile(source, copied)
    save_model_pt(made.folder / "model.pt", checkpoint)
    refused(
        made.folder, tmp_path / "out", "pickles shutil.copyfile, which a fairseq checkpoint does not hold"
    )
    assert not copied.exists()


def test_a_cfg_pickled_as_omegaconf_objects_is_refused_with_the_fix(tmp_path: Path) -> None:
    made = make_fairseq_checkpoint(tmp_path, layout="cfg")
    checkpoint = load_checkpoint(made.folder / "model.pt")
    checkpoint["cfg"] = DictConfig(checkpoint["cfg"])
    save_model_pt(made.folder / "model.pt", checkpoint)
    refused(made.folder, tmp_path / "out", "omegaconf.dictconfig.DictConfig.*OmegaConf.to_container")


def test_weights_the_model_has_no_place_for_are_refused_by_name(tmp_path: Path) -> None:
    made = make_fairseq_checkpoint(tmp_path)
    checkpoint = load_checkpoint(made.folder / "model.pt")
    checkpoint["model"]["encoder.layer_norm.weight"] = torch.ones(16)  # a pre-norm model's final layer norm
    save_model_pt(made.folder / "model.pt", checkpoint)
    refused(made.folder, tmp_path / "out", "weights this model has no place for: encoder.layer_norm.weight")


def test_a_dictionary_of_another_size_is_refused(tmp_path: Path) -> None:
    made = make_fairseq_checkpoint(tmp_path)
    for language in LANGUAGES:
        dictionary = made.folder / f"dict.{language}.txt"
        lines = dictionary.read_text(encoding="utf-8").splitlines()
        dictionary.write_text("\n".join(lines[:-12]) + "\n", encoding="utf-8")
    refused(made.folder, tmp_path / "out", "the model's embedding has .* rows: the dictionary is not the one")


def test_subword_nmt_codes_of_version_0_1_are_refused(tmp_path: Path) -> None:
    made = make_fairseq_checkpoint(tmp_path)
    codes = made.folder / "bpecodes"
    codes.write_text("e </w>\nt h\n", encoding="utf-8")
    refused(made.folder, tmp_path / "out", "merges a separate </w>, as subword-nmt's codes of version 0.1 do")


def test_the_output_is_kept_apart_from_the_checkpoint(tmp_path: Path) -> None:
    made = make_fairseq_checkpoint(tmp_path)
    before = sorted(made.folder.iterdir())
    with pytest.raises(ValueError, match="is inside the checkpoint folder"):
        write_fsmt_folder(made.folder, made.folder / "out")
    assert sorted(made.folder.iterdir()) == before
    shutil.copytree(made.fsmt_folder, tmp_path / "taken")
    with pytest.raises(ValueError, match="exists and is not an empty folder: choose a new one"):
        write_fsmt_folder(made.folder, tmp_path / "taken")
    assert sorted((tmp_path / "taken").iterdir()) == sorted(
        (tmp_path / "taken") / path.name for path in made.fsmt_folder.iterdir()
    )
