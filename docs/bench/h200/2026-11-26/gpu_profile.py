"""Where the GPU time of a compiled bf16 base-model step goes, attnlab and torch.nn: the top kernels
by self CUDA time over 5 profiled steps (after compile and warm-up). argv: OUT dir, then overrides."""
import sys, time, torch
from attnlab.bench.context import build_context
from attnlab.bench.training_step import Stepper
from attnlab.bench.torch_nn import TorchNNTransformer
out = sys.argv[1]
ctx = build_context(sys.argv[2:], "cuda", n_batches=4)
for who in ("attnlab", "torch_nn"):
    model = ctx.new_model() if who == "attnlab" else TorchNNTransformer(ctx.model_config).cuda()
    model.compile()
    st = Stepper(ctx, model, compiled=True)
    st.warm_up()
    bs = ctx.step_batches(5)
    torch.cuda.synchronize(); t = time.perf_counter()
    for b in bs: st.step(b)
    torch.cuda.synchronize(); ms = (time.perf_counter() - t) / 5 * 1000
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        for b in bs: st.step(b)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=40, max_name_column_width=90)
    with open(f"{out}/profile-compiled-{who}.txt", "w") as f:
        f.write(f"{who} compiled ms/step {ms:.2f} ({torch.cuda.get_device_name()})\n{table}\n")
    print(who, "compiled ms/step", round(ms, 2)); print(table[:6000])
    del model, st; torch.cuda.empty_cache()
