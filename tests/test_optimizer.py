"""The optimizer: weight decay on matrices and embeddings only; fused, foreach and the plain
loop make the same update."""

from __future__ import annotations

import pytest
import torch

from attnlab.model import Transformer, TransformerConfig
from attnlab.training.optimizer import check_optimizer, decay_groups, optimizer_from_config
from build_utils import dry_build

OPTIM = {"_target_": "torch.optim.AdamW", "betas": [0.9, 0.98], "eps": 1e-9, "weight_decay": 0.1}


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
    """Both null: fused where torch's own check (at a fused step) accepts the parameters' device
    and dtype, else torch's default; a given choice is kept; never fused under 16-mixed's
    GradScaler. Fails if torch stops refusing at the step, or stops fusing on a CPU."""
    model = _model()
    assert optimizer_from_config(model, OPTIM).defaults["fused"] is True  # CPU has fused Adam
    chosen = optimizer_from_config(model, {**OPTIM, "foreach": True}).defaults
    assert chosen["foreach"] is True and not chosen["fused"]
    assert not optimizer_from_config(model, OPTIM, grad_scaler=True).defaults["fused"]
    on_meta = torch.nn.Parameter(torch.zeros(2, device="meta"))  # no fused kernels there
    on_meta.grad = torch.zeros_like(on_meta)
    with pytest.raises(RuntimeError, match="fused=True"):
        torch.optim.AdamW([on_meta], fused=True).step()  # the check _fuses relies on
    assert not optimizer_from_config([{"params": [on_meta]}], OPTIM).defaults["fused"]


def test_fused_and_foreach_together_are_a_config_error(compose):

    with pytest.raises(ValueError, match=r"^optim.fused=true and optim.foreach=true cannot"):
        dry_build(compose(["optim.fused=true", "optim.foreach=true"]))


def test_the_optim_group_names_any_torch_optimizer_by_target():
    """optim._target_ is the optimizer's class; its other keys are the class's arguments; the
    decay groups are the same whatever the class."""
    model = _model()
    sgd = optimizer_from_config(model, {"_target_": "torch.optim.SGD", "momentum": 0.9,
                                        "weight_decay": 0.1})  # fmt: skip
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == 0.9
    assert [g["weight_decay"] for g in sgd.param_groups] == [0.1, 0.0]
    assert all(g["lr"] == 1.0 for g in sgd.param_groups)  # the schedule's factor is the rate


@pytest.mark.parametrize(
    ("optim", "message"),
    [
        ({**OPTIM, "eps": -1.0}, r"^optim.eps=-1.0 is not valid; expected a number >= 0$"),
        ({**OPTIM, "lr": 0.5}, r"^optim.lr is not an argument here; .* use scheduler.peak_lr$"),
        ({**OPTIM, "betas": [0.9]}, r"^optim.betas=\[0.9\] is not valid; expected 2 numbers$"),
        ({"_target_": "torch.optim.SGD", "momentum": -1.0},
         r"^optim \(torch.optim.SGD\) is not valid: Invalid momentum value: -1.0$"),
        ({**OPTIM, "amsgrad": "yes", "nesterov": True},
         r"^optim \(torch.optim.AdamW\) is not valid: .*unexpected keyword argument 'nesterov'"),
    ],
)  # fmt: skip
def test_the_optimizer_checks_its_arguments_in_one_line_naming_the_key(optim, message):
    with pytest.raises(ValueError, match=message):
        check_optimizer(optim)
