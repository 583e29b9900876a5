"""The model: positions, masks, cache, attention implementations, save/load, generation."""

import contextlib
import json
import math
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import safetensors.torch
import torch
import transformers.generation.utils
from torch.overrides import TorchFunctionMode
from transformers import AutoModelForSeq2SeqLM, CompileConfig, GenerationMixin

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration, VaswaniTransformerModel
from vaswani_transformer.decoding.cuda_graphs import compiled_steps
from vaswani_transformer.modeling import (
    fast_path_vaswani_transformer,
    generation_vaswani_transformer,
    modeling_vaswani_transformer,
)
from vaswani_transformer.modeling.fast_path_vaswani_transformer import cpu_dropout
from vaswani_transformer.modeling.generation_vaswani_transformer import Beams, Request, still_open
from vaswani_transformer.modeling.modeling_vaswani_transformer import (
    CACHE_NAME,
    VaswaniTransformerSinusoidalPositionalEncoding,
)
from vaswani_transformer.training import fused_loss as fused_loss_module


def paper_position_encoding(pos: int, channel: int, d_model: int) -> float:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    i = channel // 2
    angle = pos / 10000 ** (2 * i / d_model)
    return math.sin(angle) if channel % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_on_a_cpu_zeroes_a_fraction_p_and_scales_the_rest(dtype: torch.dtype) -> None:
    """The CPU path draws its keep-mask from 16 random bits an entry (faster than nn.functional.dropout's
    bernoulli_ there): still each entry zeroed with probability p independently of its neighbours (four entries
    share one 64-bit draw), the rest scaled by 1 / (1 − p) in the forward and backward, from the global random
    state (so seeded runs and resumed runs repeat), and nothing done outside training."""
    # inputs in [0.5, 1.5): an input of exactly 0 (randn gives such pairs now and then) would look dropped
    x = (torch.rand(1000, 1000, generator=torch.Generator().manual_seed(1)) + 0.5).to(dtype).requires_grad_()
    torch.manual_seed(0)
    y = cpu_dropout(x, 0.1, training=True)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.002  # 10^6 draws: the fraction's deviation is 0.0003
    pairs = kept.flatten()[:-1] & kept.flatten()[1:]  # neighbours, mostly from the same 64-bit draw
    assert abs(pairs.float().mean().item() - 0.81) < 0.003
    torch.testing.assert_close(y[kept], (x[kept].float() / 0.9).to(dtype))
    y.sum().backward()
    torch.testing.assert_close(x.grad, (kept / 0.9).to(dtype))
    torch.manual_seed(0)
    assert torch.equal(cpu_dropout(x, 0.1, training=True), y)
    assert torch.equal(cpu_dropout(x, 0.1, training=False), x) and torch.equal(cpu_dropout(x, 0.0, True), x)


def test_positional_encoding_matches_paper_formula() -> None:
    d_model = 512
    encoding = VaswaniTransformerSinusoidalPositionalEncoding(d_model)
    positions = torch.tensor([0, 1, 7, 50, 999, 2500])
    table = encoding(positions)
    assert table.shape == (6, d_model)
    for row, pos in enumerate(positions.tolist()):
        for channel in (0, 1, 2, 3, 100, 101, 510, 511):
            assert table[row, channel].item() == pytest.approx(
                paper_position_encoding(pos, channel, d_model), abs=2e-4
            )


def test_input_longer_than_position_table_works(tiny_model) -> None:
    input_ids = torch.randint(4, 64, (1, 1500))  # beyond max_position_embeddings (1024)
    logits = tiny_model(input_ids=input_ids, decoder_input_ids=input_ids[:, :1100]).logits
    assert logits.shape == (1, 1100, 64) and torch.isfinite(logits).all()


def test_learned_positions_reject_too_long_inputs_clearly() -> None:
    model = VaswaniTransformerForConditionalGeneration(
        tiny_config(position_embedding_type="learned", max_position_embeddings=8)
    )
    with pytest.raises(ValueError, match="exceeds max_position_embeddings=8"):
        model(input_ids=torch.ones(1, 9, dtype=torch.long) * 5, decoder_input_ids=torch.tensor([[2]]))


def test_embeddings_are_shared_and_tied(tiny_model) -> None:
    encoder_table = tiny_model.model.encoder.embed_tokens.weight
    assert tiny_model.model.decoder.embed_tokens.weight is encoder_table
    assert tiny_model.lm_head.weight is encoder_table


@pytest.mark.parametrize("model_class", [VaswaniTransformerModel, VaswaniTransformerForConditionalGeneration])
def test_every_name_of_the_shared_table_is_declared_to_transformers(model_class) -> None:
    """As transformers' common test test_tied_weights_keys asks: the body once shared the encoder's table with
    the decoder without declaring it, so transformers' tied-weights machinery saw untied shared storage."""
    model = model_class(tiny_config())
    declared = model.get_expanded_tied_weights_keys(
        all_submodels=True
    )  # {target: source}, as transformers ties
    names_by_storage: dict[int, set[str]] = {}
    for name, tensor in model.state_dict().items():
        names_by_storage.setdefault(tensor.untyped_storage().data_ptr(), set()).add(name)
    shared = [names for names in names_by_storage.values() if len(names) > 1]
    assert shared == [set(declared) | set(declared.values())]  # one table, every name of it declared
    assert len(set(declared.values())) == 1 and not set(declared) & set(declared.values())  # one source


@pytest.mark.parametrize("model_class", [VaswaniTransformerModel, VaswaniTransformerForConditionalGeneration])
def test_a_checkpoint_without_weights_initialises_and_reports_every_parameter(
    model_class, tmp_path: Path
) -> None:
    """As transformers' common tests test_can_init_all_missing_weights and
    test_model_weights_reload_no_missing_tied_weights ask: loading a checkpoint that lacks every weight once
    left the shared embedding on the meta device and unreported. Now every parameter is initialised, reported
    missing, and tied."""
    torch.manual_seed(0)
    model_class(tiny_config()).save_pretrained(tmp_path)
    safetensors.torch.save_file(
        {"tensor": torch.tensor([1, 2])}, tmp_path / "model.safetensors", {"format": "pt"}
    )
    loaded, info = model_class.from_pretrained(tmp_path, output_loading_info=True)
    parameters = dict(loaded.named_parameters())
    assert not [name for name, parameter in parameters.items() if parameter.device.type == "meta"]
    assert set(parameters) <= set(info["missing_keys"])
    base = getattr(loaded, "model", loaded)
    table = base.encoder.embed_tokens.weight
    assert base.decoder.embed_tokens.weight is table and torch.isfinite(table).all()
    assert table.std().item() == pytest.approx(loaded.config.init_std, rel=0.2)  # initialised, not left empty
    assert getattr(loaded, "lm_head", base.encoder.embed_tokens).weight is table


def test_a_complete_checkpoint_reports_nothing_missing(tiny_model, tmp_path: Path) -> None:
    tiny_model.save_pretrained(tmp_path)
    loaded, info = VaswaniTransformerForConditionalGeneration.from_pretrained(
        tmp_path, output_loading_info=True
    )
    assert (info["missing_keys"], info["unexpected_keys"]) == (set(), set())
    for name, parameter in tiny_model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], parameter, msg=name)
    assert loaded.lm_head.weight is loaded.model.decoder.embed_tokens.weight


@pytest.mark.parametrize("beams", [1, 2])
def test_attention_weights_come_back_under_the_default_attention(tiny_model, source_batch, beams) -> None:
    """Under sdpa (the default) output_attentions=True once gave empty tuples and a log line; now the layers
    asked for weights compute them the eager way, and the outputs are those of eager attention."""
    assert tiny_model.config._attn_implementation == "sdpa"
    decoder_input_ids = torch.tensor([[2, 20, 21], [2, 30, 31]])
    outputs = tiny_model(**source_batch, decoder_input_ids=decoder_input_ids, output_attentions=True)
    tiny_model.set_attn_implementation("eager")
    eager = tiny_model(**source_batch, decoder_input_ids=decoder_input_ids, output_attentions=True)
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        assert len(getattr(outputs, name)) == len(getattr(eager, name)) > 0, name
        for got, expected in zip(getattr(outputs, name), getattr(eager, name), strict=True):
            torch.testing.assert_close(got, expected, msg=name)
    tiny_model.set_attn_implementation("sdpa")
    generated = tiny_model.generate(
        **source_batch,
        num_beams=beams,
        max_new_tokens=3,
        output_attentions=True,
        return_dict_in_generate=True,
    )
    assert len(generated.cross_attentions) == generated.sequences.shape[1] - 1  # one per step
    assert all(len(step) == tiny_model.config.num_decoder_layers for step in generated.cross_attentions)
    assert generated.cross_attentions[0][0].shape[-1] == source_batch["input_ids"].shape[1]


def test_future_target_tokens_never_change_earlier_outputs(tiny_model, source_batch) -> None:
    decoder_input_ids = torch.tensor([[2, 20, 21, 22, 23], [2, 30, 31, 32, 33]])
    altered = decoder_input_ids.clone()
    altered[:, 3:] = torch.tensor([40, 41])
    original = tiny_model(**source_batch, decoder_input_ids=decoder_input_ids).logits
    changed = tiny_model(**source_batch, decoder_input_ids=altered).logits
    torch.testing.assert_close(original[:, :3], changed[:, :3])
    assert not torch.allclose(original[:, 3:], changed[:, 3:])


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_padding_does_not_change_any_sentence(tiny_model, source_batch, implementation) -> None:
    tiny_model.set_attn_implementation(implementation)
    decoder_input_ids = torch.tensor([[2, 20, 21, 22], [2, 30, 31, 0]])
    decoder_mask = (decoder_input_ids != 0).long()
    batched = tiny_model(
        **source_batch, decoder_input_ids=decoder_input_ids, decoder_attention_mask=decoder_mask
    )
    alone = tiny_model(
        input_ids=torch.tensor([[10, 11, 12, 3]]), decoder_input_ids=torch.tensor([[2, 30, 31]])
    )
    torch.testing.assert_close(batched.logits[1, :3], alone.logits[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        batched.encoder_last_hidden_state[1, :4], alone.encoder_last_hidden_state[0], rtol=1e-5, atol=1e-5
    )


@pytest.mark.slow
@torch.no_grad()  # flex_attention has no CPU backward
def test_attention_implementations_agree(tiny_model, source_batch) -> None:
    decoder_input_ids = torch.tensor([[2, 20, 21, 22], [2, 30, 31, 32]])
    outputs = {}
    for implementation in ("eager", "sdpa", "flex_attention"):
        tiny_model.set_attn_implementation(implementation)
        outputs[implementation] = tiny_model(**source_batch, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(outputs["eager"], outputs["sdpa"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outputs["eager"], outputs["flex_attention"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("padded", [False, True])
def test_sdpa_in_bf16_on_a_cpu_computes_what_eager_computes(source_batch, padded: bool) -> None:
    """In bfloat16 on a CPU, a model configured for sdpa attends with the eager kernels (torch's sdpa is slower
    there): the same loss, gradients and beam-4 tokens as the eager model, also where transformers passes sdpa
    no mask (an unpadded causal batch, which sdpa masks by `is_causal`)."""
    torch.manual_seed(0)
    models = {}
    for implementation in ("sdpa", "eager"):
        torch.manual_seed(0)
        models[implementation] = VaswaniTransformerForConditionalGeneration(tiny_config()).to(torch.bfloat16)
        models[implementation].set_attn_implementation(implementation)
    inputs = source_batch if padded else {"input_ids": torch.tensor([[5, 6, 7, 8, 3], [10, 11, 12, 13, 3]])}
    labels = torch.tensor([[20, 21, 22, 3], [30, 31, 3, -100]])
    losses, gradients = {}, {}
    for implementation, model in models.items():
        loss = model.train()(**inputs, labels=labels).loss
        loss.backward()
        losses[implementation] = loss
        gradients[implementation] = model.model.encoder.layers[0].self_attn.q_proj.weight.grad
    assert torch.equal(losses["sdpa"], losses["eager"])
    assert torch.equal(gradients["sdpa"], gradients["eager"])
    tokens = {name: model.eval().generate(**inputs, max_new_tokens=6) for name, model in models.items()}
    assert torch.equal(tokens["sdpa"], tokens["eager"])


def test_decoder_masks_the_future_in_bf16_on_a_cpu(tiny_model, source_batch) -> None:
    """The eager kernel standing in for sdpa masks the future itself when it is given no mask."""
    model = tiny_model.to(torch.bfloat16)
    decoder_input_ids = torch.tensor([[2, 20, 21, 22, 23], [2, 30, 31, 32, 33]])
    altered = decoder_input_ids.clone()
    altered[:, 3:] = torch.tensor([40, 41])
    source = {
        "input_ids": torch.tensor([[5, 6, 7, 8, 3], [10, 11, 12, 13, 3]])
    }  # unpadded: sdpa gets no mask
    original = model(**source, decoder_input_ids=decoder_input_ids).logits
    changed = model(**source, decoder_input_ids=altered).logits
    assert torch.equal(original[:, :3], changed[:, :3])
    assert not torch.equal(original[:, 3:], changed[:, 3:])


def test_output_attentions_are_distributions_that_ignore_padding_and_future(tiny_model, source_batch) -> None:
    tiny_model.set_attn_implementation("eager")
    decoder_input_ids = torch.tensor([[2, 20, 21, 22], [2, 30, 31, 32]])
    out = tiny_model(**source_batch, decoder_input_ids=decoder_input_ids, output_attentions=True)
    assert (
        len(out.encoder_attentions) == 2
        and len(out.decoder_attentions) == 3
        and len(out.cross_attentions) == 3
    )
    for weights in (*out.encoder_attentions, *out.decoder_attentions, *out.cross_attentions):
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    padded_keys = source_batch["attention_mask"][1] == 0
    for weights in (*out.encoder_attentions, *out.cross_attentions):
        assert weights[1, :, :, padded_keys].abs().max() == 0
    future = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    for weights in out.decoder_attentions:
        assert weights[:, :, future].abs().max() == 0


def test_cached_decoding_equals_full_recomputation(tiny_model, source_batch) -> None:
    greedy = {"num_beams": 1, "max_new_tokens": 8, "output_scores": True, "return_dict_in_generate": True}
    with_cache = tiny_model.generate(**source_batch, use_cache=True, **greedy)
    without = tiny_model.generate(**source_batch, use_cache=False, **greedy)
    assert torch.equal(with_cache.sequences, without.sequences)
    for cached, full in zip(with_cache.scores, without.scores, strict=True):
        torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-4)
    beam = {"num_beams": 4, "max_new_tokens": 8, "output_scores": True, "return_dict_in_generate": True}
    beam_cache = tiny_model.generate(**source_batch, use_cache=True, **beam)
    beam_full = tiny_model.generate(**source_batch, use_cache=False, **beam)
    assert torch.equal(beam_cache.sequences, beam_full.sequences)
    torch.testing.assert_close(beam_cache.sequences_scores, beam_full.sequences_scores, rtol=1e-4, atol=1e-4)


def test_beam_search_reorders_the_cache_like_recomputing_everything(source_batch) -> None:
    """Only the self-attention cache follows the chosen beams (`follow_beams`); with beams that do move, the
    cached search must equal the search that recomputes every step from the tokens."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(init_std=1.0)).eval()
    beam = {"num_beams": 4, "max_new_tokens": 9, "output_scores": True, "return_dict_in_generate": True}
    cached = model.generate(**source_batch, use_cache=True, **beam)
    full = model.generate(**source_batch, use_cache=False, **beam)
    assert (full.beam_indices[:, :9] != full.beam_indices[:, :1]).any()  # the search moved between beams
    assert torch.equal(cached.sequences, full.sequences)
    torch.testing.assert_close(cached.sequences_scores, full.sequences_scores, rtol=1e-4, atol=1e-4)
    for with_cache, without in zip(cached.scores, full.scores, strict=True):
        torch.testing.assert_close(with_cache, without, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_static_cache_decodes_like_the_dynamic_cache(source_batch, num_beams) -> None:
    """transformers' pre-allocated cache (`cache_implementation="static"`, what torch.compile / CUDA graphs need)
    gives the tokens and scores of the default cache, for greedy search and beam search (the beam reorder)."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(init_std=1.0)).eval()
    settings = {
        "num_beams": num_beams,
        "max_new_tokens": 9,
        "output_scores": True,
        "return_dict_in_generate": True,
    }
    dynamic = model.generate(**source_batch, **settings)
    addresses = []  # where the first layer's self-attention keys are, at every decoding step
    model.register_forward_pre_hook(
        lambda _module, _args, kwargs: addresses.append(
            kwargs[CACHE_NAME].self_attention_cache.layers[0].keys.data_ptr()
            if kwargs[CACHE_NAME].self_attention_cache.layers[0].is_initialized
            else None
        ),
        with_kwargs=True,
    )
    static = model.generate(**source_batch, cache_implementation="static", **settings)
    assert torch.equal(static.sequences, dynamic.sequences)
    assert (
        len(addresses) == 9 and len(set(addresses[1:])) == 1
    )  # the beam reorder keeps the storage (CUDA graphs)
    if num_beams > 1:  # the search moved between beams, so the caches were reordered
        assert (dynamic.beam_indices[:, :9] != dynamic.beam_indices[:, :1]).any()
    for with_static, with_dynamic in zip(static.scores, dynamic.scores, strict=True):
        torch.testing.assert_close(with_static, with_dynamic, rtol=1e-4, atol=1e-4)


def compiling_on_every_device(**options: object) -> CompileConfig:
    """A compile_config that generate() honours on a CPU too (transformers compiles on GPUs only unless told)."""
    compile_config = CompileConfig(**options)
    compile_config._compile_all_devices = True
    return compile_config


@pytest.mark.slow  # compiles the decoding step
@pytest.mark.parametrize("num_beams", [1, 4])
def test_decoding_steps_compile_to_one_graph(source_batch, num_beams) -> None:
    """With a static cache the decoding step traces as one graph (fullgraph: a graph break raises), as CUDA graphs
    need, and decodes the default path's tokens: greedy search through generate()'s own compile_config
    (transformers compiles its step), beam search through the package's `compiled_steps` (what `cuda_graphs=True`
    uses). The prefill runs uncompiled, as in transformers' greedy search: one graph, of the one-token step (a
    compiled prefill, which sets up the static cache inside the graph, crashed CUDA graphs on an H200)."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(init_std=1.0)).eval()
    graphs = []

    def recording_backend(graph_module: torch.fx.GraphModule, _inputs: list, **_options: object) -> Callable:
        graphs.append(graph_module)
        return graph_module.forward

    settings = {"num_beams": num_beams, "max_new_tokens": 9, "cache_implementation": "static"}
    expected = model.generate(**source_batch, **settings)
    compile_config = compiling_on_every_device(fullgraph=True, backend=recording_backend)
    with compiled_steps(model, compile_config) if num_beams > 1 else contextlib.nullcontext():
        compiled = model.generate(**source_batch, compile_config=compile_config, **settings)
    assert len(graphs) == 1, f"{len(graphs)} graphs: the prefill ran compiled, or the step recompiled"
    assert torch.equal(compiled, expected)
    assert "forward" not in vars(model), "the compiled forward stayed on the model"
    graphs.clear()
    assert torch.equal(model.generate(**source_batch, num_beams=num_beams, max_new_tokens=9), expected)
    assert not graphs, "the default (dynamic-cache) path ran compiled"


def test_beam_search_keeps_a_forward_set_on_the_model(tiny_model, source_batch) -> None:
    """A forward the user put on the model (e.g. compiled by hand, the way to compile on a CPU) is the one beam
    search calls, and it stays there, also under the package's compiled steps."""
    calls = []

    def own_forward(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return type(tiny_model).forward(tiny_model, *args, **kwargs)

    compile_config = compiling_on_every_device(backend="eager")
    tiny_model.forward = own_forward
    settings = {"num_beams": 4, "max_new_tokens": 3, "cache_implementation": "static"}
    with compiled_steps(tiny_model, compile_config):
        tiny_model.generate(**source_batch, compile_config=compile_config, **settings)
    assert calls, "beam search did not call the model's own forward"
    assert tiny_model.forward is own_forward


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (`pytest -m gpu` on the GPU machine)"
)
@pytest.mark.parametrize("num_beams", [1, 4])
def test_cuda_graph_decoding_gives_the_plain_tokens(source_batch, num_beams) -> None:
    """The GPU recipe of docs/decoding-speed.md, `generate(..., cache_implementation="static")`, which on a GPU compiles the decoding
    step with CUDA graphs (transformers' default compile_config, mode="reduce-overhead"), decodes the tokens of
    plain generate(), also when the recorded graphs replay on a second call."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(init_std=1.0)).to("cuda").eval()
    batch = {name: tensor.to("cuda") for name, tensor in source_batch.items()}
    settings = {"num_beams": num_beams, "max_new_tokens": 9}
    expected = model.generate(**batch, **settings)
    for _ in range(2):
        compiled = model.generate(**batch, cache_implementation="static", **settings)
        assert torch.equal(compiled, expected)


def test_cross_attention_keys_are_computed_once_per_generation(tiny_model, source_batch) -> None:
    calls = []
    tiny_model.model.decoder.layers[0].encoder_attn.k_proj.register_forward_hook(lambda *_: calls.append(1))
    tiny_model.generate(**source_batch, num_beams=4, max_new_tokens=6, min_new_tokens=6)
    assert len(calls) == 1


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_beams_share_their_sentence_source(source_batch, implementation) -> None:
    """The encoder output and source mask stay at one row per sentence during beam search: cross-attention keys are
    projected from 2 rows, not 2 × 4 beams, and the search (moving beams, 2 returned sequences, a padded source)
    equals transformers' own (with its |Y|^α penalty), which copies the source for every beam."""
    torch.manual_seed(0)
    config = tiny_config(init_std=1.0, length_penalty_type="hf")
    model = VaswaniTransformerForConditionalGeneration(config).eval()
    model.set_attn_implementation(implementation)
    projected_rows = []
    model.model.decoder.layers[0].encoder_attn.k_proj.register_forward_hook(
        lambda _module, inputs, _output: projected_rows.append(inputs[0].shape[0])
    )
    settings = {"num_beams": 4, "num_return_sequences": 2, "max_new_tokens": 9, "output_scores": True}
    settings |= {"return_dict_in_generate": True, "output_attentions": implementation == "eager"}
    shared = model.generate(**source_batch, **settings)
    assert projected_rows == [2]
    copied = GenerationMixin.generate(model, **source_batch, **settings)  # transformers' search
    assert projected_rows == [2, 8]
    assert (copied.beam_indices[:, :9] != copied.beam_indices[:, :1]).any()  # the search moved between beams
    after_end = (copied.sequences == model.config.eos_token_id).int().cumsum(
        -1
    ) > 1  # transformers pads with EOS
    assert torch.equal(shared.sequences, copied.sequences.masked_fill(after_end, model.config.pad_token_id))
    torch.testing.assert_close(shared.sequences_scores, copied.sequences_scores, rtol=1e-5, atol=1e-5)
    for with_shared, with_copies in zip(shared.scores, copied.scores, strict=True):
        torch.testing.assert_close(with_shared, with_copies, rtol=1e-5, atol=1e-5)
    if implementation == "eager":  # attention pictures keep one row per beam
        for step_shared, step_copied in zip(shared.cross_attentions, copied.cross_attentions, strict=True):
            for layer_shared, layer_copied in zip(step_shared, step_copied, strict=True):
                torch.testing.assert_close(layer_shared, layer_copied, rtol=1e-5, atol=1e-5)


# Tensor → Python conversions: on a GPU each one waits for all queued work (a host sync).
HOST_SYNCS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.nonzero,
    torch.Tensor.__bool__,
    torch.Tensor.__int__,
    torch.Tensor.__float__,
    torch.Tensor.__index__,
}


OUR_MODEL = {module.__file__ for module in (modeling_vaswani_transformer, fast_path_vaswani_transformer)}
DECODING_LOOPS = {transformers.generation.utils.__file__, generation_vaswani_transformer.__file__}


class HostSyncsInOurModel(TorchFunctionMode):
    """Counts the host syncs made by the model's forward (the model file and its fast path) and what it calls, not
    by a decoding loop (the nearer of the two on the stack decides)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in HOST_SYNCS:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename not in {*OUR_MODEL, *DECODING_LOOPS}:
                frame = frame.f_back
            self.count += frame is not None and frame.f_code.co_filename in OUR_MODEL
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_beam_search_steps_make_no_host_syncs(tiny_model, source_batch, implementation) -> None:
    """The model's forward makes as many host syncs when beam search decodes 2 tokens as 8 (a padded source: the
    padding check of the cross-attention mask is made once per generation, not at every step). Greedy search is
    transformers' loop, whose mask helper checks the padding at every step."""
    num_beams = 4
    assert (source_batch["attention_mask"] == 0).any()
    tiny_model.set_attn_implementation(implementation)
    counts = []
    for steps in (2, 8):
        with HostSyncsInOurModel() as syncs:
            tiny_model.generate(
                **source_batch, num_beams=num_beams, min_new_tokens=steps, max_new_tokens=steps
            )
        counts.append(syncs.count)
    assert counts[0] == counts[1]


def sequence_log_probability(model, source_batch, row: int, sequence: torch.Tensor) -> tuple[float, int]:
    """Sum of token log-probabilities of a generated sequence (after the start token) and its length."""
    tokens = sequence[1:]
    if (tokens == model.config.eos_token_id).any():
        tokens = tokens[: int((tokens == model.config.eos_token_id).nonzero()[0]) + 1]
    inputs = {k: v[row : row + 1] for k, v in source_batch.items()}
    decoder_input_ids = torch.cat([sequence[:1], tokens[:-1]]).unsqueeze(0)
    log_probs = model(**inputs, decoder_input_ids=decoder_input_ids).logits.log_softmax(-1)[0]
    return log_probs.gather(-1, tokens.unsqueeze(-1)).sum().item(), len(tokens)


@pytest.mark.parametrize("early_stopping", [True, False, "never"])
@pytest.mark.parametrize("penalty_type", ["gnmt", "hf"])
def test_beam_scores_use_the_configured_length_penalty(source_batch, penalty_type, early_stopping) -> None:
    torch.manual_seed(1)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(length_penalty_type=penalty_type)).eval()
    out = model.generate(
        **source_batch,
        max_new_tokens=7,
        early_stopping=early_stopping,
        output_scores=True,
        return_dict_in_generate=True,
    )
    for row in range(2):
        log_probability, length = sequence_log_probability(model, source_batch, row, out.sequences[row])
        divisor = ((5 + length) / 6) ** 0.6 if penalty_type == "gnmt" else length**0.6
        assert out.sequences_scores[row].item() == pytest.approx(log_probability / divisor, rel=1e-4)


@pytest.mark.parametrize("early_stopping", [True, False, "never"])
@pytest.mark.parametrize("penalty_type", ["gnmt", "hf"])
def test_early_stop_heuristic_bounds_running_beams_with_the_configured_penalty(
    penalty_type, early_stopping
) -> None:
    """Beam search stops once no running beam can beat the worst finished one: the best running log-probability
    (-4.0) divided by the penalty at the length it could reach (now: 10 tokens; "never": the limit, 20) against
    a finished score of -1.5. GNMT and |Y|^α disagree here, so the test sees which one is applied."""
    length = 20 if early_stopping == "never" else 10
    divisor = ((5 + length) / 6) ** 0.6 if penalty_type == "gnmt" else length**0.6
    request = Request(4, 8, 1, 21, 0, torch.tensor([3]), penalty_type, 0.6, early_stopping)
    running = torch.zeros((1, 2, 11), dtype=torch.long)  # 10 tokens after <s>
    finished = torch.zeros((1, 2, 21), dtype=torch.long)
    scores, lengths = torch.tensor([[-1.0, -1.5]]), torch.tensor([[5, 6]])
    beams = Beams(
        running,
        torch.tensor([[-4.0, -5.0]]),
        finished,
        scores,
        lengths,
        torch.tensor([True]),
        None,
        None,
        None,
    )
    unsatisfied = still_open(beams, request)
    assert unsatisfied.item() == (-4.0 / divisor > -1.5)
    assert unsatisfied.item() == (penalty_type == "hf")  # the two forms disagree on these numbers


def test_default_generation_follows_the_paper(tiny_model, source_batch) -> None:
    config = tiny_model.generation_config
    assert (config.num_beams, config.length_penalty, config.early_stopping) == (4, 0.6, True)
    assert (config.decoder_start_token_id, config.eos_token_id, config.pad_token_id) == (2, 3, 0)
    out = tiny_model.generate(**source_batch, suppress_tokens=[3])  # no eos: runs to the limit
    assert out.shape[1] == 1 + 6 + 50  # start token + longest source (6) + 50, §6.1


def test_gradient_checkpointing_gives_the_same_gradients(source_batch) -> None:
    labels = torch.tensor([[20, 21, 3], [30, 3, -100]])
    gradients = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = VaswaniTransformerForConditionalGeneration(tiny_config()).train()
        if checkpointing:
            # transformers 5.24 names it activation_checkpointing_enable (the old name warns); 5.17 has only the old
            getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
        model(**source_batch, labels=labels).loss.backward()
        gradients.append(model.model.encoder.layers[0].self_attn.q_proj.weight.grad.clone())
    torch.testing.assert_close(gradients[0], gradients[1])


def test_loss_is_label_smoothed_per_token(tiny_model, source_batch) -> None:
    labels = torch.tensor([[20, 21, 3], [30, 3, -100]])
    with torch.no_grad():  # in training mode (eval mode gives the plain NLL); tiny_config has no dropout
        out = tiny_model.train()(**source_batch, labels=labels)
    log_probs = out.logits.log_softmax(-1)
    keep = labels != -100
    nll = -log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep]
    uniform = -log_probs.mean(-1)[keep]
    expected = ((1 - 0.1) * nll + 0.1 * uniform).sum() / keep.sum()
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)


def _loss_and_gradients(
    fused: bool, precision: str, num_items_in_batch: torch.Tensor | None, source_batch
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None]:
    """Loss, every parameter's gradient and the logits of one training forward/backward of a seeded tiny model."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(fused_loss=fused)).train()
    fused_loss_module.use_fused_loss(model)  # taken where config.fused_loss
    if precision == "bf16 weights":
        model.to(torch.bfloat16)
    labels = torch.tensor([[20, 21, 22, 23, 3], [30, 31, 3, -100, -100]])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16 autocast"):
        out = model(**source_batch, labels=labels, num_items_in_batch=num_items_in_batch)
    out.loss.backward()
    gradients = {name: p.grad.float() for name, p in model.named_parameters()}
    return out.loss.float(), gradients, out.logits


@pytest.mark.parametrize("precision", ["fp32", "bf16 autocast", "bf16 weights"])
@pytest.mark.parametrize("num_items_in_batch", [None, torch.tensor(11)])
def test_fused_loss_gives_the_loss_and_gradients_of_the_logits_path(
    source_batch, precision, num_items_in_batch, monkeypatch
) -> None:
    # 4 target tokens per chunk: the 10 tokens make 3 chunks, the last one partial and all padding
    monkeypatch.setitem(fused_loss_module.LOSS_CHUNK_ELEMENTS, "cpu", 4 * 64)
    loss, gradients, logits = _loss_and_gradients(False, precision, num_items_in_batch, source_batch)
    fused_loss, fused_gradients, fused_logits = _loss_and_gradients(
        True, precision, num_items_in_batch, source_batch
    )
    assert logits is not None and fused_logits is None  # the fused path never builds them
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if precision == "fp32" else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(fused_loss, loss, **tolerance)
    assert fused_gradients.keys() == gradients.keys()
    for name, gradient in gradients.items():
        scale = gradient.abs().max().clamp(min=1e-3)  # bf16: compare relative to the tensor's largest entry
        torch.testing.assert_close(fused_gradients[name] / scale, gradient / scale, **tolerance, msg=name)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_bfloat16_autocast_keeps_the_residual_stream_in_bfloat16(source_batch, dtype) -> None:
    """Under bfloat16 autocast the stacks cast their embedded input once and the residual stream stays bfloat16:
    every linear layer reads a bfloat16 input (autocast casts no activation), W^Q, W^K and W^V read one and the same
    tensor (W^K and W^V of an encoder-decoder attention too) and each layer hands on bfloat16. float16 autocast
    keeps the float32 stream (its range is narrow): each linear layer reads float32 and casts it itself."""
    model = VaswaniTransformerForConditionalGeneration(tiny_config(fused_loss=False)).train()
    inputs: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.LayerNorm)):
            module.register_forward_pre_hook(lambda _, args, name=name: inputs.update({name: args[0]}))
    labels = torch.tensor([[20, 21, 22, 23, 3], [30, 31, 3, -100, -100]])
    with torch.autocast("cpu", dtype=dtype):
        out = model(**source_batch, labels=labels, output_hidden_states=True)
    out.loss.backward()
    stream = torch.bfloat16 if dtype == torch.bfloat16 else torch.float32
    assert len(inputs) == 2 * 8 + 3 * 13 + 1  # every projection, feed-forward and layer norm, and lm_head
    # out_proj and fc2 read attention outputs and activations (autocast's dtype); all others read the stream
    readers = [name for name in inputs if not name.endswith(("out_proj", "fc2"))]
    assert {name: inputs[name].dtype for name in readers} == dict.fromkeys(readers, stream)
    assert {inputs[name].dtype for name in inputs.keys() - readers} == {dtype}
    layer_outputs = out.encoder_hidden_states[1:] + out.decoder_hidden_states[1:]
    assert {tensor.dtype for tensor in layer_outputs} == {stream}
    self_attention = [inputs[f"model.encoder.layers.0.self_attn.{p}_proj"] for p in "qkv"]
    cross_keys_values = [inputs[f"model.decoder.layers.0.encoder_attn.{p}_proj"] for p in "kv"]
    for shared in (self_attention, cross_keys_values):
        assert len({tensor.data_ptr() for tensor in shared}) == 1


def test_training_under_bfloat16_autocast_follows_float32(source_batch) -> None:
    """The bfloat16 residual stream costs no more than bfloat16's rounding: from the same initialisation, Adam on
    one batch under bf16 autocast follows float32's losses to 1% at each of 40 steps (measured: 0.4%; a stream
    rounded to 1/16 strays by 2%)."""
    labels = torch.tensor([[20, 21, 22, 23, 3], [30, 31, 3, -100, -100]])

    def losses(autocast: bool) -> torch.Tensor:
        torch.manual_seed(0)
        model = VaswaniTransformerForConditionalGeneration(tiny_config()).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
        history = []
        for _ in range(40):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(**source_batch, labels=labels).loss
            loss.backward()
            optimizer.step()
            history.append(loss.item())
        return torch.tensor(history)

    reference, bfloat16 = losses(False), losses(True)
    assert reference[-1] < 0.5 * reference[0]  # it learns the batch
    torch.testing.assert_close(bfloat16, reference, rtol=0.01, atol=0.0)


@pytest.mark.parametrize("precision", ["fp32", "bf16 autocast"])
def test_fused_loss_workspace_is_reused_and_gives_the_same_loss_and_gradients(precision, monkeypatch) -> None:
    """On a CPU the fused loss keeps its (chunk, vocabulary) buffers between calls: the second call reuses them
    (same memory), a smaller batch takes a slice of them, results equal those of fresh buffers bit for bit, and no
    returned gradient shares memory with the workspace (the next call must not change the last one's)."""
    monkeypatch.setitem(fused_loss_module.LOSS_CHUNK_ELEMENTS, "cpu", 4 * 64)  # 4 tokens a chunk
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(64, 16, generator=generator, requires_grad=True)

    def loss_and_gradients(tokens: int, workspace: dict | None) -> tuple[torch.Tensor, ...]:
        hidden = torch.randn(tokens, 16, generator=generator.manual_seed(tokens), requires_grad=True)
        labels = torch.randint(4, 64, (tokens,), generator=generator)
        labels[-2:] = -100
        weight.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16 autocast"):
            loss = fused_loss_module.fused_label_smoothed_loss(hidden, weight, labels, 0.1, None, workspace)
        loss.backward()
        return loss.detach(), hidden.grad, weight.grad

    workspace: dict[str, torch.Tensor] = {}
    first = loss_and_gradients(10, workspace)
    first_copies = [tensor.clone() for tensor in first]
    buffers = {name: buffer.data_ptr() for name, buffer in workspace.items()}
    assert set(buffers) == {"logits", "log_probs", "grad_weight"}
    second = loss_and_gradients(7, workspace)  # fewer tokens: a slice of the same buffers
    assert {name: buffer.data_ptr() for name, buffer in workspace.items()} == buffers
    for kept, copy in zip(first, first_copies, strict=True):
        assert torch.equal(kept, copy)
    for tokens, reused in ((10, first), (7, second)):
        for fresh, result in zip(loss_and_gradients(tokens, None), reused, strict=True):
            assert torch.equal(fresh, result)


def test_fused_loss_is_only_taken_when_training_with_gradients(source_batch) -> None:
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config())
    labels = torch.tensor([[20, 21, 3], [30, 3, -100]])
    assert model.train()(**source_batch, labels=labels).logits is not None  # no fused loss set: the logits
    fused_loss_module.use_fused_loss(model)
    labels = torch.tensor([[20, 21, 3], [30, 3, -100]])
    assert model.train()(**source_batch, labels=labels).logits is None
    with torch.no_grad():
        no_grad = model(**source_batch, labels=labels)
    evaluated = model.eval()(**source_batch, labels=labels)
    torch.testing.assert_close(no_grad.logits, evaluated.logits)  # dropout is 0: train and eval agree
    torch.testing.assert_close(
        evaluated.loss, model.label_smoothed_loss(evaluated.logits, labels, label_smoothing=0)
    )


def test_eval_mode_loss_is_the_plain_negative_log_likelihood(source_batch) -> None:
    """eval_loss was once label-smoothed (1.399 against 0.229 plain on one pair), so perplexity from
    it meant nothing. Training keeps §5.4's smoothed loss; eval mode gives mean −log p(label)."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config())
    labels = torch.tensor([[20, 21, 3], [30, 3, -100]])
    keep = labels != -100
    evaluated = model.eval()(**source_batch, labels=labels)
    log_probs = evaluated.logits.log_softmax(-1)
    nll = -log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep].mean()
    assert evaluated.loss.item() == pytest.approx(nll.item(), rel=1e-5)
    with torch.no_grad():  # training mode without gradients takes the unfused path: smoothed there too
        trained = model.train()(**source_batch, labels=labels)
    assert trained.loss.item() == pytest.approx(
        model.label_smoothed_loss(trained.logits, labels).item(), rel=1e-5
    )
    assert trained.loss.item() != pytest.approx(evaluated.loss.item(), rel=1e-4)  # same logits, other loss


def test_checkpoint_saved_before_the_fused_loss_loads_and_trains_identically(
    tiny_model, source_batch, tmp_path: Path
) -> None:
    tiny_model.save_pretrained(tmp_path)
    config_file = tmp_path / "config.json"
    config = json.loads(config_file.read_text())
    del config["fused_loss"]  # as written before the setting existed
    config_file.write_text(json.dumps(config))
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).train()
    assert loaded.config.fused_loss
    labels = torch.tensor([[20, 21, 3], [30, 3, -100]])
    expected = tiny_model.label_smoothed_loss(tiny_model(**source_batch, labels=labels).logits, labels)
    torch.testing.assert_close(loaded(**source_batch, labels=labels).loss, expected)


@pytest.mark.slow
def test_training_forward_compiles_to_one_graph_that_follows_batch_shapes() -> None:
    """torch.compile traces the training forward whole, and token-budget batches of new shapes reuse its graph
    (after the one recompile that makes the sizes symbolic) instead of compiling once per shape."""
    graphs = []

    def counting_backend(graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append(graph)
        return graph.forward

    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(dropout=0.1)).train()
    compiled = torch.compile(model, backend=counting_backend)
    generator = torch.Generator().manual_seed(0)
    for batch, source_length, target_length in [(2, 6, 3), (3, 9, 5), (4, 7, 8), (5, 11, 4), (2, 5, 9)]:
        input_ids = torch.randint(4, 64, (batch, source_length), generator=generator)
        labels = torch.randint(4, 64, (batch, target_length), generator=generator)
        labels[0, -1] = -100
        torch.manual_seed(1)
        loss = compiled(input_ids=input_ids, labels=labels).loss
        loss.backward()
        torch.manual_seed(1)
        expected = model(input_ids=input_ids, labels=labels).loss  # eager: the fused loss, same dropout masks
        torch.testing.assert_close(loss, expected)
    assert len(graphs) == 2


def test_save_and_from_pretrained_round_trip(tiny_model, source_batch, tmp_path: Path) -> None:
    tiny_model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists() and not list(tmp_path.glob("*.bin"))
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is VaswaniTransformerForConditionalGeneration
    inv_freq = loaded.model.decoder.embed_positions.inv_freq
    assert torch.isfinite(inv_freq).all()
    torch.testing.assert_close(inv_freq, VaswaniTransformerSinusoidalPositionalEncoding.compute_inv_freq(32))
    assert loaded.lm_head.weight is loaded.model.encoder.embed_tokens.weight
    decoder_input_ids = torch.tensor([[2, 20, 21], [2, 30, 31]])
    torch.testing.assert_close(
        loaded(**source_batch, decoder_input_ids=decoder_input_ids).logits,
        tiny_model(**source_batch, decoder_input_ids=decoder_input_ids).logits,
        rtol=0,
        atol=0,
    )
    assert loaded.generation_config.num_beams == 4


@pytest.mark.slow  # a fresh interpreter
def test_saved_folder_loads_with_remote_code_without_the_package(
    tiny_model, source_batch, tmp_path: Path
) -> None:
    tiny_model.save_pretrained(tmp_path / "model")
    assert (tmp_path / "model" / "modeling_vaswani_transformer.py").exists()
    decoder_input_ids = torch.tensor([[2, 20, 21], [2, 30, 31]])
    expected = tiny_model(**source_batch, decoder_input_ids=decoder_input_ids).logits
    torch.save({"inputs": source_batch, "decoder_input_ids": decoder_input_ids}, tmp_path / "inputs.pt")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["vaswani_transformer"] = None  # the package must not be importable
        import torch
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path / "model")!r}, trust_remote_code=True).eval()
        assert "vaswani_transformer" not in type(model).__module__.split(".")[0], type(model).__module__
        data = torch.load({str(tmp_path / "inputs.pt")!r})
        logits = model(**data["inputs"], decoder_input_ids=data["decoder_input_ids"]).logits
        torch.save(logits, {str(tmp_path / "logits.pt")!r})
        """
    )
    subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        cwd=tmp_path,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf")},
    )
    torch.testing.assert_close(torch.load(tmp_path / "logits.pt"), expected, rtol=0, atol=0)


def test_normal_initialisation_draws_every_projection_and_the_shared_table_from_n_0_002() -> None:
    """The default ("normal", as transformers' Marian/BART): N(0, init_std) everywhere, pad row zero, biases 0."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=4000, d_model=64, d_ff=256))
    embeddings = model.model.encoder.embed_tokens.weight
    assert embeddings[1:].std().item() == pytest.approx(0.02, rel=0.05)
    assert embeddings[0].abs().max() == 0  # padding row
    layer = model.model.decoder.layers[0]
    for weight in (
        layer.self_attn.q_proj.weight,
        layer.encoder_attn.out_proj.weight,
        layer.feed_forward.fc2.weight,
    ):
        assert weight.mean().abs().item() < 0.002 and weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert layer.feed_forward.fc1.bias.abs().max() == 0


def test_xavier_initialisation_is_fairseqs() -> None:
    """init_scheme="xavier": tied embeddings N(0, d_model^-0.5) (not re-initialised as the lm_head Linear)."""
    torch.manual_seed(0)
    config = tiny_config(vocab_size=4000, d_model=64, init_scheme="xavier")
    model = VaswaniTransformerForConditionalGeneration(config)
    embeddings = model.model.encoder.embed_tokens.weight
    assert embeddings[1:].std().item() == pytest.approx(64**-0.5, rel=0.05)
    assert embeddings[0].abs().max() == 0  # padding row
    q_proj = model.model.decoder.layers[0].self_attn.q_proj.weight
    xavier_bound = math.sqrt(6 / (64 + 64))
    assert q_proj.abs().max() <= xavier_bound and q_proj.std().item() == pytest.approx(
        xavier_bound / math.sqrt(3), rel=0.1
    )
