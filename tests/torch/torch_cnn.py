#!/usr/bin/env python3
"""Issue 18, stage 3: convolutional networks through cuDNN.  A small CNN
(conv, batch-norm, ReLU, max-pool, linear): inference and training steps,
against float64 on the CPU; then a pose-estimation network shaped like
OpenPose's body model (the VGG-19 front, the CPM layers and six stages of
the two branches, 368x368 input, random weights), batch 1 inference, with
the frame time (the frame ends with its heatmaps copied to the host, as a
pose pipeline does).  `--quick` shrinks the input (for a CPU check)."""
import sys

from _harness import Checker, gpu_timed, import_torch, timed


def small_cnn(nn):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, 10))


def pose_net(torch):
    """OpenPose's body model in shape: VGG-19 conv1_1..conv4_2, two CPM
    convolutions, stage 1 (three 3x3 and two 1x1 convolutions per branch)
    and stages 2..6 (five 7x7 and two 1x1 per branch) on the concatenation
    of the features and both branches' maps (38 PAFs, 19 heatmaps)."""
    nn = torch.nn

    def convs(spec):
        layers = []
        for s in spec:
            if s == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                cin, cout, k = s
                layers += [nn.Conv2d(cin, cout, k, padding=k // 2), nn.ReLU(inplace=True)]
        return layers

    front = nn.Sequential(*convs([(3, 64, 3), (64, 64, 3), "M", (64, 128, 3), (128, 128, 3), "M",
                                  (128, 256, 3), (256, 256, 3), (256, 256, 3), (256, 256, 3), "M",
                                  (256, 512, 3), (512, 512, 3), (512, 256, 3), (256, 128, 3)]))

    def branch(cin, k, n, mid, out):
        layers = convs([(cin, 128, k)] + [(128, 128, k)] * (n - 1) + [(128, mid, 1)])
        return nn.Sequential(*layers, nn.Conv2d(mid, out, 1))

    class Pose(nn.Module):
        def __init__(self):
            super().__init__()
            self.front = front
            self.s1 = nn.ModuleList([branch(128, 3, 3, 512, 38), branch(128, 3, 3, 512, 19)])
            self.st = nn.ModuleList(nn.ModuleList([branch(185, 7, 5, 128, 38), branch(185, 7, 5, 128, 19)])
                                    for _ in range(5))

        def forward(self, x):
            f = self.front(x)
            paf, heat = self.s1[0](f), self.s1[1](f)
            for b in self.st:
                y = torch.cat([paf, heat, f], dim=1)
                paf, heat = b[0](y), b[1](y)
            return paf, heat

    return Pose()


def main():
    torch, dev = import_torch("torch_cnn")
    if torch is None:
        return 3
    ck = Checker("torch_cnn")
    nn = torch.nn
    torch.backends.cudnn.allow_tf32 = False
    g = torch.Generator().manual_seed(21)

    torch.manual_seed(2)
    ref = small_cnn(nn).double()
    net = small_cnn(nn).to(dev)
    net.load_state_dict({k: (v.float() if v.is_floating_point() else v) for k, v in ref.state_dict().items()})
    x64 = torch.randn(32, 3, 32, 32, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (32,), generator=g)

    # Inference: eval mode (running statistics).
    ref.eval(), net.eval()
    with torch.no_grad():
        out = net(x64.float().to(dev))
        ck.close("small cnn inference", out, ref(x64), 1e-5)
        ck.same("small cnn inference", out)

    # Training: five SGD steps with momentum; batch-norm in training mode.
    ref.train(), net.train()
    xd, yd = x64.float().to(dev), y.to(dev)
    for model, X, Y in ((ref, x64, y), (net, xd, yd)):
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for _ in range(5):
            loss = nn.functional.cross_entropy(model(X), Y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    ck.close("small cnn 5 steps: conv1 weight", net[0].weight, ref[0].weight, 1e-4)
    ck.close("small cnn 5 steps: conv3 weight", net[8].weight, ref[8].weight, 1e-4)
    ck.close("small cnn 5 steps: bn running mean", net[1].running_mean, ref[1].running_mean, 1e-4)
    ck.close("small cnn 5 steps: linear weight", net[12].weight, ref[12].weight, 1e-4)
    ck.same("small cnn weights after training", torch.cat([p.detach().flatten() for p in net.parameters()]))

    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    xb = torch.randn(64, 3, 32, 32, device=dev) if dev == "cuda" else torch.randn(64, 3, 32, 32)
    yb = torch.randint(0, 10, (64,), device=dev)

    def train_step():
        loss = nn.functional.cross_entropy(net(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()

    for _ in range(3):
        train_step()
    timed(torch, "small cnn training step (batch 64)", train_step, 50)
    net.eval()

    def infer_step():
        with torch.no_grad():
            net(xb).argmax(dim=1).cpu()

    for _ in range(3):
        infer_step()
    timed(torch, "small cnn inference (batch 64)", infer_step, 50)

    # The pose network: TF32 convolutions as PyTorch's default.
    torch.backends.cudnn.allow_tf32 = True
    quick = "--quick" in sys.argv or dev == "cpu"
    side = 96 if quick else 368
    torch.manual_seed(5)
    pose = pose_net(torch).to(dev).eval()
    frame = torch.rand(1, 3, side, side, generator=g).to(dev)
    with torch.no_grad():
        paf, heat = pose(frame)
    print(f"pose: input {side}x{side}, PAFs {tuple(paf.shape)}, heatmaps {tuple(heat.shape)}")
    ck.true("pose output finite", bool(paf.isfinite().all().item() and heat.isfinite().all().item()))
    ck.same("pose PAFs", paf)
    ck.same("pose heatmaps", heat)

    def pose_frame():
        with torch.no_grad():
            p, h = pose(frame)
            h.cpu(), p.cpu()

    for _ in range(2):
        pose_frame()
    timed(torch, "pose frame (batch 1)", pose_frame, 3 if quick else 20, syncs_per_step=2, median=True)

    def pose_forward():
        with torch.no_grad():
            pose(frame)

    # Device time from the forward's first kernel to its last, gaps included,
    # and the forward with one synchronization (no copies back).
    gpu_timed(torch, "pose forward on the GPU", pose_forward, 3 if quick else 10)
    if torch.cuda.is_available():
        timed(torch, "pose forward and a synchronize", lambda: (pose_forward(), torch.cuda.synchronize()),
              3 if quick else 10)
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
