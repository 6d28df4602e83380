#!/usr/bin/env python3
"""The cuBLAS and cuBLASLt calls PyTorch makes (issue 16), run natively and
through rgpu on a GPU server and compared line by line by the caller
(scripts/gpu-torch.sh): fp32 matmul (cublasSgemm), bf16 and fp16 matmul
(cublasGemmEx / cublasLtMatmul), linear with bias (cublasLt epilogue),
a batched matmul (strided batched), addmm, a dot product (host-mode result)
and a small MLP training step.  Inputs come from a fixed seed; each result
is printed as a few rounded statistics and as its error against a float64
CPU reference, so the lines agree where the numbers do.

Exit 0 with "PASS torch_blas" when every error is within its tolerance;
exit 3 without PyTorch or a CUDA device (reported as not applicable)."""
import sys


def main():
    try:
        import torch
    except ImportError:
        print("SKIP torch_blas: no PyTorch")
        return 3
    if not torch.cuda.is_available():
        print("SKIP torch_blas: no CUDA device")
        return 3
    torch.manual_seed(1234)
    dev = "cuda"
    ok = True

    def report(name, got, ref, tol):
        nonlocal ok
        got64 = got.detach().double().cpu()
        err = ((got64 - ref).abs().max() / (ref.abs().max() + 1e-30)).item()
        good = err <= tol
        ok &= good
        print(f"{name}: shape {tuple(got.shape)} sum {got64.sum().item():.3e} "
              f"max-rel-err {'<=' if good else '>'} {tol:g} {'ok' if good else 'FAIL'}")

    a = torch.randn(512, 384, dtype=torch.float64)
    b = torch.randn(384, 256, dtype=torch.float64)
    ref = a @ b
    torch.backends.cuda.matmul.allow_tf32 = False
    report("fp32 matmul", a.float().to(dev) @ b.float().to(dev), ref, 1e-5)
    report("bf16 matmul", a.bfloat16().to(dev) @ b.bfloat16().to(dev), ref, 2e-2)
    report("fp16 matmul", a.half().to(dev) @ b.half().to(dev), ref, 5e-3)

    lin = torch.nn.Linear(384, 128).double()
    x = torch.randn(64, 384, dtype=torch.float64)
    ref = lin(x).detach()
    lin_g = torch.nn.Linear(384, 128).to(dev)
    lin_g.load_state_dict({k: v.float() for k, v in lin.state_dict().items()})
    report("fp32 linear+bias", lin_g(x.float().to(dev)), ref, 1e-5)
    lin_h = torch.nn.Linear(384, 128).to(dev).bfloat16()
    lin_h.load_state_dict({k: v.bfloat16() for k, v in lin.state_dict().items()})
    report("bf16 linear+bias", lin_h(x.bfloat16().to(dev)), ref, 3e-2)

    p = torch.randn(8, 64, 32, dtype=torch.float64)
    q = torch.randn(8, 32, 48, dtype=torch.float64)
    report("fp32 bmm", torch.bmm(p.float().to(dev), q.float().to(dev)), torch.bmm(p, q), 1e-5)
    c = torch.randn(512, 256, dtype=torch.float64)
    report("fp32 addmm", torch.addmm(c.float().to(dev), a.float().to(dev), b.float().to(dev),
                                     beta=0.5, alpha=2.0), torch.addmm(c, a, b, beta=0.5, alpha=2.0), 1e-5)
    v = torch.randn(4096, dtype=torch.float64)
    w = torch.randn(4096, dtype=torch.float64)
    report("fp32 dot", torch.dot(v.float().to(dev), w.float().to(dev)).reshape(1),
           torch.dot(v, w).reshape(1), 1e-4)
    report("fp32 mv", torch.mv(a.float().to(dev), b[:, 0].float().to(dev)), torch.mv(a, b[:, 0]), 1e-5)

    # One training step of a small MLP: forward, backward (the transposed
    # gemms), SGD; the updated weights against the same step in float64.
    torch.manual_seed(7)
    net = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 10)).double()
    xb = torch.randn(32, 64, dtype=torch.float64)
    yb = torch.randint(0, 10, (32,))
    net_g = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 10)).to(dev)
    net_g.load_state_dict({k: v.float() for k, v in net.state_dict().items()})
    for model, xx, yy in ((net, xb, yb), (net_g, xb.float().to(dev), yb.to(dev))):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = torch.nn.functional.cross_entropy(model(xx), yy)
        opt.zero_grad()
        loss.backward()
        opt.step()
    report("mlp step weight 0", net_g[0].weight, net[0].weight.detach(), 1e-5)
    report("mlp step weight 2", net_g[2].weight, net[2].weight.detach(), 1e-5)
    torch.cuda.synchronize()
    print("PASS torch_blas" if ok else "FAIL torch_blas")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
