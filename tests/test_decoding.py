"""Greedy and beam search: beam 1 is greedy, cached decoding equals uncached, limits hold; the
same for beam search continuing a decoder-only model's prompt."""

import pytest
import torch

from attnlab.model import POS_ENCODINGS, Transformer
from attnlab.model.decoding import (
    beam_continue,
    beam_search,
    generate,
    gnmt_length_penalty,
    greedy_decode,
)
from model_utils import tiny

V, BOS, EOS, PAD = 30, 2, 3, 0


def model_for(pe="sinusoidal", arch="encoder_decoder", seed=0):
    torch.manual_seed(seed)
    return Transformer(tiny(vocab_size=V, arch=arch, pos_encoding=pe, max_len=128)).eval()


def source(b=3, s=6):
    src = torch.randint(4, V, (b, s), generator=torch.Generator().manual_seed(1))
    src[1, 4:] = PAD
    return src


@pytest.mark.parametrize("pe", POS_ENCODINGS)
def test_cached_decoding_gives_the_same_tokens(pe):
    model, src = model_for(pe), source()
    assert torch.equal(
        greedy_decode(model, src, BOS, EOS, 12, use_cache=True),
        greedy_decode(model, src, BOS, EOS, 12, use_cache=False),
    )
    kw = dict(beam_size=3, max_len_a=1.0, max_len_b=4)
    assert torch.equal(
        beam_search(model, src, BOS, EOS, use_cache=True, **kw),
        beam_search(model, src, BOS, EOS, use_cache=False, **kw),
    )


def test_cached_logits_match_full_forward():
    model, src = model_for("rope"), source()
    tgt = torch.randint(4, V, (3, 7), generator=torch.Generator().manual_seed(5))
    full = model(src, tgt)
    memory, mask = model.encode(src)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, i : i + 1], memory, mask, cache) for i in range(7)]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_one_equals_greedy(seed):
    model, src = model_for(seed=seed), source()
    greedy = greedy_decode(model, src, BOS, EOS, max_len=src.ne(PAD).sum(1) + 5)
    beam = beam_search(model, src, BOS, EOS, beam_size=1, max_len_a=1.0, max_len_b=5)
    width = max(greedy.size(1), beam.size(1))
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.size(1)), value=PAD)  # noqa: E731
    assert torch.equal(pad(greedy), pad(beam))


def test_beam_search_respects_the_length_limit():
    model, src = model_for(), source()
    out = beam_search(model, src, BOS, EOS, beam_size=4, max_len_a=0.5, max_len_b=2)
    limits = (0.5 * src.ne(PAD).sum(1).float() + 2).long()
    lengths = out.ne(PAD).sum(1)
    assert (lengths <= limits).all()
    assert (out.gather(1, (lengths - 1)[:, None]).squeeze(1) == EOS).all()


def test_beam_search_finds_a_better_sequence_than_greedy_on_average():
    # with length penalty 0 the beam maximizes log p(Y|X); its score is never below greedy's
    model, src = model_for(seed=3), source(b=4)

    def logprob(out):
        tgt_in = torch.cat([torch.full((out.size(0), 1), BOS), out[:, :-1]], dim=1)
        logp = torch.log_softmax(model(src, tgt_in), -1).gather(2, out[:, :, None]).squeeze(2)
        return (logp * out.ne(PAD)).sum(1)

    greedy = greedy_decode(model, src, BOS, EOS, max_len=src.ne(PAD).sum(1) + 3)
    beam = beam_search(model, src, BOS, EOS, beam_size=5, length_penalty=0.0, max_len_b=3)
    assert (logprob(beam) >= logprob(greedy) - 1e-4).all()


def test_gnmt_length_penalty():
    assert gnmt_length_penalty(1, 0.6) == 1.0
    assert gnmt_length_penalty(10, 0.6) == pytest.approx((15 / 6) ** 0.6)


@pytest.mark.parametrize("pe", POS_ENCODINGS)
def test_generate_cached_equals_uncached(pe):
    model = model_for(pe, arch="decoder_only")
    prompt = torch.randint(4, V, (2, 5), generator=torch.Generator().manual_seed(0))
    a = generate(model, prompt, 8, use_cache=True)
    b = generate(model, prompt, 8, use_cache=False)
    assert a.shape == (2, 13) and torch.equal(a, b)
    assert torch.equal(a[:, :5], prompt)


def _greedy_by_full_forward(model, prompt, max_len):
    """The oracle: argmax over the whole sequence recomputed at every step (no cache), PAD and
    BOS forbidden, EOS forced at the limit, as the beam search's rules."""
    rows = []
    for p in prompt:
        seq = p.tolist()
        out = []
        for step in range(max_len):
            logits = model(torch.tensor([seq]))[0, -1]
            logits[[PAD, BOS]] = float("-inf")
            tok = EOS if step + 1 == max_len else int(logits.argmax())
            out.append(tok)
            seq.append(tok)
            if tok == EOS:
                break
        rows.append(out)
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


@pytest.mark.parametrize("pe", ["sinusoidal", "rope", "alibi"])
def test_beam_continue_with_one_beam_is_greedy_over_the_whole_sequence(pe):
    model = model_for(pe, arch="decoder_only", seed=4)
    prompt = torch.randint(4, V, (3, 5), generator=torch.Generator().manual_seed(2))
    out = beam_continue(model, prompt, BOS, EOS, beam_size=1, max_len=6)
    assert torch.equal(out, _greedy_by_full_forward(model, prompt, 6))


def test_beam_continue_decodes_each_prompt_as_if_alone():
    # the K copies of each prompt's cache stay with their prompt through every reorder
    model = model_for("rope", arch="decoder_only", seed=5)
    prompt = torch.randint(4, V, (4, 6), generator=torch.Generator().manual_seed(3))
    together = beam_continue(model, prompt, BOS, EOS, beam_size=3, max_len=7)
    for i in range(4):
        alone = beam_continue(model, prompt[i : i + 1], BOS, EOS, beam_size=3, max_len=7)
        n = alone.size(1)
        assert torch.equal(together[i, :n], alone[0]) and (together[i, n:] == PAD).all()
    lengths = together.ne(PAD).sum(1)
    assert (lengths <= 7).all() and (together.gather(1, lengths[:, None] - 1) == EOS).all()


def test_beam_continue_scores_at_least_greedy():
    model = model_for("sinusoidal", arch="decoder_only", seed=6)
    prompt = torch.randint(4, V, (4, 4), generator=torch.Generator().manual_seed(4))

    def logprob(out):
        seq = torch.cat([prompt, out], dim=1)
        logp = torch.log_softmax(model(seq[:, :-1]), -1)[:, prompt.size(1) - 1 :]
        return (logp.gather(2, out[:, :, None]).squeeze(2) * out.ne(PAD)).sum(1)

    greedy = beam_continue(model, prompt, BOS, EOS, beam_size=1, length_penalty=0.0, max_len=5)
    beam = beam_continue(model, prompt, BOS, EOS, beam_size=5, length_penalty=0.0, max_len=5)
    assert (logprob(beam) >= logprob(greedy) - 1e-4).all()
