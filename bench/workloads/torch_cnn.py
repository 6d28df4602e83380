#!/usr/bin/env python3
"""Small CNN inference and one training step on the GPU with PyTorch.

Prints RESULT lines like the CUDA workloads (see bench_util.h).  Exits 3
(reported as n/a) when PyTorch is not installed or sees no CUDA device, so
the row stays in the table until PyTorch runs through rgpu.
"""
import argparse
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["infer", "train"], default="infer")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn as nn
    except ImportError:
        print("RESULT workload=torch_%s status=unsupported reason=no-pytorch" % args.mode)
        return 3
    if not torch.cuda.is_available():
        print("RESULT workload=torch_%s status=unsupported reason=no-cuda-device" % args.mode)
        return 3
    try:
        return run(torch, nn, args)
    except RuntimeError as e:
        # PyTorch turns CUDA errors into RuntimeError; an API rgpu does not
        # remote yet is "not supported", anything else is a real failure.
        msg = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        if "not supported" in msg.lower():
            print("RESULT workload=torch_%s status=unsupported" % args.mode)
            print("torch_cnn: %s" % msg, file=sys.stderr)
            return 3
        print("FAIL torch_%s: %s" % (args.mode, msg), file=sys.stderr)
        return 1


def run(torch, nn, args):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10)).to(dev)
    x = torch.randn(args.batch, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch,))
    # The same model on the CPU is the reference the GPU result must match.
    ref = model.to("cpu")(x) if args.mode == "infer" else None
    model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        xd, yd = x.to(dev), y.to(dev)
        if args.mode == "infer":
            with torch.no_grad():
                return model(xd).cpu()
        opt.zero_grad()
        loss = loss_fn(model(xd), yd)
        loss.backward()
        opt.step()
        return loss.item()

    out = step()  # warm-up: kernels and cuDNN/cuBLAS handles load here
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        out = step()
    torch.cuda.synchronize()
    t = (time.perf_counter() - t0) / args.iters
    if args.mode == "infer":
        err = (out - ref).abs().max().item()
        if err > 1e-3:
            print("FAIL torch_infer: GPU output differs from CPU by %g" % err, file=sys.stderr)
            return 1
    elif not (out == out) or out <= 0:
        print("FAIL torch_train: loss is %r" % out, file=sys.stderr)
        return 1
    nbytes = x.numel() * 4 + (y.numel() * 8 if args.mode == "train" else args.batch * 40)
    print("RESULT workload=torch_%s variant=b%d time_s=%.9f bytes=%d syncs=1 per_s=%.2f"
          % (args.mode, args.batch, t, nbytes, 1.0 / t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
