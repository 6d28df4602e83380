#!/usr/bin/env python3
"""Issue 18, stage 1: what every PyTorch program does before any library
call.  Device discovery and properties, free memory, tensor creation,
copies both ways (pageable and pinned, blocking and non_blocking),
element-wise ops, reductions, the Philox random generators, synchronize,
the caching allocator's statistics, and two streams ordered by an event.
Run natively and through rgpu; the caller compares the outputs."""
import sys

from _harness import Checker, import_torch, timed


def main():
    torch, dev = import_torch("torch_basics")
    if torch is None:
        return 3
    ck = Checker("torch_basics")
    on_gpu = dev == "cuda"

    if on_gpu:
        n = torch.cuda.device_count()
        ck.true("device count >= 1", n >= 1)
        p = torch.cuda.get_device_properties(0)
        print(f"device 0: {p.name} sm_{p.major}{p.minor} {p.multi_processor_count} SMs "
              f"{p.total_memory >> 20} MiB")
        free, total = torch.cuda.mem_get_info()
        ck.true("mem_get_info total == properties", total == p.total_memory)
        ck.true("mem_get_info 0 < free <= total", 0 < free <= total)
        print(f"current device {torch.cuda.current_device()}, capability {torch.cuda.get_device_capability()}")

    # Creation on the device.
    ck.same("zeros", torch.zeros(1000, device=dev))
    ck.same("ones int64", torch.ones(3, 5, dtype=torch.int64, device=dev))
    ck.same("arange", torch.arange(0, 10000, 3, device=dev))
    ck.same("full fp16", torch.full((17, 9), 2.5, dtype=torch.float16, device=dev))
    ck.same("linspace", torch.linspace(-1, 1, 513, device=dev))
    ck.same("eye", torch.eye(33, device=dev))

    # Copies both ways: pageable and pinned, blocking and not.
    g = torch.Generator().manual_seed(5)
    host = torch.randn(1 << 20, generator=g)
    for pinned in (False, True):
        h = host.pin_memory() if (pinned and on_gpu) else host.clone()
        for nb in (False, True):
            d = h.to(dev, non_blocking=nb)
            back = torch.empty(h.shape, dtype=h.dtype, pin_memory=pinned and on_gpu)
            back.copy_(d * 2, non_blocking=nb)
            if on_gpu:
                torch.cuda.synchronize()
            ck.true(f"copy {'pinned' if pinned else 'pageable'} non_blocking={nb}",
                    torch.equal(back, host * 2))
    big = torch.arange(64 << 20, dtype=torch.uint8).to(dev)
    ck.true("64 MiB copy round trip", torch.equal(big.cpu(), torch.arange(64 << 20, dtype=torch.uint8)))
    del big

    # Element-wise and reductions against float64 on the CPU.
    a64 = torch.randn(4096, 257, generator=g, dtype=torch.float64)
    b64 = torch.rand(4096, 257, generator=g, dtype=torch.float64) + 0.5
    a, b = a64.float().to(dev), b64.float().to(dev)
    ck.close("add mul", a * b + a, a64 * b64 + a64, 1e-6)
    ck.close("div sqrt", a / b.sqrt(), a64 / b64.sqrt(), 1e-6)
    ck.close("exp tanh sin", a.exp().tanh() + a.sin(), a64.exp().tanh() + a64.sin(), 1e-6)
    ck.close("where clamp", torch.where(a > 0, a, b).clamp(-0.5, 1.0),
             torch.where(a64 > 0, a64, b64).clamp(-0.5, 1.0), 1e-7)
    ck.close("sum", a.sum(dim=1), a64.sum(dim=1), 1e-5)
    ck.close("mean", a.mean(dim=0), a64.mean(dim=0), 1e-5)
    ck.close("max", a.max(dim=1).values, a64.max(dim=1).values, 1e-7)
    ck.true("argmax", torch.equal(a.argmax(dim=1).cpu(), a64.argmax(dim=1)))
    ck.close("cumsum", a.cumsum(dim=1), a64.cumsum(dim=1), 1e-5)
    ck.close("norm", a.norm(dim=1), a64.norm(dim=1), 1e-5)
    ck.close("softmax", torch.softmax(a, dim=1), torch.softmax(a64, dim=1), 1e-5)
    ck.close("sort", a.sort(dim=1).values, a64.sort(dim=1).values, 1e-7)
    ck.close("topk", a.topk(5, dim=1).values, a64.topk(5, dim=1).values, 1e-7)
    ck.true("total sum is a number", a.sum().item() == a.sum().item())
    ck.same("sum deterministic", a.sum(dim=1))
    ck.same("bf16 cast", a.bfloat16())
    ck.same("int ops", (a * 1000).int() % 7 + (a > 0).int())

    # Random numbers: Philox on the device, reproducible per seed.
    torch.manual_seed(42)
    ck.same("rand", torch.rand(10000, device=dev))
    ck.same("randn", torch.randn(100, 100, device=dev))
    ck.same("randint", torch.randint(0, 1000, (5000,), device=dev))
    ck.same("bernoulli", torch.bernoulli(torch.full((4096,), 0.3, device=dev)))
    ck.same("dropout", torch.nn.functional.dropout(torch.ones(4096, device=dev), 0.5))
    ck.same("randperm", torch.randperm(3000, device=dev))
    ck.same("multinomial", torch.multinomial(torch.rand(8, 50, device=dev), 10, replacement=True))
    torch.manual_seed(42)
    r1 = torch.rand(1000, device=dev)
    torch.manual_seed(42)
    ck.true("same seed, same numbers", torch.equal(r1, torch.rand(1000, device=dev)))

    if on_gpu:
        torch.cuda.synchronize()
        # The caching allocator's statistics.
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        x = torch.empty(1 << 18, dtype=torch.float32, device=dev)
        ck.true("memory_allocated grows by 1 MiB", torch.cuda.memory_allocated() - base == 1 << 20)
        ck.true("max_memory_allocated >= allocated",
                torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated())
        ck.true("memory_reserved >= allocated", torch.cuda.memory_reserved() >= torch.cuda.memory_allocated())
        st = torch.cuda.memory_stats()
        ck.true("memory_stats has allocation counts", st.get("allocation.all.current", 0) >= 1)
        del x

        # Two streams: s2's work waits for s1's through an event.
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
        start, mid = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        src = torch.randn(2048, 2048, device=dev)
        torch.cuda.synchronize()
        with torch.cuda.stream(s1):
            start.record()
            y = src * 3 + 1
            for _ in range(20):
                y = y.sin()
            mid.record()
        with torch.cuda.stream(s2):
            s2.wait_event(mid)
            z = y.sum(dim=0)
        s2.synchronize()
        ref = (src.cpu().double() * 3 + 1)
        for _ in range(20):
            ref = ref.sin()
        ck.close("two streams with an event", z, ref.sum(dim=0), 1e-4)
        ck.true("event query after sync", mid.query())
        ck.true("elapsed_time >= 0", start.elapsed_time(mid) >= 0)

        # Cost of a small round trip as PyTorch makes it (an .item()).
        t = torch.ones(16, device=dev)
        for _ in range(20):
            t.sum().item()
        timed(torch, "small op + item()", lambda: t.add_(1).sum().item(), 200)
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
