"""Issue 18, stage 4 diagnosis: small pieces of a training step, each run
eagerly and captured into a CUDA graph and replayed, with a digest of what
each computes.  torch_graphs.py's graphed step gives other bits through
rgpu than natively while its eager steps give the same; comparing these
lines natively and through rgpu names the first piece whose replay differs.
Every graphed result is also checked against its eager twin (tolerance),
so the script passes on any correct device."""
import sys

from _harness import Checker, import_torch


def main():
    torch, dev = import_torch("torch_graph_probe", cuda_only="CUDA graphs need a CUDA device")
    if torch is None:
        return 3
    ck = Checker("torch_graph_probe")
    nn = torch.nn
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(3)

    def probe(name, make_inputs, body):
        """body(inputs) -> list of (label, tensor); run eagerly on fresh
        inputs, then captured on equal inputs and replayed once."""
        eager_in = make_inputs()
        eager_out = [(lbl, t.detach().clone()) for lbl, t in body(eager_in)]
        graph_in = make_inputs()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            body(make_inputs())  # warm-up (workspaces, plans) on throwaway inputs
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            outs = body(graph_in)
        g.replay()
        torch.cuda.synchronize()
        for (lbl, e), (_, t) in zip(eager_out, outs):
            ck.same(f"{name}: eager {lbl}", e)
            ck.same(f"{name}: replay {lbl}", t)
            ck.close(f"{name}: replay {lbl} against eager", t.float(), e.float(), 1e-4)

    def seeded(seed, fn):
        def make():
            torch.manual_seed(seed)
            return fn()
        return make

    probe("elementwise", seeded(1, lambda: torch.randn(64, 1000, device=dev)),
          lambda x: [("y", (x * 2 + 1).relu())])
    probe("row sums", seeded(2, lambda: torch.randn(64, 10, device=dev)),
          lambda x: [("sum0", x.sum(0)), ("sum1", x.sum(1))])

    def ce_inputs():
        logits = torch.randn(64, 10, device=dev, requires_grad=True)
        return logits, torch.randint(0, 10, (64,), device=dev)

    def ce_body(inp):
        logits, y = inp
        logits.grad = None
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        return [("loss", loss), ("grad", logits.grad)]
    probe("cross entropy", seeded(3, ce_inputs), ce_body)

    def layer_body(layer):
        """Forward and backward through one layer with weight and bias: its
        output and both gradients."""
        def body(x):
            layer.zero_grad(set_to_none=False)
            out = layer(x)
            (out * out).sum().backward()
            return [("out", out), ("grad weight", layer.weight.grad), ("grad bias", layer.bias.grad)]
        return body

    probe("linear", seeded(4, lambda: torch.randn(64, 256, device=dev)),
          layer_body(nn.Linear(256, 10).to(dev)))
    probe("conv", seeded(5, lambda: torch.randn(64, 3, 32, 32, device=dev)),
          layer_body(nn.Conv2d(3, 16, 3, padding=1).to(dev)))
    probe("batch norm", seeded(6, lambda: torch.randn(64, 16, 16, 16, device=dev)),
          layer_body(nn.BatchNorm2d(16).to(dev)))
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
