"""Encoder and Decoder own their loops; per-forward tables are computed once; state_dict keys
stay stable; activation checkpointing changes no number."""

import inspect

import pytest
import torch

from attnlab.model import (
    ALiBi,
    Decoder,
    Encoder,
    RotaryEmbedding,
    Transformer,
)
from attnlab.model import stacks as stacks_module
from attnlab.model.layers import DecoderLayer
from model_utils import PAD, tiny, tokens


def test_the_transformer_composes_an_encoder_and_a_decoder():
    torch.manual_seed(0)
    model = Transformer(tiny()).eval()
    src, tgt = tokens(2, 6), tokens(2, 5, seed=1)
    src[0, 4:] = PAD
    assert isinstance(model.encoder, Encoder) and isinstance(model.decoder, Decoder)
    memory, mask = model.encoder(src)
    assert memory.shape == (2, 6, 32) and mask.tolist()[0] == [False] * 4 + [True] * 2
    hidden = model.decoder(tgt, memory, mask)
    assert hidden.shape == (2, 5, 32)
    assert torch.equal(model(src, tgt), model.generator(hidden))


def test_state_dict_keys_are_those_of_earlier_checkpoints():
    model = Transformer(tiny(pos_encoding="learned", norm_position="pre", n_decoder_layers=1))
    keys = set(model.state_dict())
    for key in (
        "encoder.embeddings.table.weight",
        "encoder.positions.embedding.weight",
        "encoder.layers.1.self_attn.w_q.weight",
        "encoder.layers.1.attn_block.norm.weight",
        "encoder.layers.1.ffn.w_2.bias",
        "encoder.final_norm.weight",
        "decoder.embeddings.table.weight",
        "decoder.layers.0.self_attn.w_o.bias",
        "decoder.layers.0.cross_attn.w_k.weight",
        "decoder.layers.0.self_block.norm.bias",
        "decoder.layers.0.cross_block.norm.weight",
        "decoder.layers.0.ffn_block.norm.weight",
        "decoder.final_norm.bias",
        "generator.weight",
    ):
        assert key in keys, key
    assert len(keys) == 67  # as before the stacks owned their loops
    names = {name for name, _ in model.attention_modules()}
    assert names == {
        "encoder.layers.0.self_attn",
        "encoder.layers.1.self_attn",
        "decoder.layers.0.self_attn",
        "decoder.layers.0.cross_attn",
    }


def test_the_decoder_layer_takes_no_padding_mask():
    assert "padding_mask" not in inspect.signature(DecoderLayer.forward).parameters


@pytest.mark.parametrize("pe, module", [("rope", RotaryEmbedding), ("alibi", ALiBi)])
def test_relative_position_tables_are_computed_once_per_stack_forward(monkeypatch, pe, module):
    calls = []
    real = module.forward
    monkeypatch.setattr(
        module, "forward", lambda self, *a, **k: calls.append(a) or real(self, *a, **k)
    )
    model = Transformer(tiny(pos_encoding=pe, n_encoder_layers=3, n_decoder_layers=3)).eval()
    model(tokens(2, 6), tokens(2, 5, seed=1))
    assert len(calls) == 2  # one for the encoder, one for the decoder, for 6 layers
    cache = model.new_cache()
    memory, mask = model.encode(tokens(2, 6))
    calls.clear()
    model.decode(tokens(2, 3), memory, mask, cache)
    model.decode(tokens(2, 1), memory, mask, cache)
    assert len(calls) == 2


def train_step(model, src, tgt, seed=0):
    model.zero_grad()
    torch.manual_seed(seed)
    logits = model(src, tgt) if model.encoder is not None else model(tgt)
    logits.square().mean().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_activation_checkpointing_changes_no_logit_or_gradient(arch, dropout):
    overrides = dict(arch=arch, dropout=dropout, attn_dropout=dropout, pos_encoding="rope")
    torch.manual_seed(0)
    plain = Transformer(tiny(**overrides)).train()
    torch.manual_seed(0)
    checkpointed = Transformer(tiny(activation_checkpointing=True, **overrides)).train()
    src, tgt = tokens(2, 6), tokens(2, 5, seed=1)
    src[1, 4:] = PAD
    logits, grads = train_step(plain, src, tgt)
    logits_ckpt, grads_ckpt = train_step(checkpointed, src, tgt)
    assert (logits - logits_ckpt).abs().max() <= 1e-6
    for name, grad in grads.items():
        assert (grad - grads_ckpt[name]).abs().max() <= 1e-6, name


def test_activation_checkpointing_wraps_each_layer_in_training_only(monkeypatch):
    wrapped = []
    real = stacks_module.checkpoint

    def spy(fn, *args, **kwargs):
        wrapped.append(type(fn).__name__)
        assert kwargs["use_reentrant"] is False
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(stacks_module, "checkpoint", spy)
    model = Transformer(tiny(activation_checkpointing=True, n_encoder_layers=3))
    src, tgt = tokens(2, 6), tokens(2, 5, seed=1)
    model.train()(src, tgt).sum().backward()
    assert wrapped == ["EncoderLayer"] * 3 + ["DecoderLayer"] * 2
    wrapped.clear()
    model.eval()(src, tgt)
    memory, mask = model.train().encode(src)  # training, but decoding with a cache
    wrapped.clear()
    model.decode(tgt[:, :1], memory, mask, model.new_cache())
    assert wrapped == []
