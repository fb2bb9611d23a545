"""The typed KV cache, and beam search that shares each sentence's memory among its beams."""

import pytest
import torch

from attnlab.model import (
    POS_ENCODINGS,
    KVCache,
    LayerCache,
    SelfAttentionCache,
    Transformer,
)
from attnlab.model.decoding import (
    _forbid_specials,
    _next_logprobs,
    _pad_rows,
    beam_search,
    gnmt_length_penalty,
    max_output_lengths,
)
from model_utils import tiny

V, BOS, EOS, PAD = 30, 2, 3, 0


def model_for(pe="sinusoidal", seed=0, **overrides):
    torch.manual_seed(seed)
    return Transformer(tiny(vocab_size=V, pos_encoding=pe, max_len=128, **overrides)).eval()


def source(b=3, s=6, seed=1):
    src = torch.randint(4, V, (b, s), generator=torch.Generator().manual_seed(seed))
    src[1, 4:] = PAD
    return src


def test_the_cache_holds_named_keys_and_values_per_layer():
    model, src = model_for(), source()
    memory, mask = model.encode(src)
    cache = model.new_cache()
    model.decode(torch.full((3, 2), BOS), memory, mask, cache)
    model.decode(torch.full((3, 1), BOS), memory, mask, cache)
    assert cache.length == 3 and len(cache.layers) == 2
    layer = cache.layers[1]
    assert isinstance(layer, LayerCache) and isinstance(layer.self_attn, SelfAttentionCache)
    assert layer.self_attn.k.shape == layer.self_attn.v.shape == (3, 4, 3, 8)  # (B, H, T, d_k)
    assert layer.cross_attn.k.shape == (3, 4, 6, 8)  # (B, H, S, d_k)


def test_reorder_moves_self_attention_rows_and_leaves_cross_attention_alone():
    cache = KVCache(1)
    layer = cache.layers[0]
    layer.self_attn.extend(torch.arange(4.0).view(4, 1, 1, 1), -torch.arange(4.0).view(4, 1, 1, 1))
    cross_k, cross_v = torch.randn(2, 1, 5, 1), torch.randn(2, 1, 5, 1)
    layer.cross_attn.keys_values(lambda: (cross_k, cross_v))
    cache.reorder(torch.tensor([1, 1, 3, 2]))
    assert layer.self_attn.k.flatten().tolist() == [1.0, 1.0, 3.0, 2.0]
    assert layer.self_attn.v.flatten().tolist() == [-1.0, -1.0, -3.0, -2.0]
    assert layer.cross_attn.k is cross_k and layer.cross_attn.v is cross_v


@pytest.mark.parametrize("use_cache", [True, False])
def test_decoding_against_shared_memory_equals_repeated_memory(use_cache):
    model, src = model_for(), source()
    memory, mask = model.encode(src)
    tgt = torch.randint(4, V, (3 * 4, 5), generator=torch.Generator().manual_seed(2))

    def logits(memory, mask):
        if not use_cache:
            return model.decode(tgt, memory, mask)
        cache = model.new_cache()
        return torch.cat(
            [model.decode(tgt[:, i : i + 1], memory, mask, cache) for i in range(5)], 1
        )

    shared = logits(memory, mask)  # 3 memory rows for 12 target rows
    repeated = logits(memory.repeat_interleave(4, 0), mask.repeat_interleave(4, 0))
    assert (shared - repeated).abs().max() <= 1e-5
    with model.record_attention():
        model.decode(tgt, memory, mask)
        assert model.attention_weights()["decoder.layers.0.cross_attn"].shape == (12, 4, 5, 6)


def test_memory_rows_must_divide_the_target_rows():
    model, src = model_for(), source()
    memory, mask = model.encode(src)
    with pytest.raises(ValueError, match="cannot share keys"):
        model.decode(torch.full((4, 1), BOS), memory, mask)


class RecordingCache(KVCache):
    """Notes the cross-attention tensors at every reorder."""

    def __init__(self, n_layers):
        super().__init__(n_layers)
        self.seen = []

    def reorder(self, index):
        self.seen.append([(c.cross_attn.k, c.cross_attn.v) for c in self.layers])
        super().reorder(index)


def test_beam_search_projects_cross_attention_once_and_never_reindexes_it(monkeypatch):
    model, src = model_for(), source()
    caches = []

    def new_cache():
        caches.append(RecordingCache(len(model.decoder.layers)))
        return caches[-1]

    monkeypatch.setattr(model, "new_cache", new_cache)
    beam_search(model, src, BOS, EOS, beam_size=4, max_len_b=6)
    seen = caches[0].seen
    assert len(seen) >= 3
    for layer in range(2):
        k, v = seen[0][layer]
        assert k.shape == (3, 4, 6, 8)  # one row per sentence, not per beam
        for step in seen[1:]:
            assert step[layer][0].data_ptr() == k.data_ptr()
            assert step[layer][1].data_ptr() == v.data_ptr()


@torch.no_grad()
def old_beam_search(model, src, bos_id, eos_id, beam_size, length_penalty, max_len_a, max_len_b):
    """The algorithm before the memory was shared: memory repeated K times, every cached tensor
    (cross-attention included) re-indexed at every step."""
    pad_id = model.config.pad_id
    b, k, device = src.size(0), beam_size, src.device
    limits = max_output_lengths(src, pad_id, max_len_a, max_len_b)
    memory, memory_mask = model.encode(src)
    memory = memory.repeat_interleave(k, dim=0)
    memory_mask = memory_mask.repeat_interleave(k, dim=0)
    cache = model.new_cache()
    tokens = torch.full((b * k, 1), bos_id, dtype=torch.long, device=device)
    scores = torch.full((b, k), float("-inf"), device=device)
    scores[:, 0] = 0.0
    finished = [[] for _ in range(b)]
    done = [False] * b
    rows = torch.arange(b, device=device)
    for step in range(int(limits.max())):
        length = step + 1
        logp = _forbid_specials(
            _next_logprobs(model, tokens[:, -1:], memory, memory_mask, cache), pad_id, bos_id
        )
        vocab = logp.size(-1)
        logp = logp.view(b, k, vocab)
        at_limit = length >= limits
        if at_limit.any():
            eos_only = torch.full_like(logp[0], float("-inf"))
            eos_only[:, eos_id] = 0.0
            logp = torch.where(at_limit[:, None, None], logp + eos_only, logp)
        cand = (scores.unsqueeze(-1) + logp).view(b, k * vocab)
        top_scores, top_idx = cand.topk(2 * k, dim=1)
        top_beam, top_tok = top_idx // vocab, top_idx % vocab
        is_eos = top_tok.eq(eos_id)
        lp = gnmt_length_penalty(length, length_penalty)
        for i, j in (is_eos[:, :k] & torch.isfinite(top_scores[:, :k])).nonzero().tolist():
            if not done[i]:
                prefix = tokens[i * k + top_beam[i, j], 1:].tolist()
                finished[i].append((top_scores[i, j].item() / lp, prefix + [eos_id]))
        for i in range(b):
            if not done[i] and (len(finished[i]) >= k or bool(at_limit[i])):
                done[i] = True
        if all(done):
            break
        live = top_scores.masked_fill(is_eos, float("-inf"))
        scores, pick = live.topk(k, dim=1)
        beam, tok = top_beam.gather(1, pick), top_tok.gather(1, pick)
        origin = (rows[:, None] * k + beam).view(-1)
        tokens = torch.cat([tokens[origin], tok.view(-1, 1)], dim=1)
        for layer in cache.layers:
            layer.self_attn.reorder(origin)
            memory_cache = layer.cross_attn  # re-indexed too (the memory was repeated)
            memory_cache.k = memory_cache.k.index_select(0, origin)
            memory_cache.v = memory_cache.v.index_select(0, origin)
    best = [max(hyps, key=lambda h: h[0])[1] if hyps else [] for hyps in finished]
    return _pad_rows(best, pad_id, device)


@pytest.mark.parametrize("pe", POS_ENCODINGS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_finds_what_the_old_algorithm_found(pe, seed):
    model, src = model_for(pe, seed=seed), source(b=4, seed=seed + 10)
    kw = dict(beam_size=4, length_penalty=0.6, max_len_a=1.0, max_len_b=5)
    old = old_beam_search(model, src, BOS, EOS, **kw)
    assert torch.equal(beam_search(model, src, BOS, EOS, **kw), old)
    assert torch.equal(beam_search(model, src, BOS, EOS, use_cache=False, **kw), old)
