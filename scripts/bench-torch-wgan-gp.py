#!/usr/bin/env python3
"""bench-torch-wgan-gp.py: WGAN-GP's critic step in PyTorch eager, with the gradient penalty
(autograd's double backward, create_graph=True) and without it, taking turns step by step;
the twin of `dcgan-train bench-step --loss wgan-gp`, which times the same two steps.

The models are dcgan-train's (scripts/bench-torch.py's G, and D without batch norm as the
critic: conv, LeakyReLU, conv, LeakyReLU, conv; with --critic-norm layer, GroupNorm(1, C) in
the batch norm's place, as `--critic-norm layer`); Adam(lr 1e-4, betas (0.5, 0.9)). One critic
step: -mean D(x) on real images, G forward without gradients, the penalty
lambda * mean (||grad_x^ D(x^)|| - 1)^2 at x^ = e x + (1 - e) G(z), +mean D(G(z)), the
critic's Adam step. Data and noise are random tensors, so only the step is timed.

  PYTHON=/path/to/python-with-torch; $PYTHON scripts/bench-torch-wgan-gp.py --device cpu --threads 2
  python3 scripts/bench-torch-wgan-gp.py --device cuda --batch-size 64 256 [--json]
"""

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time


def twin_models(torch, nn, image_size, layer_norm):
    """G of bench-torch.py, and its D without batch norm, or with GroupNorm(1, C) in its place."""
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("bench_torch", os.path.join(here, "bench-torch.py"))
    bt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bt)
    netg, netd = bt.build(torch, nn, image_size)
    norm = (lambda m: [nn.GroupNorm(1, m.num_features)]) if layer_norm else (lambda m: [])
    critic = nn.Sequential(*[n for m in netd for n in (norm(m) if isinstance(m, nn.BatchNorm2d) else [m])])
    return netg, critic


def bench(args, batch):
    import torch
    import torch.nn as nn

    torch.manual_seed(1)
    dev = torch.device(args.device)
    cuda = args.device == "cuda"
    torch.backends.cudnn.allow_tf32 = not args.no_tf32
    netg, critic = twin_models(torch, nn, args.image_size, args.critic_norm == "layer")
    netg, critic = netg.to(dev), critic.to(dev)
    opt = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
    s = args.image_size
    real = torch.rand(batch, 1, s, s, device=dev) * 2 - 1

    def step(penalty):
        noise = torch.randn(batch, 100, 1, 1, device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            fake = netg(noise)
        loss = critic(fake).mean() - critic(real).mean()
        if penalty:
            e = torch.rand(batch, 1, 1, 1, device=dev)
            x = (e * real + (1 - e) * fake).requires_grad_(True)
            (g,) = torch.autograd.grad(critic(x).sum(), x, create_graph=True)
            loss = loss + args.gp_lambda * ((g.flatten(1).norm(dim=1) - 1) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    def timed(penalty):
        t0 = time.perf_counter()
        loss = step(penalty)
        if cuda:
            torch.cuda.synchronize()
        if not torch.isfinite(loss):
            raise SystemExit("bench-torch-wgan-gp: the loss is not finite")
        return (time.perf_counter() - t0) * 1e3

    for i in range(args.warmup):
        timed(i % 2 == 0)
    times = {True: [], False: []}
    for i in range(args.steps):
        for penalty in ((True, False) if i % 2 == 0 else (False, True)):
            times[penalty].append(timed(penalty))
    with_p, without = statistics.median(times[True]), statistics.median(times[False])
    return {
        "impl": "pytorch-eager",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if cuda else f"cpu ({torch.get_num_threads()} threads)",
        "image_size": s,
        "critic_norm": args.critic_norm,
        "batch": batch,
        "steps": args.steps,
        "ms_per_critic_step": round(with_p, 4),
        "ms_per_critic_step_without_penalty": round(without, 4),
        "penalty_cost_ratio": round(with_p / without, 4),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, nargs="+", default=[64])
    p.add_argument("--image-size", type=int, choices=[28, 64], default=28)
    p.add_argument("--steps", type=int, default=20, help="timed steps of each kind")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--gp-lambda", type=float, default=10.0)
    p.add_argument("--critic-norm", choices=["none", "layer"], default="none")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cpu")
    p.add_argument("--threads", type=int, help="with --device cpu: torch.set_num_threads")
    p.add_argument("--no-tf32", action="store_true", help="full FP32 convolutions in cuDNN")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("bench-torch-wgan-gp: PyTorch is not installed (pip install torch)")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench-torch-wgan-gp: PyTorch sees no CUDA GPU (use --device cpu)")
    if args.threads:
        torch.set_num_threads(args.threads)
    for b in args.batch_size:
        r = bench(args, b)
        if args.json:
            print(json.dumps(r), flush=True)
        else:
            print(f"{r['device']}  PyTorch {r['torch']} eager  {r['image_size']}x{r['image_size']} batch {b}: "
                  f"critic step {r['ms_per_critic_step']:.1f} ms with the penalty, "
                  f"{r['ms_per_critic_step_without_penalty']:.1f} ms without: {r['penalty_cost_ratio']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
