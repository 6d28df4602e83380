#!/usr/bin/env python3
"""Issue 18 with PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=
expandable_segments:True): the caching allocator then grows one reserved
address range with cuMemCreate/cuMemMap/cuMemSetAccess and shrinks it with
cuMemUnmap/cuMemRelease (the driver API's virtual memory management,
through rgpu's VMM message) instead of calling cudaMalloc per segment.
Tensors that grow, are freed, and are allocated again across the mapped
chunks; a matmul and a reduction over them; empty_cache() giving memory
back; results compared by digest (deterministic kernels) or against a CPU
reference.  Run natively and through rgpu; the caller compares outputs."""
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

from _harness import Checker, import_torch  # noqa: E402


def main():
    torch, dev = import_torch("torch_expandable", cuda_only="expandable segments are CUDA's")
    if torch is None:
        return 3
    ck = Checker("torch_expandable")
    torch.manual_seed(11)
    g = torch.Generator(device=dev).manual_seed(3)

    # Growth: each step allocates more than the segment holds, so the
    # allocator maps more of its reserved range.
    kept = []
    for i, mib in enumerate((2, 6, 20, 48)):
        n = (mib << 20) // 4
        t = torch.randn(n, device=dev, generator=g)
        kept.append(t)
        ck.same(f"tensor {i} ({mib} MiB)", t)
    total = torch.stack([t.double().sum() for t in kept])
    ref = torch.stack([t.cpu().double().sum() for t in kept])
    ck.close("sums over the grown segment", total, ref, 1e-9)

    # Free the middle ones and allocate again in the holes.
    del kept[1:3]
    a = torch.randn(1024, 1024, device=dev, generator=g)
    b = torch.randn(1024, 1024, device=dev, generator=g)
    c = a @ b
    ck.close("matmul in reused memory", c.cpu().double(),
             a.cpu().double() @ b.cpu().double(), 1e-3)
    ck.same("elementwise in reused memory", (a * 2 + b).relu())

    # empty_cache() unmaps what no tensor uses; the survivors keep their bytes.
    first = kept[0].clone()
    torch.cuda.empty_cache()
    ck.same("survivor after empty_cache", kept[0])
    ck.true("survivor unchanged", torch.equal(kept[0], first))
    big = torch.ones(64 << 18, device=dev)
    ck.true("allocation after empty_cache", float(big.sum()) == float(64 << 18))
    stats = torch.cuda.memory_stats()
    ck.true("allocator reports reserved memory", stats.get("reserved_bytes.all.current", 0) > 0)
    torch.cuda.synchronize()
    return ck.finish()


if __name__ == "__main__":
    raise SystemExit(main())
