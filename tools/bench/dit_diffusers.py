#!/usr/bin/env python3
"""The reference side of `ditbatch bench dit`: diffusers' QwenImageTransformer2DModel, or with
--model qwen-image-2.1 its QwenImage21Transformer2DModel.

Same configuration names, sizes, step structure and JSON line as the C++ command, so
tools/bench/compare_dit.sh can put the two side by side:

    tools/golden/.venv/bin/python tools/bench/dit_diffusers.py --config small --size 256x256 \
        --text-tokens 20 --steps 3 --warmup 1 [--cfg] [--threads N]

On the CPU (the default) weights are float32; `--device cuda --dtype bfloat16` makes the model
directly on the GPU in bf16 (the full-size comparison: no checkpoint needed, no
host copy of the 20B parameters). Weights are torch's default initialisation under
torch.manual_seed(seed). A step is what QwenImagePipeline does per denoising step: one
transformer call (two with --cfg, the cond and negative passes); the text mask is None, as the
pipeline passes it when every prompt token is real. ms/forward = step time / forwards per
step. FLOPs follow the explicit count of QwenImageTransformer::forward_flops
(src/model/transformer.cpp). For 2.1 a step is what QwenImage21Pipeline does after its first:
a "cached" call against the text K/V its untimed first ("extract") call filled, one cache per
pass; FLOPs as QwenImage21Transformer::forward_flops(cached) (src/model/qwen_image_21/transformer.cpp).
"""

import argparse
import json
import os
import resource
import sys
import time

CONFIGS = {
    "tiny": dict(num_layers=2, attention_head_dim=32, num_attention_heads=2, joint_attention_dim=64,
                 axes_dims_rope=(8, 12, 12)),
    "small": dict(num_layers=4, attention_head_dim=64, num_attention_heads=8, joint_attention_dim=3584,
                  axes_dims_rope=(16, 24, 24)),
    "real": dict(num_layers=60, attention_head_dim=128, num_attention_heads=24, joint_attention_dim=3584,
                 axes_dims_rope=(16, 56, 56)),
}


CONFIGS_21 = {
    "tiny": dict(num_layers=2, attention_head_dim=32, num_attention_heads=2, context_in_dim=64, in_channels=16,
                 axes_dims_rope=(8, 12, 12)),
    "small": dict(num_layers=4, attention_head_dim=64, num_attention_heads=8, context_in_dim=4096, in_channels=64,
                  axes_dims_rope=(16, 24, 24)),
    "real": dict(num_layers=32, attention_head_dim=128, num_attention_heads=32, context_in_dim=4096, in_channels=64,
                 axes_dims_rope=(16, 56, 56)),
}


def forward_flops_21(cfg, S, L):
    """QwenImage21Transformer::forward_flops of a cached step: the image rows against L + S keys."""
    D = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    F = 3 * D
    per_block = 2.0 * S * (4.0 * D * D + 3.0 * D * F) + 2.0 * 2.0 * S * (S + L) * D
    return cfg["num_layers"] * per_block + 2.0 * S * D * 2 * cfg["in_channels"]


def forward_flops(cfg, S, L):
    """The count of QwenImageTransformer::forward_flops: 2 * M * N * K of every GEMM of a forward."""
    D = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    F = 4 * D
    tokens = S + L
    per_block = 2.0 * tokens * (4.0 * D * D + 2.0 * D * F) + 2.0 * 2.0 * tokens * tokens * D
    return cfg["num_layers"] * per_block + 2.0 * (S * 64 * D + L * cfg["joint_attention_dim"] * D + S * D * 64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="small", help="tiny | small | real | a JSON object")
    ap.add_argument("--model", default="qwen-image", help="qwen-image | qwen-image-2.1")
    ap.add_argument("--size", default="256x256", help="image size WxH in pixels (multiples of 16)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--text-tokens", type=int, default=20)
    ap.add_argument("--cfg", action="store_true", help="two forwards a step (true CFG)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: OMP_NUM_THREADS or nproc)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--dtype", default="float32", help="float32 | bfloat16")
    a = ap.parse_args()

    threads = a.threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or os.cpu_count()
    import torch  # imported after argparse so --help is quick
    import diffusers
    from diffusers import QwenImageTransformer2DModel

    torch.set_num_threads(threads)
    v21 = a.model == "qwen-image-2.1"
    configs = CONFIGS_21 if v21 else CONFIGS
    cfg = dict(configs[a.config]) if a.config in configs else json.loads(a.config)
    width, height = (int(v) for v in a.size.lower().split("x"))
    multiple = 32 if v21 else 16
    if width % multiple or height % multiple:
        sys.exit(f"--size {a.size}: width and height must be multiples of {multiple}")
    h, w = height // 16, width // 16
    S, L = h * w, a.text_tokens
    device, dtype = torch.device(a.device), getattr(torch, a.dtype)
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    torch.manual_seed(a.seed)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # parameters are made in this dtype, on this device
    with device:
        if v21:
            from diffusers import QwenImage21Transformer2DModel
            model = QwenImage21Transformer2DModel(patch_size=1, in_channels=cfg["in_channels"],
                                                  out_channels=cfg["in_channels"], num_layers=cfg["num_layers"],
                                                  attention_head_dim=cfg["attention_head_dim"],
                                                  num_attention_heads=cfg["num_attention_heads"],
                                                  context_in_dim=cfg["context_in_dim"], mlp_ratio=3,
                                                  axes_dims_rope=tuple(cfg["axes_dims_rope"]), eps=1e-6,
                                                  causal_condition=True)
        else:
            model = QwenImageTransformer2DModel(patch_size=2, in_channels=64, out_channels=16, guidance_embeds=False,
                                                num_layers=cfg["num_layers"],
                                                attention_head_dim=cfg["attention_head_dim"],
                                                num_attention_heads=cfg["num_attention_heads"],
                                                joint_attention_dim=cfg["joint_attention_dim"],
                                                axes_dims_rope=tuple(cfg["axes_dims_rope"]))
    torch.set_default_dtype(default_dtype)
    model = model.eval()
    sync()
    weights_s = time.perf_counter() - t0

    gen = torch.Generator().manual_seed(a.seed)
    channels = cfg["in_channels"] if v21 else 64
    latents = torch.randn((1, S, channels), generator=gen).to(device, dtype)
    text = torch.randn((1, L, cfg["context_in_dim" if v21 else "joint_attention_dim"]), generator=gen).to(device, dtype)
    img_shapes = [[(1, h, w)]]
    per_step = 2 if a.cfg else 1
    if v21:
        from diffusers.models.transformers.transformer_qwenimage21 import QwenImage21KVCache
        # The pipeline's img_mask for text to image: the text rows, then one slot per 2x2 latent group.
        img_mask = torch.cat([torch.zeros(1, L, dtype=torch.bool), torch.ones(1, S // 4, dtype=torch.bool)],
                             dim=1).to(device)
        caches = [QwenImage21KVCache(cfg["num_layers"]) for _ in range(per_step)]

    def step21(i, n, mode):
        tt = torch.tensor([1.0 - i / max(n, 1)], dtype=dtype, device=device)
        for cache in caches:
            model(hidden_states=latents, encoder_hidden_states=text, timestep=tt, img_shapes=img_shapes,
                  img_mask=img_mask, kv_cache=cache, kv_cache_mode=mode, return_dict=False)
        sync()

    def step(i, n):
        if v21:
            return step21(i, n, "cached")
        tt = torch.tensor([1.0 - i / max(n, 1)], dtype=dtype, device=device)
        for _ in range(per_step):
            model(hidden_states=latents, encoder_hidden_states=text, encoder_hidden_states_mask=None, timestep=tt,
                  img_shapes=img_shapes, return_dict=False)
        sync()

    ms, cpu_ms = [], []
    with torch.inference_mode():
        if v21:
            step21(0, 1, "extract")  # the prefill, untimed
        for i in range(a.warmup):
            step(i, a.warmup)
        for i in range(a.steps):
            t, c = time.perf_counter(), time.process_time()
            step(i, a.steps)
            ms += [(time.perf_counter() - t) * 1e3 / per_step] * per_step
            cpu_ms += [(time.process_time() - c) * 1e3 / per_step] * per_step

    flops = forward_flops_21(cfg, S, L) if v21 else forward_flops(cfg, S, L)
    mean, best, cpu_mean = sum(ms) / len(ms), min(ms), sum(cpu_ms) / len(cpu_ms)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    params = sum(p.numel() for p in model.parameters())
    where = (f"{torch.cuda.get_device_name(device)}" if cuda else f"cpu, {torch.get_num_threads()} threads")
    print("bench dit (diffusers)")
    rows = [
        ("config", f"{a.config}: {cfg['num_layers']} blocks, {cfg['num_attention_heads']} heads x "
                   f"{cfg['attention_head_dim']}, " + (f"text dim {cfg['context_in_dim']}" if v21
                                                       else f"joint dim {cfg['joint_attention_dim']}")),
        ("input", f"{width}x{height} -> {S} image + {L} text tokens, {'CFG' if a.cfg else 'no CFG'}"),
        ("backend", f"torch {torch.__version__} {where}, {a.dtype}, diffusers {diffusers.__version__}"),
        ("weights", f"{params / 1e6:.1f} M random parameters (seed {a.seed}) made in {weights_s:.2f} s"),
        ("timed", f"{len(ms)} forward{'' if len(ms) == 1 else 's'} after {a.warmup} warm-up"),
        ("ms/forward", f"mean {mean:.2f}   min {best:.2f}   (CPU time: mean {cpu_mean:.2f})"),
        ("GFLOP/forward", f"{flops / 1e9:.3f}"),
        ("GFLOP/s", f"mean {flops / mean * 1e-6:.1f}   best {flops / best * 1e-6:.1f}"),
        ("peak RSS", f"{rss:.1f} MiB"),
    ]
    out = {
        "bench": "dit", "engine": "diffusers", "backend": "cuda" if cuda else "cpu", "dtype": a.dtype,
        "threads": torch.get_num_threads(), "config": a.config if a.config in configs else "json",
        "weights_s": weights_s, "num_layers": cfg["num_layers"], "heads": cfg["num_attention_heads"],
        "head_dim": cfg["attention_head_dim"], "model": a.model, "width": width,
        "height": height, "image_tokens": S, "text_tokens": L, "cfg": a.cfg, "steps": a.steps,
        "ms_per_forward_mean": mean, "ms_per_forward_min": best, "cpu_ms_per_forward_mean": cpu_mean,
        "timed": len(ms), "warmup": a.warmup, "flops": flops, "gflops_per_s": flops / mean * 1e-6,
        "peak_rss_mib": rss, "torch": torch.__version__, "diffusers": diffusers.__version__,
    }
    if cuda:
        peak = torch.cuda.max_memory_allocated(device) / 2**30
        rows.append(("peak GPU memory", f"{peak:.2f} GiB (torch allocator)"))
        out["peak_gpu_gib"] = peak
    width_key = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k}{' ' * (width_key - len(k) + 2)}{v}")
    print("BENCH_JSON " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
