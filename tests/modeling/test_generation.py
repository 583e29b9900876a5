"""The paper's beam search (generation_vaswani_transformer.py) against an independent reference written from §6.1
and, with transformers' length penalty, against transformers' own beam search."""

import sys
import threading
from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode
from transformers import GenerationMixin, StoppingCriteria, StoppingCriteriaList

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.decoding.translate import StopWhen
from vaswani_transformer.modeling import generation_vaswani_transformer
from vaswani_transformer.modeling.generation_vaswani_transformer import BLOCK, top_continuations

SOURCES = torch.tensor([[5, 6, 7, 8, 9, 3], [10, 11, 12, 3, 0, 0], [40, 50, 60, 70, 3, 0]])  # padded, eos = 3
SOURCE_BATCH = {"input_ids": SOURCES, "attention_mask": (SOURCES != 0).long()}


def all_continuations(
    log_probs: torch.Tensor, running_beam_scores: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What transformers does: every beam's score plus every log-probability, then the top k of each sentence."""
    sentences, num_beams = running_beam_scores.shape
    vocab_size = log_probs.shape[-1]
    scores = log_probs.view(sentences, num_beams, vocab_size) + running_beam_scores.unsqueeze(-1)
    scores, best = scores.view(sentences, -1).topk(k)
    return scores, best // vocab_size, best % vocab_size


@pytest.mark.parametrize(
    "vocab_size", [40 * BLOCK, 1000, 37000, 37]
)  # whole blocks, a narrower last block, few
@pytest.mark.parametrize("num_beams", [1, 4, 5])
@pytest.mark.parametrize("first_step", [True, False])
def test_top_continuations_are_the_best_of_all_beams_and_tokens(vocab_size, num_beams, first_step) -> None:
    generator = torch.Generator().manual_seed(vocab_size + num_beams)
    sentences, k = 3, 2 * num_beams
    log_probs = torch.log_softmax(3 * torch.randn(sentences * num_beams, vocab_size, generator=generator), -1)
    # the best tokens in the narrower last block too, where its out-of-range columns must never be picked
    log_probs[:, -1] = log_probs.amax(-1) + 0.1 * torch.rand(sentences * num_beams, generator=generator)
    running = -3 * torch.rand(sentences, num_beams, generator=generator)
    if first_step:
        running[:, 1:] = -1e9  # transformers' start: only the first beam's continuations count
    expected = all_continuations(log_probs, running, k)
    found = top_continuations(log_probs, running, k)
    for name, want, got in zip(("scores", "beams", "tokens"), expected, found, strict=True):
        assert torch.equal(got, want), name
    assert (found[2] == vocab_size - 1).any()
    if num_beams > 1:  # later beams win places only once they have scores of their own
        assert (found[1] > 0).any() == (not first_step)


def eos_competing_model(implementation: str, **config: object) -> VaswaniTransformerForConditionalGeneration:
    """A random model (vocabulary 1,000: 15 blocks and a narrower one) whose EOS competes with the best token, so
    that beams finish at different steps and some run to the limit."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=1000, init_std=0.5, **config))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or "bias" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
        start = torch.full((len(SOURCES), 1), model.config.decoder_start_token_id)
        first = model(**SOURCE_BATCH, decoder_input_ids=start).logits[:, -1].argmax(-1)
        embeddings = model.get_input_embeddings().weight
        embeddings[model.config.eos_token_id] = 0.8 * embeddings[first].mean(0)
    model.set_attn_implementation(implementation)
    return model.eval()


def penalty(kind: str, alpha: float, length: int) -> float:
    return ((5 + length) / 6) ** alpha if kind == "gnmt" else length**alpha


@torch.no_grad()
def reference_beam_search(model, source: torch.Tensor, settings: dict) -> list[list[int]]:
    """§6.1's beam search for one sentence, written plainly (no cache, no batch, Python lists): each step the 2k
    best continuations of the k beams; those that end in EOS among the first k become hypotheses scored
    log P / lp(|Y|), the first k that do not run on; a sentence stops when no running beam can beat its k best
    hypotheses (early_stopping=True: once it holds k) or at the length limit. Returns its best hypotheses."""
    k, alpha, early = settings["num_beams"], settings["length_penalty"], settings["early_stopping"]
    kind, limit, eos = model.config.length_penalty_type, settings["max_new_tokens"], model.config.eos_token_id
    source = source[source != 0].unsqueeze(0)
    encoder_outputs = model.get_encoder()(input_ids=source)
    running = [([model.config.decoder_start_token_id], 0.0)]
    finished: list[tuple[list[int], float]] = []
    for length in range(1, limit + 1):
        candidates = []
        for tokens, score in running:
            logits = model(encoder_outputs=encoder_outputs, decoder_input_ids=torch.tensor([tokens])).logits
            log_probs = logits[0, -1].float().log_softmax(-1)
            best = log_probs.topk(2 * k)
            candidates += [
                (tokens + [t], score + p)
                for p, t in zip(best.values.tolist(), best.indices.tolist(), strict=True)
            ]
        candidates = sorted(candidates, key=lambda candidate: -candidate[1])[: 2 * k]
        full = len(finished) == k and early is True
        for tokens, score in candidates[:k]:
            if (tokens[-1] == eos or length == limit) and not full:
                finished.append((tokens, score / penalty(kind, alpha, length)))
        finished = sorted(finished, key=lambda hypothesis: -hypothesis[1])[:k]
        running = [c for c in candidates if c[0][-1] != eos][:k]
        if length == limit or (len(finished) == k and early is True):
            break
        best_length = limit if early == "never" and alpha > 0 else length
        if len(finished) == k and running[0][1] / penalty(kind, alpha, best_length) <= finished[-1][1]:
            break
    return [tokens for tokens, _ in finished]


def padded_rows(hypotheses: list[list[int]], length: int) -> torch.Tensor:
    return torch.tensor([tokens + [0] * (length - len(tokens)) for tokens in hypotheses])


@pytest.mark.parametrize("early_stopping", [True, False, "never"])
@pytest.mark.parametrize("penalty_type", ["gnmt", "hf"])
@pytest.mark.parametrize("num_return_sequences", [1, 2])
def test_beam_search_decodes_what_the_papers_search_decodes(
    early_stopping, penalty_type, num_return_sequences
) -> None:
    model = eos_competing_model("sdpa", length_penalty_type=penalty_type)
    settings = {"num_beams": 4, "max_new_tokens": 12, "early_stopping": early_stopping, "length_penalty": 1.3}
    ours = model.generate(**SOURCE_BATCH, **settings, num_return_sequences=num_return_sequences)
    expected = [reference_beam_search(model, source, settings)[:num_return_sequences] for source in SOURCES]
    assert torch.equal(ours, padded_rows([h for hypotheses in expected for h in hypotheses], ours.shape[1]))
    finished = (ours[:, 1:] == model.config.eos_token_id).any(-1)
    if num_return_sequences == 2:  # beams ended at EOS and at the limit: both ways of finishing were taken
        assert finished.any() and not finished.all()


def transformers_search(model, **settings) -> torch.Tensor:
    """transformers' own beam search (its generate, none of the model's), padded after EOS as the model's is."""
    output = GenerationMixin.generate(model, **SOURCE_BATCH, **settings)
    sequences = output if isinstance(output, torch.Tensor) else output.sequences
    ends = (sequences[:, 1:] == model.config.eos_token_id).int()
    sequences[:, 1:] = sequences[:, 1:].masked_fill((ends.cumsum(1) - ends) > 0, model.config.pad_token_id)
    return output


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("early_stopping", [True, False, "never"])
@pytest.mark.parametrize("num_return_sequences", [1, 2])
def test_with_transformers_penalty_it_decodes_what_transformers_decodes(
    implementation, early_stopping, num_return_sequences
) -> None:
    """With `length_penalty_type="hf"` (|Y|^α) the search is transformers' beam search: the same sequences,
    scores, per-step scores and beam indices, and attentions, from one source row per sentence where transformers
    copies it for every beam."""
    model = eos_competing_model(implementation, length_penalty_type="hf")
    settings = {"num_beams": 4, "max_new_tokens": 12, "early_stopping": early_stopping, "length_penalty": 1.3}
    settings |= {"num_return_sequences": num_return_sequences}
    assert torch.equal(model.generate(**SOURCE_BATCH, **settings), transformers_search(model, **settings))
    settings |= {"output_scores": True, "return_dict_in_generate": True, "output_attentions": True}
    ours, theirs = model.generate(**SOURCE_BATCH, **settings), transformers_search(model, **settings)
    assert torch.equal(ours.sequences, theirs.sequences) and torch.equal(
        ours.beam_indices, theirs.beam_indices
    )
    torch.testing.assert_close(ours.sequences_scores, theirs.sequences_scores)
    for name in ("scores", "decoder_attentions", "cross_attentions", "encoder_attentions"):
        torch.testing.assert_close(getattr(ours, name), getattr(theirs, name), msg=name)


def decoder_rows(model: VaswaniTransformerForConditionalGeneration) -> list[int]:
    """The rows (sentences × beams) of every decoder call the model makes from now on."""
    rows: list[int] = []
    model.model.decoder.register_forward_pre_hook(
        lambda module, args, kwargs: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    return rows


class EveryStep(StoppingCriteria):
    """A criterion of the caller's that never stops a sequence (one the search does not know row by row)."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


# (early_stopping, length_penalty): a sentence is final when all its beams are finished (True) or when its early-stop
# heuristic is met (False; "never" with α <= 0): sentences leave at one step or at two
FINAL_SENTENCE_CASES = [(True, 1.3), (False, -1.0), ("never", 0.0)]


@pytest.mark.parametrize(("early_stopping", "length_penalty"), FINAL_SENTENCE_CASES)
@pytest.mark.parametrize(
    ("criteria", "leave"), [(None, True), (StopWhen(threading.Event().is_set), True), (EveryStep(), False)]
)
def test_sentences_whose_beams_are_final_leave_the_batch(
    early_stopping, length_penalty, criteria, leave
) -> None:
    """Once a sentence's finished beams can no longer change, the decoder stops computing its rows; every
    sentence's output is still transformers' search's. So also under translate()'s workers, whose StopWhen answers
    every row alike; a stopping criterion of the caller's keeps the batch."""
    model = eos_competing_model("sdpa")
    settings = {"num_beams": 4, "max_new_tokens": 12}
    settings |= {"early_stopping": early_stopping, "length_penalty": length_penalty}
    if criteria is not None:
        settings["stopping_criteria"] = StoppingCriteriaList([criteria])
    model.config.length_penalty_type = "hf"  # to compare with transformers' own search
    rows = decoder_rows(model)
    ours = model.generate(**SOURCE_BATCH, **settings)
    assert len(rows) == 12  # the search ran to the limit: some sentence kept a beam open
    assert torch.equal(ours, transformers_search(model, **settings))
    ours_rows = rows[:12]
    assert ours_rows[0] == 3 * 4
    if leave:
        assert min(ours_rows) < 3 * 4 and ours_rows == sorted(ours_rows, reverse=True)  # sentences left early
    else:
        assert set(ours_rows) == {3 * 4}


def test_sampling_and_greedy_search_are_transformers_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beam search, with logits processors or scores in a dict too, runs the paper's search; greedy search,
    sampling and beam sampling run transformers'."""
    model = eos_competing_model("sdpa")
    calls = []
    search = generation_vaswani_transformer.paper_beam_search
    monkeypatch.setattr(
        generation_vaswani_transformer,
        "paper_beam_search",
        lambda *a, **k: calls.append(1) or search(*a, **k),
    )
    model.generate(**SOURCE_BATCH, num_beams=4, max_new_tokens=8, min_new_tokens=3)  # a logits processor
    model.generate(
        **SOURCE_BATCH, num_beams=4, max_new_tokens=8, output_scores=True, return_dict_in_generate=True
    )
    assert len(calls) == 2
    model.generate(**SOURCE_BATCH, num_beams=1, max_new_tokens=8)
    model.generate(**SOURCE_BATCH, num_beams=4, max_new_tokens=8, do_sample=True)
    assert len(calls) == 2


@pytest.mark.parametrize("as_dict", [False, True])
def test_beam_outputs_are_padded_with_the_pad_id_after_eos(as_dict: bool) -> None:
    """Beam outputs are padded with the pad id after EOS (transformers' search fills with `pad or eos`, and the
    pad id is 0), as greedy search's and Marian's, so lengths counted by the pad id are right."""
    model = eos_competing_model("sdpa")
    settings = {"num_beams": 4, "max_new_tokens": 12, "num_return_sequences": 2}
    output = model.generate(
        **SOURCE_BATCH, **settings, output_scores=as_dict, return_dict_in_generate=as_dict
    )
    sequences = output.sequences if as_dict else output
    eos, pad = model.config.eos_token_id, model.config.pad_token_id
    generated = sequences[:, 1:]
    is_eos = generated == eos
    assert (is_eos.sum(-1) <= 1).all()  # one EOS at most, then padding
    ends = torch.where(is_eos.any(-1), is_eos.int().argmax(-1), generated.shape[1])
    assert (ends < generated.shape[1] - 1).any()  # some sequences ended early and were padded
    positions = torch.arange(generated.shape[1])
    assert torch.equal(generated == pad, positions > ends.unsqueeze(1))
    assert torch.equal((sequences != pad).sum(-1), torch.clamp(ends + 2, max=sequences.shape[1]))


HOST_SYNCS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__int__}
HOST_SYNCS |= {torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.nonzero}


DECODING_FILES = {generation_vaswani_transformer.__file__}


class HostSyncsByFunction(TorchFunctionMode):
    """Counts the host syncs (on a GPU each waits for all queued work) made directly in the functions of
    generation_vaswani_transformer.py, by function name."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        caller = sys._getframe(1).f_code
        if func in HOST_SYNCS and caller.co_filename in DECODING_FILES:
            self.counts[caller.co_name] += 1
        return func(*args, **(kwargs or {}))


def test_beam_search_syncs_the_host_once_a_step() -> None:
    """Picking continuations never waits for the device; the loop checks once per step whether to stop, as
    transformers' loop does, and otherwise only once per generation."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=1000)).eval()
    counts = []
    for steps in (2, 8):
        with HostSyncsByFunction() as syncs:
            output = model.generate(**SOURCE_BATCH, num_beams=4, max_new_tokens=steps)
        assert output.shape[1] == 1 + steps  # no beam ended before the limit
        counts.append(syncs.counts)
    assert set(counts[0]) == set(counts[1]) == {"paper_beam_search"}
    assert counts[1]["paper_beam_search"] - counts[0]["paper_beam_search"] == 8 - 2


@pytest.mark.parametrize(
    ("model_max_length", "call", "new_tokens"),
    [
        (None, {}, 6 + 50),  # §6.1: the longest source (6 tokens) + max_length_offset
        (20, {}, 6 + 50),  # transformers' default, as Seq2SeqTrainer writes it: no limit of the model's
        (12, {}, 12 - 1),  # a limit the model's config sets (total length, with <s>)
        (12, {"max_new_tokens": 4}, 4),  # the call's max_new_tokens takes precedence
    ],
)
def test_the_output_limit_of_generate(model_max_length, call, new_tokens, generation_warnings) -> None:
    """Which limit generate() decodes to, with EOS suppressed so every output reaches it; no
    "both max_new_tokens and max_length set" warning where only the call set one."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=100)).eval()
    model.generation_config.update(num_beams=1, suppress_tokens=[3], max_length=model_max_length)
    with torch.no_grad():
        output = model.generate(**SOURCE_BATCH, **call)
    assert output.shape[1] == 1 + new_tokens
    assert not [message for message in generation_warnings if "seem to have been set" in message]
