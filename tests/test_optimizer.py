"""The optimizer: weight decay on matrices and embeddings only; fused, foreach and the plain
loop make the same update."""

from __future__ import annotations

import pytest
import torch

from attnlab.model import Transformer, TransformerConfig
from attnlab.training.optimizer import decay_groups, implementation, optimizer_from_config

OPTIM = {"name": "adamw", "lr": 1e-3, "betas": [0.9, 0.98], "eps": 1e-9, "weight_decay": 0.1}


def _model(**kwargs) -> Transformer:
    torch.manual_seed(0)
    cfg = dict(vocab_size=13, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1)
    return Transformer(TransformerConfig(**{**cfg, "n_decoder_layers": 1, **kwargs}))


@pytest.mark.parametrize("pos_encoding", ["learned", "sinusoidal"])
def test_adamw_decays_matrices_and_embeddings_only(pos_encoding):
    """With zero gradients AdamW's update is the decay alone: p <- p * (1 - lr * wd)."""
    model = _model(pos_encoding=pos_encoding, norm_position="pre", share_embeddings=False)
    for p in model.parameters():
        p.data.add_(0.5)  # no parameter starts at 0 (biases do), so decay would show
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = optimizer_from_config(model, OPTIM)
    for g in optimizer.param_groups:
        g["lr"] = 0.5
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    decayed = set()
    for name, p in model.named_parameters():
        if torch.allclose(p, before[name] * (1 - 0.5 * 0.1)):
            decayed.add(name)
        else:
            assert torch.equal(p, before[name]), name
    expected = {n for n, p in model.named_parameters() if n.endswith("weight") and p.dim() == 2}
    expected -= {n for n in expected if "positions" in n}  # learned positional table
    assert decayed == expected
    assert "encoder.embeddings.table.weight" in decayed and "generator.weight" in decayed
    assert not [n for n in decayed if "norm" in n or n.endswith("bias")]


def test_tied_embedding_is_one_decayed_parameter():
    model = _model(share_embeddings=True)
    decay, rest = decay_groups(model, 0.1)
    ids = [id(p) for p in decay["params"] + rest["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    assert id(model.generator.weight) in {id(p) for p in decay["params"]}


def _updated(implementation_keys: dict, steps: int = 5) -> dict:
    """The parameters after `steps` updates with the same gradient sequence (drawn, not
    computed: a gradient that is float noise, such as a key bias's, would make Adam's
    normalized step differ by its sign between runs, whatever the implementation)."""
    model = _model()
    optimizer = optimizer_from_config(model, {**OPTIM, **implementation_keys})
    for g in optimizer.param_groups:
        g["lr"] = 1e-3
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen) * 1e-2
        optimizer.step()
    return {n: p.detach() for n, p in model.named_parameters()}


def test_fused_foreach_and_loop_make_the_same_update():
    loop = _updated({"fused": False, "foreach": False})
    start = {n: p.detach() for n, p in _model().named_parameters()}
    assert all((loop[n] - start[n]).abs().max() > 1e-4 for n in loop)  # every one moved
    for keys in ({"fused": True}, {"foreach": True}, {}):
        other = _updated(keys)
        for name, p in loop.items():
            torch.testing.assert_close(other[name], p, rtol=1e-6, atol=1e-7, msg=f"{keys} {name}")


def test_the_default_is_fused_where_torch_supports_it():
    params = list(_model().parameters())
    assert implementation(params, None, None) == {"fused": True}  # CPU has fused Adam
    assert implementation(params, None, True) == {"foreach": True}
    assert implementation([torch.zeros(2, dtype=torch.long)], None, None) == {}


def test_fused_and_foreach_together_are_a_config_error(compose):
    from attnlab.config.validate import validate_config

    with pytest.raises(ValueError, match=r"^optim.fused=true and optim.foreach=true cannot"):
        validate_config(compose(["optim.fused=true", "optim.foreach=true"]))


def sgd_for(model, name="sgd", betas=(0.0, 0.0), eps=0.0, weight_decay=0.0, fused=None,
            foreach=None, grad_scaler=False):  # fmt: skip
    """A builder with build_optimizer's arguments, for the `_target_` test below."""
    return torch.optim.SGD(model.parameters(), lr=1.0, weight_decay=weight_decay)


def test_the_optim_group_names_its_builder_by_target():
    model = _model()
    default = optimizer_from_config(model, {k: v for k, v in OPTIM.items() if k != "name"})
    assert isinstance(default, torch.optim.Adam)  # no _target_: build_optimizer (old configs)
    named = optimizer_from_config(model, {**OPTIM, "_target_": f"{__name__}.sgd_for"})
    assert isinstance(named, torch.optim.SGD) and named.defaults["weight_decay"] == 0.1
