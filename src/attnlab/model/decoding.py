"""Decoding: greedy, batched beam search (Sec. 6.1: beam 4, length penalty alpha = 0.6), the same
beam search continuing a decoder-only model's prompt, and sampling for decoder-only models.
All use incremental decoding: with `use_cache=True` the keys and values of earlier steps are kept
in a KVCache and only the newest token is fed to the decoder.

Outputs never contain the leading BOS; each row ends with EOS (unless cut by the length limit)
and is right-padded with PAD.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.model.transformer import Transformer


def _next_logprobs(model, inp, memory, memory_mask, cache) -> Tensor:
    logits = model.decode(inp, memory, memory_mask, cache)[:, -1]  # (N, V)
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp


def _forbid_specials(logp: Tensor, pad_id: int, bos_id: int) -> Tensor:
    logp[:, pad_id] = float("-inf")
    logp[:, bos_id] = float("-inf")
    return logp


def _pad_rows(rows: list[list[int]], pad_id: int, device) -> Tensor:
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), max(width, 1)), pad_id, dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.tensor(r, dtype=torch.long, device=device)
    return out


def max_output_lengths(src: Tensor, pad_id: int, max_len_a: float, max_len_b: int) -> Tensor:
    """The per-sentence limit a * src_len + b (fairseq's max_len_a / max_len_b). (B,) long."""
    src_len = src.ne(pad_id).sum(dim=1)
    return (max_len_a * src_len.float() + max_len_b).long().clamp(min=1)


@torch.no_grad()
def greedy_decode(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    max_len: int | Tensor,
    use_cache: bool = True,
) -> Tensor:
    """Pick argmax_y p(y | y_<t, x) at every step. src (B, S) -> tokens (B, L<=max_len).
    `max_len` (an int, or a (B,) tensor of per-sentence limits) counts the EOS, which is forced
    at the limit, as in beam_search."""
    pad_id = model.config.pad_id
    b, device = src.size(0), src.device
    if torch.is_tensor(max_len):
        limits = max_len.to(device)
    else:
        limits = torch.full((b,), int(max_len), device=device)
    memory, memory_mask = model.encode(src)
    cache = model.new_cache() if use_cache else None
    tokens = torch.full((b, 1), bos_id, dtype=torch.long, device=device)
    finished = torch.zeros(b, dtype=torch.bool, device=device)
    for step in range(int(limits.max())):
        inp = tokens[:, -1:] if use_cache else tokens
        logp = _forbid_specials(
            _next_logprobs(model, inp, memory, memory_mask, cache), pad_id, bos_id
        )
        nxt = logp.argmax(dim=-1)
        nxt = nxt.masked_fill(step + 1 >= limits, eos_id)  # the last allowed token is EOS
        nxt = nxt.masked_fill(finished, pad_id)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        finished |= nxt.eq(eos_id)
        if finished.all():
            break
    return tokens[:, 1:]


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """Wu et al. (2016), Eq. 14: lp(Y) = ((5 + |Y|) / (5 + 1))^alpha."""
    return ((5.0 + length) / 6.0) ** alpha


class _Beams:
    """Beam search state: B sentences x K hypotheses, flattened sentence-major into B * K
    decoder rows (row i * K + j is beam j of sentence i)."""

    def __init__(self, b: int, k: int, bos_id: int, eos_id: int, device):
        self.b, self.k, self.eos_id = b, k, eos_id
        self.tokens = torch.full((b * k, 1), bos_id, dtype=torch.long, device=device)  # BOS first
        self.scores = torch.full((b, k), float("-inf"), device=device)  # log p(Y|X) so far
        self.scores[:, 0] = 0.0  # all beams start identical: keep one
        self.finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
        self.done = [False] * b
        self.rows = torch.arange(b, device=device)

    def candidates(self, logp: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The best 2K one-token extensions of each sentence's beams, given logp (B, K, V):
        their scores, beams and tokens, each (B, 2K)."""
        vocab = logp.size(-1)
        cand = (self.scores.unsqueeze(-1) + logp).view(self.b, self.k * vocab)
        top_scores, top_idx = cand.topk(2 * self.k, dim=1)
        return top_scores, top_idx // vocab, top_idx % vocab

    def close(self, top_scores, top_beam, top_tok, lp: float, at_limit: Tensor) -> None:
        """Keep the hypotheses that end with EOS among the best K candidates, ranked by
        log p / lp; a sentence is done with K finished hypotheses or at its length limit."""
        k = self.k
        ended = top_tok[:, :k].eq(self.eos_id) & torch.isfinite(top_scores[:, :k])
        for i, j in ended.nonzero().tolist():
            if not self.done[i]:
                prefix = self.tokens[i * k + top_beam[i, j], 1:].tolist()
                self.finished[i].append((top_scores[i, j].item() / lp, prefix + [self.eos_id]))
        for i in range(self.b):
            if not self.done[i] and (len(self.finished[i]) >= k or bool(at_limit[i])):
                self.done[i] = True

    def advance(self, top_scores, top_beam, top_tok) -> Tensor:
        """Continue with the best K candidates that did not end. Returns the rows (B * K,) of
        the old beams they extend; each stays within its sentence."""
        live = top_scores.masked_fill(top_tok.eq(self.eos_id), float("-inf"))
        self.scores, pick = live.topk(self.k, dim=1)  # (B, K)
        beam, tok = top_beam.gather(1, pick), top_tok.gather(1, pick)
        origin = (self.rows[:, None] * self.k + beam).view(-1)
        self.tokens = torch.cat([self.tokens[origin], tok.view(-1, 1)], dim=1)
        return origin

    def best(self) -> list[list[int]]:
        return [max(hyps, key=lambda h: h[0])[1] if hyps else [] for hyps in self.finished]


def _beam_logprobs(model, inp, memory, memory_mask, cache, beams, at_limit, bos_id) -> Tensor:
    """log p(y | y_<t, x) of every beam, (B, K, V): PAD and BOS forbidden, and only EOS allowed
    for the sentences at their length limit (at_limit, (B,) bool)."""
    logp = _next_logprobs(model, inp, memory, memory_mask, cache)  # (B * K, V)
    logp = _forbid_specials(logp, model.config.pad_id, bos_id).view(beams.b, beams.k, -1)
    if at_limit.any():
        eos_only = torch.full_like(logp[0], float("-inf"))
        eos_only[:, beams.eos_id] = 0.0
        logp = torch.where(at_limit[:, None, None], logp + eos_only, logp)
    return logp


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    use_cache: bool = True,
) -> Tensor:
    """Batched beam search. Hypotheses are ranked by log p(Y|X) / lp(Y) (GNMT length penalty);
    a sentence is done once it has `beam_size` finished hypotheses; at its length limit
    (a * src_len + b) every live hypothesis is closed with EOS. src (B, S) -> tokens (B, L).

    The K beams of a sentence share its encoder memory: it is encoded and (with the cache)
    projected for cross-attention once, never repeated K times nor reordered."""
    limits = max_output_lengths(src, model.config.pad_id, max_len_a, max_len_b)  # (B,)
    memory, memory_mask = model.encode(src)  # (B, S, d_model), (B, S)
    cache = model.new_cache() if use_cache else None
    beams = _Beams(src.size(0), beam_size, bos_id, eos_id, src.device)
    return _search(model, beams, limits, memory, memory_mask, cache, length_penalty, bos_id)


@torch.no_grad()
def beam_continue(
    model: Transformer,
    prompt: Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_len: int = 50,
) -> Tensor:
    """Beam search for a decoder-only model: the continuations of `prompt` (B, P), all P tokens
    real (no padding), ranked as in beam_search, each at most `max_len` tokens (EOS included,
    forced at the limit). beam_size 1 is greedy. -> tokens (B, L), without the prompt.

    The prompt is read once per beam into the cache (K copies), then the beams advance one token
    per step from its last token, exactly as beam_search's from BOS."""
    b, k = prompt.size(0), beam_size
    cache = model.new_cache()
    if prompt.size(1) > 1:
        model.decode(prompt[:, :-1].repeat_interleave(k, dim=0), cache=cache)
    beams = _Beams(b, k, bos_id, eos_id, prompt.device)
    beams.tokens = prompt[:, -1:].repeat_interleave(k, dim=0)  # the prompt's last token first
    limits = torch.full((b,), max(1, int(max_len)), device=prompt.device)
    return _search(model, beams, limits, None, None, cache, length_penalty, bos_id)


def _search(model, beams, limits, memory, memory_mask, cache, length_penalty, bos_id) -> Tensor:
    """Advance `beams` until every sentence is done or at its limit (B,): the best hypothesis of
    each, (B, L) right-padded. Without a cache, every step reads all tokens so far."""
    for step in range(int(limits.max())):
        length = step + 1  # tokens generated including this one
        at_limit = length >= limits  # (B,) these sentences must end now
        inp = beams.tokens[:, -1:] if cache is not None else beams.tokens
        logp = _beam_logprobs(model, inp, memory, memory_mask, cache, beams, at_limit, bos_id)
        top = beams.candidates(logp)
        beams.close(*top, gnmt_length_penalty(length, length_penalty), at_limit)
        if all(beams.done):
            break
        origin = beams.advance(*top)
        if cache is not None:
            cache.reorder(origin)  # self-attention only
    return _pad_rows(beams.best(), model.config.pad_id, limits.device)


@torch.no_grad()
def generate(
    model: Transformer,
    prompt: Tensor,
    max_new_tokens: int,
    eos_id: int | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Decoder-only continuation of `prompt` (B, T) (unpadded). temperature 0 is greedy.
    Returns (B, T + n) with the prompt first."""
    tokens = prompt
    cache = model.new_cache() if use_cache else None
    inp = prompt
    finished = torch.zeros(prompt.size(0), dtype=torch.bool, device=prompt.device)
    for _ in range(max_new_tokens):
        logits = model.decode(inp, cache=cache)[:, -1].float()  # (B, V)
        if temperature <= 0.0:
            nxt = logits.argmax(dim=-1)
        else:
            logits = logits / temperature
            if top_k is not None:
                kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        if eos_id is not None:
            nxt = nxt.masked_fill(finished, model.config.pad_id)
            finished |= nxt.eq(eos_id)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        inp = nxt[:, None] if use_cache else tokens
        if eos_id is not None and finished.all():
            break
    return tokens
