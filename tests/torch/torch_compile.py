#!/usr/bin/env python3
"""Issue 18, stage 5: torch.compile on an MLP.  Inductor generates Triton
kernels, which Triton compiles to cubins and loads through the driver API
(cuModuleLoadData, cuLaunchKernel): through rgpu, libcuda.so.1 is rgpu's
driver facade.  The compiled forward and a compiled training step are
checked against eager mode, and their step times printed."""
import sys

from _harness import Checker, import_torch, timed


def main():
    torch, dev = import_torch("torch_compile", cuda_only="Triton needs a CUDA device")
    if torch is None:
        return 3
    ck = Checker("torch_compile")
    nn = torch.nn
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(4)
    mlp = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.LayerNorm(512), nn.Linear(512, 512),
                        nn.SiLU(), nn.Linear(512, 10)).to(dev)
    x = torch.randn(128, 256, device=dev)
    y = torch.randint(0, 10, (128,), device=dev)
    try:
        cmlp = torch.compile(mlp)
        out = cmlp(x)
    except Exception as e:  # report the compiler's failure by name
        print(f"FAIL torch_compile: compiling the MLP failed: {type(e).__name__}: {str(e)[:300]}")
        return 1
    with torch.no_grad():
        ck.close("compiled forward against eager", out, mlp(x), 1e-5)

    opt = torch.optim.SGD(mlp.parameters(), lr=0.01)

    def step(model):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    l0 = step(cmlp)
    l1 = step(cmlp)
    ck.true("compiled training step lowers the loss", l1 < l0)
    timed(torch, "mlp training step, compiled", lambda: step(cmlp), 50)
    timed(torch, "mlp training step, eager", lambda: step(mlp), 50)
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
