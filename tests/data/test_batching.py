"""§5.1 token-budget batches, and the bounded shapes a compiled job pads them to (`ShapeBuckets`)."""

import itertools

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.data import TokenBudgetBatchSampler
from vaswani_transformer.data.batching import MAX_COMPILED_SHAPES, BucketCollator, ShapeBuckets
from vaswani_transformer.data.token_arrays import PaddedPairBatches, TokenizedPairs
from vaswani_transformer.training.fused_loss import use_fused_loss

PAD = 0


def random_pairs(count: int, longest: int, seed: int = 0) -> TokenizedPairs:
    """`count` pairs of 1 to `longest` random tokens a side (ids 4-63, each target ending in eos 3)."""
    rng = np.random.default_rng(seed)
    source_lengths = rng.integers(1, longest + 1, count)
    target_lengths = rng.integers(1, longest + 1, count)
    source = rng.integers(4, 64, int(source_lengths.sum()))
    target = rng.integers(4, 64, int(target_lengths.sum()))
    target[np.cumsum(target_lengths) - 1] = 3
    return TokenizedPairs(source, source_lengths, target, target_lengths)


def greedy_batches(order: np.ndarray, longest: np.ndarray, max_tokens: int) -> list[list[int]]:
    """§5.1's packing written plainly: take pairs in `order` while rows × longest stays within the budget."""
    batches: list[list[int]] = []
    for index in order.tolist():
        batch = batches[-1] if batches else []
        if batch and (len(batch) + 1) * max(int(longest[i]) for i in [*batch, index]) <= max_tokens:
            batch.append(index)
        else:
            batches.append([index])
    return batches


def test_unbucketed_batches_are_the_plain_greedy_packing() -> None:
    """Without length_multiple (every job but a compiled one) the batches are §5.1's greedy packing."""
    pairs = random_pairs(500, 120)
    sampler = TokenBudgetBatchSampler(pairs.source_lengths, pairs.target_lengths, 1000, shuffle=False)
    longest = np.maximum(pairs.source_lengths, pairs.target_lengths)
    order = np.lexsort((pairs.target_lengths, pairs.source_lengths, longest))
    assert list(sampler) == greedy_batches(order, longest, 1000)


@pytest.mark.parametrize(("longest", "num_workers"), [(5, 0), (20, 0), (128, 1), (256, 0), (300, 0)])
def test_bucketed_batches_take_at_most_eight_shapes_and_keep_every_pair(
    longest: int, num_workers: int
) -> None:
    """In at most 8 shapes, and through a loader worker too (the collator travels to it pickled)."""
    pairs = random_pairs(600, longest, seed=longest)
    longest_side = np.maximum(pairs.source_lengths, pairs.target_lengths)
    buckets = ShapeBuckets.for_lengths(longest_side, max_tokens=1536)
    shapes = buckets.shapes(longest_side)
    assert 1 <= len(buckets.lengths) <= MAX_COMPILED_SHAPES and len(shapes) <= len(buckets.lengths)
    assert all(length % 8 == 0 for length in buckets.lengths)
    assert buckets.lengths[-1] - 8 < longest_side.max() <= buckets.lengths[-1]
    assert all(rows == max(1, 1536 // length) for rows, length in shapes)
    sampler = TokenBudgetBatchSampler(
        pairs.source_lengths, pairs.target_lengths, 1536, seed=1, length_buckets=buckets
    )
    dataset = PaddedPairBatches(pairs, PAD)
    collate = BucketCollator(buckets, PAD)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=num_workers)
    seen: list[int] = []
    for indices, batch in zip(sampler, loader, strict=True):
        plain = dataset.__getitems__(indices)
        rows, length = batch["input_ids"].shape
        assert (rows, length) in shapes and batch["labels"].shape == (rows, length)
        for name, tensor in plain.items():  # the real batch, top left, untouched
            assert torch.equal(batch[name][: tensor.shape[0], : tensor.shape[1]], tensor), name
        # padding holds no label and no source token but the one that keeps a pad sentence's attention defined
        assert (batch["labels"] != -100).sum() == (plain["labels"] != -100).sum()
        assert batch["attention_mask"].sum() == plain["attention_mask"].sum() + rows - len(indices)
        assert (batch["input_ids"][batch["attention_mask"] == 0] == PAD).all()
        seen += indices
    assert sorted(seen) == list(range(len(pairs)))


def padding(lengths: tuple[int, ...], longest: np.ndarray) -> int:
    """The tokens that padding each of `longest` up to the next of `lengths` adds."""
    return int((np.asarray(lengths)[np.searchsorted(lengths, longest)] - longest).sum())


@pytest.mark.parametrize("seed", range(4))
def test_the_buckets_are_the_eight_multiples_of_8_that_pad_least(seed: int) -> None:
    """Against every choice of at most 8 multiples of 8 ending at the longest pair's (2^9 of them for 80
    tokens): no other pads fewer tokens."""
    rng = np.random.default_rng(seed)
    longest = np.minimum(rng.geometric(0.05 + 0.03 * seed, 2000), 80)  # mostly short, as sentences are
    chosen = ShapeBuckets.for_lengths(longest, max_tokens=1024).lengths
    top = -(-int(longest.max()) // 8) * 8
    others = range(8, top, 8)
    least = min(
        padding((*subset, top), longest)
        for size in range(MAX_COMPILED_SHAPES)
        for subset in itertools.combinations(others, size)
    )
    assert len(chosen) <= MAX_COMPILED_SHAPES and chosen[-1] == top
    assert padding(chosen, longest) == least


@pytest.mark.parametrize("fused_loss", [True, False])
def test_padding_to_a_bucket_changes_neither_the_loss_nor_the_gradients(fused_loss: bool) -> None:
    """The label-smoothed loss divides by the real target tokens: pad positions and pad sentences add nothing
    to it, nor to any gradient."""
    pairs = random_pairs(5, 11, seed=7)
    plain = PaddedPairBatches(pairs, PAD).__getitems__(range(5))
    padded = ShapeBuckets((16,), 128).pad(plain, PAD)
    assert padded["input_ids"].shape == (8, 16)
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(fused_loss=fused_loss))  # no dropout
    use_fused_loss(model)  # taken where config.fused_loss
    model.train()
    results = []
    for batch in (plain, padded):
        model.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        results.append((loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}))
    (loss, grads), (padded_loss, padded_grads) = results
    assert torch.isfinite(padded_loss) and padded_loss == pytest.approx(loss.item(), rel=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(padded_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_a_batch_larger_than_its_bucket_is_refused() -> None:
    plain = PaddedPairBatches(random_pairs(9, 11), PAD).__getitems__(range(9))
    with pytest.raises(ValueError, match="9 rows exceeds its bucket's 8"):
        ShapeBuckets((16,), 128).pad(plain, PAD)
