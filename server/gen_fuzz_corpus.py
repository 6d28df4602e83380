#!/usr/bin/env python3
"""Writes seed inputs for rgpu_server_fuzz: frame sequences that reach every
handler with valid handles and pointers.  The fake driver's first
allocation is at 0x500000000000 and each 256-byte allocation advances 512."""
import os, struct, sys

BASE = 0x500000000000
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "fuzz_corpus")
os.makedirs(out, exist_ok=True)

def frame(op, payload, seq, reply=True):
    return struct.pack('<IBBHIIQ', 0x31504752, 1, 1, op, len(payload), 1 if reply else 0, seq) + payload
def u32(v): return struct.pack('<I', v)
def i32(v): return struct.pack('<i', v)
def u64(v): return struct.pack('<Q', v)
def strlist(xs): return u32(len(xs)) + b''.join(u32(len(x)) + x for x in xs)

seeds = {}
seq = iter(range(2, 1 << 30))
def F(op, p, reply=True): return frame(op, p, next(seq), reply)

seeds['memory'] = b''.join([
    F(0x20, u64(256)), F(0x20, u64(256)),
    F(0x22, u64(BASE) + u64(0) + b'x' * 256),
    F(0x23, u64(BASE) + u64(256) + u64(0)),
    F(0x24, u64(BASE + 512) + u64(BASE) + u64(256) + u64(0)),
    F(0x25, u64(BASE) + u32(7) + u32(4) + u64(64) + u64(0)),
    F(0x15, b''), F(0x21, u64(BASE + 512)), F(0x21, u64(BASE)),
])
mod = u64(9) + strlist([b'vecadd', b'hello', b'nope']) + strlist([b'gvar']) + u32(0) + b'STUB'  # u32(0): no image_hash
params = u64(BASE) + u64(BASE + 512) + u64(BASE + 1024) + i32(64)
seeds['module'] = b''.join([
    F(0x20, u64(256)), F(0x20, u64(256)), F(0x20, u64(256)),
    F(0x30, mod),
    F(0x32, u64(9) + u32(0) + u32(1) * 3 + u32(64) + u32(1) * 2 + u32(0) + u64(0) + params),
    F(0x32, u64(9) + u32(1) + u32(1) * 6 + u32(0) + u64(0), reply=False),
    F(0x33, u64(9) + u32(0)),
    F(0x31, u64(9)),
])
seeds['streams'] = b''.join([
    F(0x40, u64(5) + u32(0) + i32(0)), F(0x50, u64(1) + u32(0)), F(0x50, u64(2) + u32(0)),
    F(0x52, u64(1) + u64(5)), F(0x44, u64(5) + u64(1) + u32(0)), F(0x52, u64(2) + u64(5)),
    F(0x42, u64(5)), F(0x43, u64(5)), F(0x53, u64(2)), F(0x54, u64(2)),
    F(0x55, u64(1) + u64(2)), F(0x51, u64(1)), F(0x41, u64(5)),
])
seeds['device'] = b''.join([
    F(0x10, b''), F(0x11, u32(0)), F(0x12, u32(0)), F(0x13, b''), F(0x04, b''),
    F(0x03, b'ping'), F(0x14, u32(0)), F(0x02, b''),
])
# (Last, so that the
# sequence numbers of the seeds above stay as they were.)  Function attributes, occupancy, a cooperative and a cluster launch (issue 14), plus
# an attribute that may not be set.
seeds['features'] = b''.join([
    F(0x20, u64(256)), F(0x20, u64(256)), F(0x20, u64(256)),
    F(0x30, mod),
    F(0x34, u64(9) + u32(0) + i32(8) + i32(65536)),
    F(0x34, u64(9) + u32(0) + i32(9) + i32(50)),
    F(0x34, u64(9) + u32(0) + i32(0) + i32(1)),
    F(0x36, u64(9) + u32(0) + i32(128) + u64(0) + u32(0)),
    F(0x35, u64(9) + u32(0) + u32(1) * 3 + u32(64) + u32(1) * 2 + u32(0) + u64(0)
      + u32(1) + u32(0) * 3 + params),
    F(0x35, u64(9) + u32(0) + u32(2) + u32(1) * 2 + u32(64) + u32(1) * 2 + u32(0) + u64(0)
      + u32(0) + u32(2) + u32(1) * 2 + params),
    F(0x31, u64(9)),
])
# Library calls (LIB_CALL 0xB0, issue 16): a cuBLAS dot in host mode (a
# result: a reply after the stream) and an axpy in device mode, on the
# fake driver (so they reach the decoders and the GPU path's refusals).
def fnv(name):
    h = 2166136261
    for ch in name.encode():
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h
def lib_call(name, mode, args):
    return u32(1) + u32(fnv(name)) + u64(1) + u64(0) + u32(0) + u32(mode) + u32(0) + u64(0) + u64(0) + args
def i64(v): return struct.pack('<q', v)
seeds['libcall'] = b''.join([
    F(0x20, u64(256)), F(0x20, u64(256)),
    F(0xB0, lib_call('cublasSdot_v2', 0, i64(16) + u64(BASE) + i64(1) + u64(BASE + 512) + i64(1))),
    F(0xB0, lib_call('cublasSaxpy_v2', 1, i64(16) + u64(BASE) + u64(BASE) + i64(1) + u64(BASE + 512) + i64(1)),
      reply=False),
    F(0xB0, lib_call('cublasSgemv_v2_64', 0, i64(0) + i64(4) + i64(4) + u32(4) + b'\0\0\x80?' + u64(BASE)
      + i64(4) + u64(BASE) + i64(1) + u32(4) + b'\0\0\0\0' + u64(BASE + 512) + i64(1))),
])
# Peer access between devices (PEER_ACCESS 0x16, issue 19): ask, enable,
# enable again, disable, an unknown op and a device that does not exist
# (the fake driver has one device and no peer functions).
seeds['peer'] = b''.join([
    F(0x16, u32(0) + u32(0) + u32(0)), F(0x16, u32(0) + u32(1) + u32(0)),
    F(0x16, u32(0) + u32(1) + u32(1)), F(0x16, u32(0) + u32(1) + u32(1)),
    F(0x16, u32(0) + u32(1) + u32(2)), F(0x16, u32(0) + u32(0) + u32(9)),
    F(0x16, u32(7) + u32(0) + u32(0)),
])
# Managed pulls (MANAGED_PULL 0x2F): the first sends everything, the second
# nothing; the array, stream attribute and limit messages reach their
# handlers (the fake driver has none of them: NOT_SUPPORTED) and checks.
seeds['managed'] = b''.join([
    F(0x20, u64(8192)),
    F(0x2F, u64(BASE) + u64(8192) + u32(4096)), F(0x2F, u64(BASE) + u64(8192) + u32(4096)),
    F(0x28, u64(3) + u32(0x20) + u32(1) + u64(16) + u64(8) + u64(0) + u32(0)),
    F(0x2B, u32(2) + u64(0) + u64(BASE) + u32(0x20) + u32(1) + u64(64) + u64(0) + u64(0)
          + u32(0) * 7 + b'\0' * 28),
    F(0x2C, u64(12345)), F(0x29, u64(3)), F(0x21, u64(BASE)),
    # Stream attributes (0x45) and context limits (0x17).
    F(0x45, u64(0) + u32(0) + u32(3) + u64(0) + u32(0)),
    F(0x17, u32(2) + u32(1) + u64(1 << 20)), F(0x17, u32(2) + u32(0) + u64(0)),
])
# Device queries (DEVICE_QUERY 0x18): each question, one with an unknown
# selector, one with a device that does not exist, and the cluster ones on
# a loaded module (the fake driver has none of the functions: NOT_SUPPORTED).
def u32s(xs): return u32(len(xs)) + b''.join(u32(x) for x in xs)
def dq(what, dev=0, peer=0, module=0, func=0, args=()):
    return u32(what) + u32(dev) + u32(peer) + u64(module) + u32(func) + u32s(args)
cfg = [4, 1, 1, 128, 1, 1, 0, 1, 1, 1, 0]
seeds['query'] = b''.join([
    F(0x30, mod),
    F(0x18, dq(1, args=(0x20, 1))), F(0x18, dq(2, args=(0, 9, 10))),
    F(0x18, dq(3, peer=1, args=(0,))), F(0x18, dq(4, module=9, args=cfg)),
    F(0x18, dq(5, module=9, args=cfg)), F(0x18, dq(6)), F(0x18, dq(77)),
    F(0x18, dq(1, dev=5, args=(0x20, 1))),
])
# Virtual memory management (VMM 0x37): every op, an unknown one, a map of
# an unknown handle and outside any reservation (the fake driver has no VMM
# functions: NOT_SUPPORTED; softgpu's are checked by rgpu_handlers_test).
def vm(op, dev=0, flags=0, handle=0, ptr=0, size=0, arg=0):
    return u32(op) + u32(dev) + u64(flags) + u64(handle) + u64(ptr) + u64(size) + u64(arg)
seeds['vmm'] = b''.join([
    F(0x37, vm(1)), F(0x37, vm(2, size=2 << 20)), F(0x37, vm(4, handle=5, size=2 << 20)),
    F(0x37, vm(6, handle=5, ptr=BASE, size=2 << 20)), F(0x37, vm(6, handle=6, ptr=BASE, size=1)),
    F(0x37, vm(8, ptr=BASE, size=2 << 20, arg=3)), F(0x37, vm(7, ptr=BASE, size=2 << 20)),
    F(0x37, vm(5, handle=5)), F(0x37, vm(3, ptr=BASE, size=2 << 20)), F(0x37, vm(99)),
])
# Graphs (0x60-0x63): a memset and a D2H copy, then conditional nodes (a
# WHILE around a memset, an IF/ELSE, a nested WHILE) whose structure the
# server checks at instantiation; launches and an update of each.
def arr32(xs): return u32(len(xs)) + b''.join(u32(x) for x in xs)
def arr64(xs): return u32(len(xs)) + b''.join(u64(x) for x in xs)
def gnode(t, *w): return (t, list(w) + [0] * (12 - len(w)))
def gcreate(eid, nodes, edges):
    return (u64(eid) + u32(0) + arr32([t for t, _ in nodes]) + arr64([x for _, w in nodes for x in w]) +
            arr32([0] * len(nodes)) + u32(0) + arr32([x for e in edges for x in e]))
MS = lambda: gnode(3, BASE, 256, 7, 1, 256, 1)
COND = lambda kind, size, span: gnode(8, 0xC0D1000000000001, kind, size, 1, 1, span)
BODY = lambda b: gnode(9, b)
seeds['graphs'] = b''.join([
    F(0x20, u64(256)),
    F(0x60, gcreate(1, [MS(), gnode(2, 2, 0, BASE, 64, 1, 1, 64, 1, 64, 1)], [(0, 1)])),
    F(0x62, u64(1) + u64(0)),
    F(0x60, gcreate(2, [gnode(4), COND(1, 1, 2), BODY(0), MS()], [(0, 1), (2, 3)])),
    F(0x62, u64(2) + u64(0)),
    F(0x60, gcreate(3, [COND(0, 2, 4), BODY(0), MS(), BODY(1), MS()], [(1, 2), (3, 4)])),
    F(0x60, gcreate(4, [COND(0, 1, 4), BODY(0), COND(1, 1, 2), BODY(0), MS(), gnode(4)], [(0, 5)])),
    F(0x63, u64(2) + arr32([3]) + arr32([3]) + arr64(MS()[1]) + arr32([0]) + u32(0)),
    F(0x63, u64(2) + arr32([1]) + arr32([8]) + arr64(COND(1, 1, 2)[1]) + arr32([0]) + u32(0)),
    F(0x61, u64(2)), F(0x61, u64(3)), F(0x61, u64(4)), F(0x61, u64(1)),
])
# LINK (0x38): one PTX module, two (softgpu refuses), an option that is a
# pointer, lengths that do not add up.
PTX = b'.version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k()\n{\n ret;\n}\n\0'
def link(ids, vals, types, lens, names, data):
    return (arr32(ids) + arr64(vals) + arr32(types) + arr32(lens) + strlist(names) + data)
seeds['link'] = b''.join([
    F(0x38, link([7], [3], [1], [len(PTX)], [b'a.ptx'], PTX)),
    F(0x38, link([], [], [1, 1], [len(PTX)] * 2, [b'a', b'b'], PTX * 2)),
    F(0x38, link([3], [4096], [1], [len(PTX)], [b'a'], PTX)),
    F(0x38, link([], [], [1], [len(PTX) + 5], [b'a'], PTX)),
])
# TENSOR_MAP (0x39): a tiled 2-D map, a rank the arrays do not match, a
# replace with a short map (the fake driver has no encoder: NOT_SUPPORTED).
def tmap(kind, rank, dims, strides, box, estr, m=b''):
    return (u32(kind) + u32(7) + u32(rank) + u32(0) * 5 + u32(0) * 2 + i32(0) * 2 + u64(BASE) +
            arr64(dims) + arr64(strides) + arr32(box) + u32(0) + u32(0) + arr32(estr) + u32(len(m)) + m)
seeds['tensor_map'] = b''.join([
    F(0x20, u64(256)),
    F(0x39, tmap(0, 2, [64, 64], [256], [16, 16], [1, 1])),
    F(0x39, tmap(0, 3, [64, 64], [256], [16, 16], [1, 1])),
    F(0x39, tmap(3, 0, [], [], [], [], b'\0' * 100)),
])
# STREAM_MEMOP (0x48): writes, a barrier and a wait that holds on an
# allocation; a word outside it.
seeds['memop'] = b''.join([
    F(0x20, u64(256)),
    F(0x48, u64(0) + u32(0) + arr32([2, 5, 6, 1]) + arr32([0, 0, 0, 1]) + arr64([BASE, BASE + 8, 0, BASE]) +
      arr64([7, 1 << 40, 0, 7])),
    F(0x48, u64(0) + u32(0) + arr32([2]) + arr32([0]) + arr64([BASE + 4096]) + arr64([1])),
])
# Inputs starting with an odd byte run through the socket session loop.
for name, data in list(seeds.items()):
    seeds['serve_' + name] = b'\x01' + data
for name, data in seeds.items():
    with open(os.path.join(out, name), 'wb') as f:
        f.write(data)
