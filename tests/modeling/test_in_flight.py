"""The in-flight beam search (`decoding.in_flight`): sentences that join a running search at step boundaries, at
different ages, and leave when final, each get what `generate()` gives it alone (§6.1's search, its own output
limit), its scores and n-best included, whatever decodes beside it; a dropped sentence leaves the others as they were.

Models with random weights (tiny, float32): their sentences end at every length, some only at their limit."""

import random

import pytest
import torch

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.decoding.in_flight import InFlightSearch, Wanted


def random_model(**overrides: object) -> VaswaniTransformerForConditionalGeneration:
    torch.manual_seed(0)
    config = tiny_config(vocab_size=60, init_std=0.3, **overrides)
    return VaswaniTransformerForConditionalGeneration(config).eval()


def sources(count: int, seed: int = 0) -> list[list[int]]:
    """Source ids of 1 to 12 tokens and the end token."""
    rng = random.Random(seed)
    return [[rng.randrange(4, 60) for _ in range(rng.randrange(1, 13))] + [3] for _ in range(count)]


def alone(model, ids: list[int], num_beams: int, **options) -> tuple[list[list[int]], list[float] | None]:
    """`generate()`'s hypotheses for one sentence (its tokens after the start token, up to its end), and their
    scores for beam search."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            num_beams=num_beams,
            return_dict_in_generate=True,
            output_scores=True,
            **options,
        )
    pad, end = model.generation_config.pad_token_id, model.generation_config.eos_token_id
    hypotheses = []
    for row in out.sequences[:, 1:].tolist():
        cut = row.index(end) + 1 if end in row else len(row)
        hypotheses.append([token for token in row[:cut] if token != pad or token == end])
    scores = None if num_beams == 1 else out.sequences_scores.tolist()
    return hypotheses, scores


def in_flight(model, wanted: list[Wanted], num_beams: int, seed: int = 0) -> dict:
    """Each sentence's `Done`, the sentences joining at random step boundaries, a few at a time."""
    rng = random.Random(seed)
    search, pending, done = InFlightSearch(model, num_beams), list(wanted), {}
    with torch.no_grad():
        while pending or len(search):
            if pending and (not len(search) or rng.random() < 0.4):
                count = rng.randrange(1, 4)
                search.join(pending[:count])
                del pending[:count]
            for finished in search.step():
                done[finished.tag] = finished
    return done


@pytest.mark.parametrize(
    ("num_beams", "early_stopping", "penalty"),
    [(1, True, "gnmt"), (4, True, "gnmt"), (4, False, "gnmt"), (3, "never", "gnmt"), (4, True, "hf")],
)
def test_sentences_joining_a_running_search_translate_as_generate_does_each_alone(
    num_beams: int, early_stopping: bool | str, penalty: str
) -> None:
    model = random_model(length_penalty_type=penalty)
    model.generation_config.early_stopping = early_stopping
    tested = sources(24)
    wanted = [
        Wanted(ids, len(ids) + model.config.max_length_offset, 0.6, 1, index)
        for index, ids in enumerate(tested)
    ]
    done = in_flight(model, wanted, num_beams)
    assert sorted(done) == list(range(len(tested)))
    lengths = set()
    for index, ids in enumerate(tested):
        hypotheses, scores = alone(model, ids, num_beams, length_penalty=0.6)
        assert done[index].hypotheses == hypotheses[:1], index
        if scores is not None:
            assert done[index].scores == pytest.approx(scores[:1], rel=1e-5)
        lengths.add(len(hypotheses[0]))
    assert len(lengths) > 3  # sentences of many lengths shared the steps


def test_each_sentence_has_its_own_limit_and_alpha_and_its_n_best_are_generate_s() -> None:
    model = random_model()
    tested = sources(12, seed=1)
    wanted = [
        Wanted(ids, 3 + index % 5, 0.2 * (index % 4), 3, index) for index, ids in enumerate(tested)
    ]  # limits of 3 to 7 tokens, α 0 to 0.6
    done = in_flight(model, wanted, 4, seed=1)
    for index, ids in enumerate(tested):
        hypotheses, scores = alone(
            model,
            ids,
            4,
            num_return_sequences=3,
            max_new_tokens=3 + index % 5,
            length_penalty=0.2 * (index % 4),
        )
        assert done[index].hypotheses == hypotheses
        assert done[index].scores == pytest.approx(scores, rel=1e-5)


def test_a_dropped_sentence_leaves_and_the_others_decode_as_they_would_have() -> None:
    model = random_model()
    tested = sources(6, seed=2)
    wanted = [Wanted(ids, len(ids) + 50, 0.6, 1, index) for index, ids in enumerate(tested)]
    search, done = InFlightSearch(model, 4), {}
    with torch.no_grad():
        search.join(wanted)
        search.step()
        assert search.drop({0, 1}) == 2 and search.drop({0}) == 0  # dropped once
        while len(search):
            done.update((finished.tag, finished) for finished in search.step())
            assert 0 not in search.tags and 1 not in search.tags
    assert set(done) <= set(range(2, 6)) and set(range(2, 6)) <= set(done) | {0, 1}
    for index in range(2, 6):
        assert done[index].hypotheses == alone(model, tested[index], 4)[0][:1]


def test_a_search_refuses_more_hypotheses_than_beams() -> None:
    search = InFlightSearch(random_model(), 2)
    with pytest.raises(ValueError, match="1 to 2 hypotheses"):
        search.join([Wanted([5, 3], 10, 0.6, 3, "x")])


def test_the_beam_rows_cache_holds_what_a_growing_cache_would() -> None:
    """Rows reordered, added and dropped and columns left behind for 300 steps, past its first buffers' 64 columns and
    64 rows (grown, moved back, shrunk): each layer's keys and values are those of a cache that concatenates every
    step's to a plain tensor (the reference), in every row's columns since it was added (those before are masked)."""
    from vaswani_transformer.decoding.in_flight import BeamRows

    rng = random.Random(0)
    generator = torch.Generator().manual_seed(0)
    layers, heads, dim = 2, 3, 4
    cache = BeamRows(layers)
    cache.add_rows(5)
    reference = [[torch.zeros(5, heads, 0, dim) for _ in range(2)] for _ in range(layers)]
    ages = [0] * 5  # each row's columns that count
    moved_back, capacities = 0, set()
    for step in range(300):
        start, columns = cache.start, cache.buffers[0][0].shape[2] if cache.buffers else 0
        for layer in range(layers):
            new = [torch.randn(cache.rows, heads, 1, dim, generator=generator) for _ in range(2)]
            found = cache.update(*new, layer)
            reference[layer] = [
                torch.cat([old, value], 2) for old, value in zip(reference[layer], new, strict=True)
            ]
            for got, expected in zip(found, reference[layer], strict=True):
                for row, age in enumerate(ages):
                    counting = min(age + 1, got.shape[2])
                    assert torch.equal(got[row, :, -counting:], expected[row, :, -counting:]), step
        ages = [age + 1 for age in ages]
        moved_back += cache.start < start and cache.buffers[0][0].shape[2] == columns
        capacities.add(cache.buffers[0][0].shape[0])
        if step == 99:
            assert cache.buffers[0][0].shape[2] > 64  # grown: every column so far is in use
        if rng.random() < 0.5:  # the beams kept: rows reordered, some gone
            rows = sorted(
                rng.choices(range(cache.rows), k=rng.randrange(max(1, cache.rows // 2), cache.rows + 1))
            )
            cache.select(torch.tensor(rows))
            reference = [[value[rows] for value in pair] for pair in reference]
            ages = [ages[row] for row in rows]
        if rng.random() < 0.3 or step == 200:  # newcomers: rows at the end, nothing yet in their columns
            count = 70 if step == 200 else rng.randrange(1, 20)  # at step 200, more than the buffers hold
            cache.add_rows(count)
            reference = [
                [torch.cat([value, value.new_zeros(count, *value.shape[1:])]) for value in pair]
                for pair in reference
            ]
            ages += [0] * count
        if step >= 100:  # from now on no sentence older than 20 steps: as many columns as the oldest row's
            ages = [min(age, 20) for age in ages]
            cache.keep_columns(max(ages))
            reference = [[value[:, :, -cache.width :] for value in pair] for pair in reference]
    assert moved_back and max(capacities) > 64  # columns moved back, rows grown
    assert cache.buffers[0][0].shape[0] < max(capacities)  # and shrunk once fewer were used
