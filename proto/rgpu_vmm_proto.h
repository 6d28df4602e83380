/* rgpu_vmm_proto: the operations of message VMM (proto/rgpu_messages.def,
 * "Virtual memory management") and what each reads of the request.
 * Header-only: the driver facade (driver/rgpu_drv_vmm.c) and the server
 * (server/rgpu_handlers_vmm.c) use it.
 *
 *   op            fields read                          reply value
 *   GRANULARITY   device, flags (prop), arg (option)   the granularity
 *   RESERVE       size, arg (alignment), ptr (hint)    the reserved address
 *   ADDRESS_FREE  ptr, size                            -
 *   CREATE        handle (client id), size, device,    -
 *                 flags (prop)
 *   RELEASE       handle                               -
 *   MAP           ptr, size, arg (offset), handle      -
 *   UNMAP         ptr, size                            -
 *   SET_ACCESS    ptr, size, device, arg (flags)       -
 *   RETAIN        ptr                                  the handle (client id) mapped there
 *
 * Physical allocations are pinned device memory on `device`; `flags`
 * packs the CUmemAllocationProp fields that travel (the rest are fixed or
 * refused by the client). */
#ifndef RGPU_VMM_PROTO_H
#define RGPU_VMM_PROTO_H

#include <stdint.h>

enum {
  RGPU_VMM_GRANULARITY = 1,
  RGPU_VMM_RESERVE = 2,
  RGPU_VMM_ADDRESS_FREE = 3,
  RGPU_VMM_CREATE = 4,
  RGPU_VMM_RELEASE = 5,
  RGPU_VMM_MAP = 6,
  RGPU_VMM_UNMAP = 7,
  RGPU_VMM_SET_ACCESS = 8,
  RGPU_VMM_RETAIN = 9
};

/* allocFlags of CUmemAllocationProp in `flags`: compression type (8 bits),
 * GPUDirect RDMA capable (8), usage (16). */
#define RGPU_VMM_PROP(compression, rdma, usage)                                                \
  ((uint64_t)((compression) & 0xffu) | ((uint64_t)((rdma) & 0xffu) << 8) |                      \
   ((uint64_t)((usage) & 0xffffu) << 16))
#define RGPU_VMM_PROP_COMPRESSION(f) ((unsigned)((f) & 0xffu))
#define RGPU_VMM_PROP_RDMA(f) ((unsigned)(((f) >> 8) & 0xffu))
#define RGPU_VMM_PROP_USAGE(f) ((unsigned)(((f) >> 16) & 0xffffu))

#endif
