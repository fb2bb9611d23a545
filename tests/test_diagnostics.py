"""The instability diagnostics (attnlab.training.diagnostics): the attention logits they read
are Eq. 1's, the largest one grows with the learning rate, and qk_norm bounds it."""

import pytest
import torch

from attnlab.model import AttentionContext, MultiHeadAttention, Transformer
from attnlab.training.diagnostics import layer_grad_norms, layer_parameters, probe
from attnlab.training.losses import label_smoothed_nll, z_loss
from model_utils import PAD, tiny, tokens


def test_scores_are_eq1_logits_whose_softmax_is_the_reference_weights():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 5, 32)
    pads = torch.zeros(2, 5, dtype=torch.bool)
    pads[0, 3:] = True
    ctx = AttentionContext(key_padding_mask=pads)
    q, k = (lin(x).view(2, 5, 4, 8).transpose(1, 2) for lin in (mha.w_q, mha.w_k))
    by_hand = (q @ k.transpose(-2, -1)) / 8**0.5
    scores = mha.scores(x, ctx=ctx)
    assert torch.isinf(scores[0, :, :, 3:]).all() and torch.isfinite(scores[1]).all()
    assert torch.allclose(scores[0, :, :, :3], by_hand[0, :, :, :3], atol=1e-6)
    _, weights = mha(x, ctx=AttentionContext(key_padding_mask=pads, need_weights=True))
    assert torch.allclose(torch.softmax(scores, dim=-1), weights, atol=1e-6)


def test_probe_reads_every_attention_module_and_log_z():
    torch.manual_seed(0)
    model = Transformer(tiny()).eval()
    src, tgt = tokens(3, 6), tokens(3, 5, seed=1)
    tgt[0, 3:] = PAD
    values = probe(model, lambda: model(src, tgt), tgt, PAD)
    modules = {n for n, _ in model.attention_modules()}
    assert {k.split("/", 1)[1] for k in values if k.startswith("attn_logit_max/")} == modules
    assert values["attn_logit_max"] == max(values[f"attn_logit_max/{n}"] for n in modules)
    with torch.no_grad():
        log_z = torch.logsumexp(model(src, tgt), dim=-1)[tgt != PAD].mean()
    assert values["log_z"] == pytest.approx(float(log_z), rel=1e-5)
    model.train()  # probe evaluates in eval mode and restores the mode it found
    probe(model, lambda: model(src, tgt), tgt, PAD)
    assert model.training


def test_layer_grad_norms_split_the_gradient_by_encoder_and_decoder_layer():
    """Every layer of both stacks, in order; each norm is that layer's parameters' gradient norm
    (by hand); the squares of the layers' and of the rest (embeddings, final norms) add up to
    the whole model's."""
    torch.manual_seed(0)
    model = Transformer(tiny(n_encoder_layers=3))
    src, tgt = tokens(3, 6), tokens(3, 5, seed=1)
    loss, _, _ = label_smoothed_nll(model(src, tgt), tgt, 0.0, PAD)
    loss.backward()
    layers = layer_parameters(model)
    names = [n for n, _ in layers]
    assert names == [f"encoder.layers.{i}" for i in range(3)] + [
        "decoder.layers.0",
        "decoder.layers.1",
    ]
    norms = layer_grad_norms(layers)
    for name, params in layers:
        by_hand = torch.cat([p.grad.flatten() for p in params]).norm()
        assert float(norms[name]) == pytest.approx(float(by_hand), rel=1e-5)
    in_layers = {id(p) for _, params in layers for p in params}
    rest = [
        p.grad.flatten()
        for p in model.parameters()
        if id(p) not in in_layers and p.grad is not None
    ]
    total = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).norm()
    summed = sum(float(v) ** 2 for v in norms.values()) + float(torch.cat(rest).norm()) ** 2
    assert summed == pytest.approx(float(total) ** 2, rel=1e-4)


def _trained_logit_max(lr: float, qk_norm: bool, steps: int = 30) -> float:
    """Post-LN tiny model trained on reverse for `steps` Adam steps at `lr`; its largest
    attention logit on the training batch."""
    torch.manual_seed(0)
    model = Transformer(tiny(qk_norm=qk_norm, norm_position="post"))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    src = tokens(16, 8, seed=2)
    tgt_out = torch.flip(src, [1])
    tgt_in = torch.cat([torch.full((16, 1), 2), tgt_out[:, :-1]], dim=1)
    for _ in range(steps):
        loss, _, _ = label_smoothed_nll(model(src, tgt_in), tgt_out, 0.0, PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return probe(model, lambda: model(src, tgt_in), tgt_out, PAD)["attn_logit_max"]


@pytest.mark.slow
def test_a_higher_learning_rate_grows_the_largest_attention_logit_and_qk_norm_bounds_it():
    """Dehghani et al. (2023), Wortsman et al. (2023): attention logits grow with the learning
    rate (here 8 -> about 80 from lr 1e-3 to 5e-2 in 30 steps); with qk_norm the logits are
    dot products of unit-scale vectors over sqrt(d_k), and stay near sqrt(d_k) = 2.8 (4.5 here)."""
    low, high = _trained_logit_max(1e-3, False), _trained_logit_max(5e-2, False)
    assert high > 5 * low
    assert _trained_logit_max(5e-2, True) < 10 < high


def test_z_loss_is_the_mean_square_log_partition_over_real_targets():
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 4, 7), torch.randint(1, 7, (2, 4))
    targets[1, 2:] = PAD
    penalty, mean_log_z = z_loss(logits, targets, PAD)
    log_z = torch.logsumexp(logits, dim=-1)[targets != PAD]
    assert penalty == pytest.approx(float(log_z.square().mean()), rel=1e-6)
    assert mean_log_z == pytest.approx(float(log_z.mean()), rel=1e-6)
    logits.requires_grad_(True)
    z_loss(logits, targets, PAD)[0].backward()
    assert logits.grad[1, 2:].eq(0).all()  # pads get no gradient
