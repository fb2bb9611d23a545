"""What torch.compile's graph of the model keeps for the backward pass: the shapes that make its
CPU backend fast (docs/benchmark.md, the compiled step against torch.nn)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlab.model.layers import PositionwiseFeedForward


def _saved_dtypes(fn, x: torch.Tensor) -> list[torch.dtype]:
    """The dtypes of the tensors the compiled forward of fn(x) saves for its backward, with
    AOT autograd's partitioner (the one Inductor uses) and no C++ compilation."""
    saved: list[torch.dtype] = []

    def pack(t):
        saved.append(t.dtype)
        return t

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="aot_eager_decomp_partition")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        compiled(x).sum()
    torch._dynamo.reset()
    return saved


@pytest.mark.slow
def test_the_compiled_ffn_keeps_the_relu_output_not_a_bool_mask():
    """On (B, T, d_model) positions, Linear -> ReLU -> Linear written on the 3-D tensor makes
    the partitioner save a bool mask of the activation (torch.nn's layers do), which the CPU
    backend stores slowly; the FFN on flattened rows saves only float tensors."""
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(16, 32)
    x = torch.randn(4, 5, 16, requires_grad=True)
    on_positions = lambda h: ffn.w_2(F.relu(ffn.w_1(h)))  # noqa: E731 (the 3-D form)
    assert torch.bool in _saved_dtypes(on_positions, x)  # the control: the pattern is real
    assert torch.bool not in _saved_dtypes(ffn, x)
    torch.testing.assert_close(ffn(x), on_positions(x))  # the same function
    packed = x.detach().reshape(-1, 16)  # (N, d_model), as with ctx.packing
    torch.testing.assert_close(ffn(packed), on_positions(packed))
