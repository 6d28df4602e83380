#!/usr/bin/env python3
"""Issue 18, stage 2: matrix arithmetic and training.  Matmul in fp32, bf16
and fp16; linear layers; a small MLP trained for 50 steps (forward,
backward, optimizer step) against the same loop in float64 on the CPU; and
one GPT-2-small-shaped transformer (12 layers, 768 wide, 12 heads, sequence
512, batch 8, random weights built here, AdamW, bf16 autocast) trained for
a few steps, with its step time.  `--quick` shrinks the transformer (for a
CPU check of the script)."""
import math
import sys

from _harness import Checker, import_torch, timed


def build_gpt(torch, vocab, width, layers, heads, seq):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.ln2 = nn.LayerNorm(width)
            self.fc = nn.Linear(width, 4 * width)
            self.out = nn.Linear(4 * width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, width)
            self.pos = nn.Embedding(seq, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)
            self.head.weight = self.tok.weight

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    model = GPT()
    # GPT-2's initialization: small normal weights, zero biases (so the
    # first loss is about ln(vocab)).
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
    return model


def main():
    torch, dev = import_torch("torch_train")
    if torch is None:
        return 3
    ck = Checker("torch_train")
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(11)

    a64 = torch.randn(1024, 768, generator=g, dtype=torch.float64)
    b64 = torch.randn(768, 1536, generator=g, dtype=torch.float64)
    ref = a64 @ b64
    for dt, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 5e-3)):
        got = a64.to(dt).to(dev) @ b64.to(dt).to(dev)
        ck.close(f"matmul {str(dt)[6:]}", got, ref, tol)
        ck.same(f"matmul {str(dt)[6:]}", got)

    # The MLP trained for 50 steps, on the device and in float64 on the CPU.
    torch.manual_seed(3)
    mk = lambda: torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(),
                                     torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    net64 = mk().double()
    net = mk().to(dev)
    net.load_state_dict({k: v.float() for k, v in net64.state_dict().items()})
    xs = torch.randn(50, 64, 128, generator=g, dtype=torch.float64)
    ys = torch.randint(0, 10, (50, 64), generator=g)
    xs_d, ys_d = xs.float().to(dev), ys.to(dev)
    for model, X, Y in ((net64, xs, ys), (net, xs_d, ys_d)):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for i in range(50):
            loss = torch.nn.functional.cross_entropy(model(X[i]), Y[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
    for i in (0, 2, 4):
        ck.close(f"mlp 50 Adam steps, layer {i} weight", net[i].weight, net64[i].weight, 2e-4)
    ck.same("mlp weights", torch.cat([p.detach().flatten() for p in net.parameters()]))

    # The transformer: bf16 autocast, AdamW, a step ends in loss.item().
    quick = "--quick" in sys.argv or dev == "cpu"
    vocab, width, layers, heads, seq, batch = (
        (1000, 128, 2, 4, 64, 2) if quick else (50257, 768, 12, 12, 512, 8))
    torch.manual_seed(1)
    gpt = build_gpt(torch, vocab, width, layers, heads, seq).to(dev)
    nparams = sum(p.numel() for p in gpt.parameters())
    print(f"transformer: {layers} layers, {width} wide, {heads} heads, sequence {seq}, batch {batch}, "
          f"{nparams / 1e6:.1f} M parameters")
    opt = torch.optim.AdamW(gpt.parameters(), lr=3e-4, weight_decay=0.1)
    data = torch.randint(0, vocab, (batch, seq + 1), device=dev)
    losses = []

    def step():
        with torch.autocast(device_type="cuda" if dev == "cuda" else "cpu", dtype=torch.bfloat16):
            logits = gpt(data[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())

    for _ in range(3):
        step()
    # Random weights and data: the first loss is about ln(vocab); training
    # on one batch drives it down.
    ck.true("first loss near ln(vocab)", abs(losses[0] - math.log(vocab)) < 1.0)
    timed(torch, "transformer training step", step, 5 if quick else 20)
    ck.true("loss falls on a repeated batch", losses[-1] < losses[0])
    ck.true("losses finite", all(math.isfinite(x) for x in losses))
    print(f"transformer loss after 3 steps: {losses[2]:.2f}")
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
