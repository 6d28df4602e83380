#!/usr/bin/env python3
"""Issue 18, stage 4: CUDA graphs as PyTorch makes them (torch.cuda.graph).
The small CNN's whole training step (forward, backward, SGD step) and its
inference step are captured once and replayed on new data copied into the
static inputs; the replayed results are checked against the same steps run
eagerly from the same starting weights, and the step times of eager and
graphed runs are printed side by side (through rgpu with the round trips
per step)."""
import copy
import sys

from _harness import Checker, gpu_timed, import_torch, timed
from torch_cnn import small_cnn


def main():
    torch, dev = import_torch("torch_graphs", cuda_only="CUDA graphs need a CUDA device")
    if torch is None:
        return 3
    ck = Checker("torch_graphs")
    nn = torch.nn
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(8)
    eager = small_cnn(nn).to(dev)
    graphed = copy.deepcopy(eager)
    batches = [(torch.randn(64, 3, 32, 32, device=dev), torch.randint(0, 10, (64,), device=dev))
               for _ in range(8)]

    def make_opt(model):
        # capturable: the step count lives on the device, as capture needs.
        return torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)

    opt_e, opt_g = make_opt(eager), make_opt(graphed)
    static_x = torch.empty_like(batches[0][0])
    static_y = torch.empty_like(batches[0][1])

    def train_body(model, opt, x, y):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    # Warm-up on a side stream (PyTorch's documented recipe), on batch 0,
    # for both copies alike so they stay identical.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for model, opt in ((eager, opt_e), (graphed, opt_g)):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                train_body(model, opt, batches[0][0], batches[0][1])
    torch.cuda.current_stream().wait_stream(side)

    g = torch.cuda.CUDAGraph()
    opt_g.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = train_body(graphed, opt_g, static_x, static_y)

    losses_e, losses_g = [], []
    for i, (x, y) in enumerate(batches):
        opt_e.zero_grad(set_to_none=True)
        losses_e.append(train_body(eager, opt_e, x, y).item())
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        losses_g.append(static_loss.item())
        if i == 0:
            # Where a difference from the native run starts: the first
            # replay's and the same eager step's results, bit for bit.
            ck.same("first replay: loss", static_loss)
            ck.same("first replay: weights", torch.cat([p.detach().flatten() for p in graphed.parameters()]))
            ck.same("first eager step: weights", torch.cat([p.detach().flatten() for p in eager.parameters()]))
            # Which layer a difference starts in: the replay's gradients,
            # one digest per parameter.
            for n, p in graphed.named_parameters():
                ck.same(f"first replay: grad {n}", p.grad)
    ck.true("graphed and eager losses agree",
            all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for a, b in zip(losses_e, losses_g)))
    for (n, pe), pg in zip(eager.named_parameters(), graphed.parameters()):
        if n in ("0.weight", "8.weight", "12.weight"):
            ck.close(f"graphed training: {n} against eager", pg, pe, 1e-4)
    ck.same("graphed training weights", torch.cat([p.detach().flatten() for p in graphed.parameters()]))
    ck.same("eager training weights", torch.cat([p.detach().flatten() for p in eager.parameters()]))

    def eager_step():
        opt_e.zero_grad(set_to_none=True)
        train_body(eager, opt_e, batches[1][0], batches[1][1]).item()

    def graphed_step():
        static_x.copy_(batches[1][0])
        static_y.copy_(batches[1][1])
        g.replay()
        static_loss.item()

    timed(torch, "small cnn training step, eager", eager_step, 50, median=True)
    timed(torch, "small cnn training step, graphed", graphed_step, 50, median=True)
    gpu_timed(torch, "small cnn training step, graph on the GPU", g.replay, 20)
    # Where a graphed step's time goes: the replay alone, and the two
    # input copies alone.
    timed(torch, "small cnn training step, graphed, no input copies",
          lambda: (g.replay(), static_loss.item()), 50, median=True)
    timed(torch, "small cnn training step, input copies and a synchronize",
          lambda: (static_x.copy_(batches[1][0]), static_y.copy_(batches[1][1]),
                   torch.cuda.synchronize()), 50)

    # Inference captured in eval mode.
    graphed.eval(), eager.eval()
    static_in = torch.empty_like(batches[0][0])
    with torch.no_grad():
        for _ in range(3):
            with torch.cuda.stream(side):
                graphed(static_in)
        torch.cuda.current_stream().wait_stream(side)
        gi = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gi):
            static_out = graphed(static_in)
        for x, _ in batches[:4]:
            static_in.copy_(x)
            gi.replay()
            ck.close("graphed inference against eager", static_out, graphed(x), 1e-5)
        ck.same("graphed inference", static_out)

        def eager_infer():
            graphed(batches[2][0]).argmax(dim=1).cpu()

        def graphed_infer():
            static_in.copy_(batches[2][0])
            gi.replay()
            static_out.argmax(dim=1).cpu()

        timed(torch, "small cnn inference, eager", eager_infer, 50, median=True)
        timed(torch, "small cnn inference, graphed", graphed_infer, 50, median=True)
        gpu_timed(torch, "small cnn inference, graph on the GPU", gi.replay, 20)
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
