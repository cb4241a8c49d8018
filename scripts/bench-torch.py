#!/usr/bin/env python3
"""bench-torch.py: the same DCGAN and training step in PyTorch eager (cuDNN), timed on one GPU,
to compare with `dcgan-train bench-step --device cuda` at the same batch size; with --device cpu,
on the CPU with --threads threads, to compare with `dcgan-train bench-step --device cpu`.

The model is dcgan-train's (src/model/; 28x28 default, or 64x64 as in the PyTorch DCGAN
example), no conv biases, Adam(lr 2e-4, betas (0.5, 0.999)), BCE with logits; the step is the
PyTorch DCGAN example's: G forward once, D on real (label 1) and on the detached fake (label
0), D's Adam, then G through D (label 1) and G's Adam. Data and noise are random tensors
already on the GPU, so only the training step is timed.

Reported per batch size: the median ms/step over --repeats runs of --steps steps (each run
timed between two CUDA synchronizations, after --warmup steps), images/s (real images per
second: batch / step time), and TFLOP/s counted the same way dcgan-train counts them:
2 FLOPs per multiply-add of the convolutions that a minimal step must compute (G forward,
three D forwards, D's weight and data gradients on real and fake except the data gradient of
D's first layer, D's data gradients in the G step, G's weight and data gradients except the
noise's). PyTorch eager does slightly more (it also computes D's weight gradients in the G
step); the count is the same for both sides so that TFLOP/s compare like for like.

PyTorch lets cuDNN use TF32 tensor cores for convolutions by default; --no-tf32 turns that
off for a full-FP32 comparison with our --precision fp32 and 3xtf32.

--compile times PyTorch at its best instead of eager: both networks through
torch.compile(mode="max-autotune") (Inductor picks each convolution's fastest kernel and
replays the step's kernels as CUDA graphs) and each optimizer step compiled too; the
compilation happens in the warm-up steps, which are not timed.

  python3 scripts/bench-torch.py --batch-size 64 256 [--image-size 28] [--no-tf32] [--compile] [--json]
  python3 scripts/bench-torch.py --device cpu --threads 2 --batch-size 64
"""

import argparse
import json
import statistics
import sys
import time


def conv_layers(image_size, nz=100, ngf=64, ndf=64, nc=1):
    """(kind, in, out, k, stride, pad, input side) of every conv of G and of D."""
    if image_size == 28:
        g = [("T", nz, ngf * 4, 7, 1, 0, 1), ("T", ngf * 4, ngf * 2, 4, 2, 1, 7),
             ("T", ngf * 2, nc, 4, 2, 1, 14)]
        d = [("C", nc, ndf, 4, 2, 1, 28), ("C", ndf, ndf * 2, 4, 2, 1, 14),
             ("C", ndf * 2, 1, 7, 1, 0, 7)]
    else:
        g = [("T", nz, ngf * 8, 4, 1, 0, 1), ("T", ngf * 8, ngf * 4, 4, 2, 1, 4),
             ("T", ngf * 4, ngf * 2, 4, 2, 1, 8), ("T", ngf * 2, ngf, 4, 2, 1, 16),
             ("T", ngf, nc, 4, 2, 1, 32)]
        d = [("C", nc, ndf, 4, 2, 1, 64), ("C", ndf, ndf * 2, 4, 2, 1, 32),
             ("C", ndf * 2, ndf * 4, 4, 2, 1, 16), ("C", ndf * 4, ndf * 8, 4, 2, 1, 8),
             ("C", ndf * 8, 1, 4, 1, 0, 4)]
    return g, d


def macs(layer, batch):
    """Multiply-adds of one pass of a layer (forward, data gradient and weight gradient all
    cost the same)."""
    kind, cin, cout, k, s, p, side = layer
    if kind == "C":
        out = (side + 2 * p - k) // s + 1
        return cout * cin * k * k * batch * out * out
    # ConvTranspose: every input pixel meets every weight once.
    return cin * cout * k * k * batch * side * side


def step_flops(image_size, batch):
    g, d = conv_layers(image_size)
    mg = [macs(l, batch) for l in g]
    md = [macs(l, batch) for l in d]
    total = sum(mg)                              # G forward
    total += 3 * sum(md)                         # D on real, on detached fake, on fake for G
    total += 2 * (sum(md) + sum(md[1:]))         # D step: weights + data (not into images)
    total += sum(md)                             # G step: data gradients through all of D
    total += sum(mg) + sum(mg[1:])               # G: weights + data (not into the noise)
    return 2 * total


def build(torch, nn, image_size):
    g_layers, d_layers = conv_layers(image_size)
    g, d = [], []
    for i, (_, cin, cout, k, s, p, _) in enumerate(g_layers):
        g.append(nn.ConvTranspose2d(cin, cout, k, s, p, bias=False))
        g += [nn.BatchNorm2d(cout), nn.ReLU(True)] if i + 1 < len(g_layers) else [nn.Tanh()]
    for i, (_, cin, cout, k, s, p, _) in enumerate(d_layers):
        d.append(nn.Conv2d(cin, cout, k, s, p, bias=False))
        if i == 0:
            d.append(nn.LeakyReLU(0.2, inplace=True))
        elif i + 1 < len(d_layers):
            d += [nn.BatchNorm2d(cout), nn.LeakyReLU(0.2, inplace=True)]

    def init(m):
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)

    netg, netd = nn.Sequential(*g), nn.Sequential(*d)
    netg.apply(init)
    netd.apply(init)
    return netg, netd


def bench(args, batch):
    import torch
    import torch.nn as nn

    torch.backends.cudnn.allow_tf32 = not args.no_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(1)
    dev = torch.device(args.device)
    cuda = args.device == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    netg, netd = build(torch, nn, args.image_size)
    netg, netd = netg.to(dev), netd.to(dev)
    optg = torch.optim.Adam(netg.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optd = torch.optim.Adam(netd.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optg_step, optd_step = optg.step, optd.step
    if args.compile:
        netg = torch.compile(netg, mode="max-autotune")
        netd = torch.compile(netd, mode="max-autotune")
        optg_step = torch.compile(optg.step, mode="max-autotune")
        optd_step = torch.compile(optd.step, mode="max-autotune")
    crit = nn.BCEWithLogitsLoss()
    s = args.image_size
    real = torch.rand(batch, 1, s, s, device=dev) * 2 - 1
    ones = torch.ones(batch, device=dev)
    zeros = torch.zeros(batch, device=dev)

    def step():
        if args.compile:
            # CUDA graphs reuse their output memory from one replay to the next: each
            # step's tensors are new ones.
            torch.compiler.cudagraph_mark_step_begin()
        noise = torch.randn(batch, 100, 1, 1, device=dev)
        optd.zero_grad(set_to_none=True)
        err_real = crit(netd(real).view(-1), ones)
        err_real.backward()
        fake = netg(noise)
        err_fake = crit(netd(fake.detach()).view(-1), zeros)
        err_fake.backward()
        optd_step()
        optg.zero_grad(set_to_none=True)
        err_g = crit(netd(fake).view(-1), ones)
        err_g.backward()
        optg_step()
        if args.compile:
            return (err_real + err_fake).detach().clone(), err_g.detach().clone()
        return err_real + err_fake, err_g

    for _ in range(args.warmup):
        step()
    sync()
    runs = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            ld, lg = step()
        sync()
        runs.append((time.perf_counter() - t0) * 1e3 / args.steps)
    if not (torch.isfinite(ld) and torch.isfinite(lg)):
        raise SystemExit("bench-torch: the losses are not finite")
    ms = statistics.median(runs)
    flops = step_flops(args.image_size, batch)
    return {
        "impl": "pytorch-compile-max-autotune" if args.compile else "pytorch-eager",
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "device": torch.cuda.get_device_name() if cuda else f"cpu ({torch.get_num_threads()} threads)",
        "image_size": args.image_size,
        "batch": batch,
        "tf32": cuda and not args.no_tf32,
        "ms_per_step": round(ms, 4),
        "ms_per_step_runs": [round(r, 4) for r in runs],
        "images_per_s": round(batch / (ms / 1e3), 1),
        "step_gflop": round(flops / 1e9, 3),
        "tflops": round(flops / (ms / 1e3) / 1e12, 3),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, nargs="+", default=[64, 256])
    p.add_argument("--image-size", type=int, choices=[28, 64], default=28)
    p.add_argument("--steps", type=int, default=50, help="timed steps per run")
    p.add_argument("--repeats", type=int, default=5, help="runs; the median is reported")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--threads", type=int, help="with --device cpu: torch.set_num_threads")
    p.add_argument("--no-tf32", action="store_true", help="full FP32 convolutions in cuDNN")
    p.add_argument("--compile", action="store_true",
                   help='torch.compile(mode="max-autotune") for the networks and Adam')
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--flops-only", action="store_true",
                   help="print the FLOP count of a step and exit (no GPU needed)")
    args = p.parse_args()
    if args.flops_only:
        for b in args.batch_size:
            print(json.dumps({"image_size": args.image_size, "batch": b,
                              "step_gflop": round(step_flops(args.image_size, b) / 1e9, 3)}))
        return
    try:
        import torch
    except ImportError:
        sys.exit("bench-torch: PyTorch is not installed (pip install torch)")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench-torch: PyTorch sees no CUDA GPU (use --device cpu for the CPU)")
    if args.threads:
        torch.set_num_threads(args.threads)
    for b in args.batch_size:
        r = bench(args, b)
        if args.json:
            print(json.dumps(r), flush=True)
        else:
            how = "compiled (max-autotune)" if args.compile else "eager"
            print(f"{r['device']}  PyTorch {r['torch']} {how}  {s_(r)}", flush=True)


def s_(r):
    return (f"{r['image_size']}x{r['image_size']} batch {r['batch']:4d}  tf32 {'on ' if r['tf32'] else 'off'}"
            f"  {r['ms_per_step']:.3f} ms/step  {r['images_per_s']:.0f} images/s  {r['tflops']:.2f} TFLOP/s")


if __name__ == "__main__":
    main()
