/* One operation value for the work that goes onto a stream.
 *
 * Every entry point that puts work on a stream (kernel launch, copy,
 * memset, event record, stream wait, host function) checks its arguments,
 * fills one rgpu_rt_op and hands it to rgpu_rt_submit.  Submit decides
 * where the operation goes: into the graph being captured on that stream
 * (it becomes a node: graph nodes store this same value), or onto the wire
 * (the request the server runs).  So there is one place that knows about
 * capture and one place per kind that knows the wire format, instead of a
 * capture hook in every path.
 *
 * An op built by an entry point borrows what it points at (the packed
 * kernel parameters live in the caller's buffer); a graph node owns its
 * copy (rgpu_cudart_graph_model.c deep-copies and frees it). */
#ifndef RGPU_CUDART_OP_H
#define RGPU_CUDART_OP_H

#include "rgpu_cudart.h"

typedef enum {
  RGPU_RT_OP_NONE = 0,
  RGPU_RT_OP_LAUNCH,
  RGPU_RT_OP_COPY,
  RGPU_RT_OP_MEMSET,
  RGPU_RT_OP_EVENT_RECORD,
  RGPU_RT_OP_EVENT_WAIT,
  RGPU_RT_OP_HOST_FUNC,
  RGPU_RT_OP_LIB_CALL
} rgpu_rt_op_kind;

typedef struct {
  rgpu_rt_op_kind kind;
  uint64_t stream; /* wire id of the stream it is issued on */
  int device;      /* device whose connection carries it */
  union {
    struct {
      rgpu_rt_func *kernel;
      uint64_t module_id;
      uint32_t func_index;
      dim3 grid, block;
      unsigned shmem;
      uint8_t *params; /* packed, `plen` bytes */
      size_t plen;
      /* The kernel's parameter layout (capture records the offsets for
       * cudaGraphKernelNodeGetParams); NULL in graph nodes. */
      const rgpu_param_layout *layout;
      /* cudaLaunchCooperativeKernel / cudaLaunchKernelEx: a cooperative
       * launch, a thread block cluster (0 = none): sent as LAUNCH_EX.
       * Never set in a graph node (a capture refuses such launches). */
      int cooperative;
      unsigned cluster[3];
    } launch;
    struct {
      /* Kind resolved (never cudaMemcpyDefault).  The wire side sends 1D
       * copies only (extent width x 1 x 1, dst/src at the pointers);
       * graph copy nodes use the whole 3D form. */
      struct cudaMemcpy3DParms cp;
      int async; /* 0: the synchronous API (cannot be captured) */
      /* The source may change or vanish once the call returns: a batch
       * copy with cudaMemcpySrcAccessOrderDuringApiCall, whose source is
       * typically a stack buffer.  A page-locked source of an asynchronous
       * copy is otherwise kept by reference for a resume (copy_htod), and
       * a replay after a reconnect would then send whatever the program
       * wrote there since (or read a dead stack frame); with this set its
       * bytes are copied as a pageable source's are.  Capture never takes
       * such a copy (the batch refuses it: the graph would read the source
       * at each launch). */
      int src_transient;
    } copy;
    /* Byte memsets from the runtime API (elementSize 1); the driver API
     * (cuMemsetD16/D32) and graph nodes also 2, 4 (width in elements). */
    struct cudaMemsetParams fill;
    struct {
      cudaEvent_t event;
      unsigned flags; /* cudaEventRecordExternal / cudaEventWaitExternal */
    } event;
    struct {
      struct cudaHostNodeParams params; /* fn and userData */
      /* cudaStreamAddCallback (then params.fn is NULL): not capturable. */
      cudaStreamCallback_t stream_cb;
      cudaStream_t handle; /* the stream as the program named it, for stream_cb */
    } host;
    /* A library call without a result (LIB_CALL: a cuBLAS gemm): the
     * request's fields and its encoded arguments.  Captured, it becomes a
     * host-side graph node (type cudaGraphNodeTypeHost, this kind) that
     * sends the same request, in stream order, at each launch: the node
     * owns its copy of args.
     * With opcode set, args is instead a whole encoded request of that
     * message (a cuDNN call) whose u64 stream field lies at byte stream_at;
     * each send patches in the stream it goes to. */
    struct {
      uint32_t opcode, stream_at;
      uint32_t lib, fn;
      uint64_t handle;
      uint32_t math_mode, pointer_mode, atomics_mode;
      uint64_t workspace, workspace_size;
      uint8_t *args;
      size_t args_len;
    } lib;
  };
} rgpu_rt_op;

/* The kernel's fixed fields in a designated initializer: the LAUNCH
 * request and the graph's kernel node (rgpu_gnode_kernel) name them alike,
 * so both are filled from one list.  op: a const rgpu_rt_op * of kind
 * launch. */
#define RGPU_RT_LAUNCH_FIXED_FIELDS(op)                                                     \
  .module_id = (op)->launch.module_id, .func_index = (op)->launch.func_index,               \
  .grid_x = (op)->launch.grid.x, .grid_y = (op)->launch.grid.y,                             \
  .grid_z = (op)->launch.grid.z, .block_x = (op)->launch.block.x,                           \
  .block_y = (op)->launch.block.y, .block_z = (op)->launch.block.z,                         \
  .shared_bytes = (op)->launch.shmem

/* 1D copy parameters: n bytes from src to dst. */
struct cudaMemcpy3DParms rgpu_rt_copy_1d(void *dst, const void *src, size_t n,
                                         enum cudaMemcpyKind kind);

/* Captures the op (its stream is capturing) or sends it.  Returns what the
 * API call returns, the thread's last error already recorded. */
cudaError_t rgpu_rt_submit(rgpu_client *c, const rgpu_rt_op *op);

/* ---- the two sides of submit ------------------------------------------ */

/* Capture side (rgpu_cudart_graph_capture.c): 1 when the op was taken by
 * a capture (or refused because of one), with *out the call's result; 0
 * means "send it".  Costs one relaxed atomic load while nothing captures. */
int rgpu_rt_capture_take(const rgpu_rt_op *op, cudaError_t *out);

/* Wire side of a library call: one LIB_CALL (or the op's pre-encoded
 * request) without a reply (a failure is deferred).  Returns the error,
 * not recorded. */
cudaError_t rgpu_rt_lib_call_send(rgpu_client *c, const rgpu_rt_op *op);

/* Submits a pre-encoded library request (a `graphnode` message of opcode
 * `opcode`, its u64 stream field at byte stream_at) on stream `wire` of
 * `device`, as an RGPU_RT_OP_LIB_CALL op: sent without a reply behind the
 * stream's backpressure, or a library node of the graph a capturing stream
 * builds.  Frees req's storage either way. */
cudaError_t rgpu_rt_submit_request(rgpu_client *c, int device, uint64_t wire, uint16_t opcode,
                                   size_t stream_at, rgpu_buf *req);
/* The same call as a node of an instantiated graph (a LIB node of
 * GRAPH_EXEC_CREATE, proto/rgpu_graph_nodes.def): appends the whole
 * request to out with its stream field zeroed (the server writes the
 * launch's stream there, or captures the call on a stream of its own) and
 * gives the field's offset in the request and the request's opcode.
 * cudaErrorMemoryAllocation when out cannot grow. */
cudaError_t rgpu_rt_lib_node_request(const rgpu_rt_op *op, rgpu_buf *out, size_t *stream_at,
                                     uint16_t *opcode);

/* Wire side of a host function (rgpu_cudart_callbacks.c: the callback
 * registry that answers the server's HOST_CALL lives there). */
cudaError_t rgpu_rt_host_func_send(rgpu_client *c, const rgpu_rt_op *op);
/* Before an operation goes onto `stream` (rgpu_rt_submit): waits, holding
 * no lock, while the stream holds as much as a driver takes behind its
 * oldest unanswered host function (rgpu_cudart_callbacks.c says why). */
void rgpu_rt_host_backpressure(rgpu_client *c, uint64_t stream, int host_fn);
/* cudaDeviceReset: the context's unanswered host functions will never run. */
void rgpu_rt_host_pending_forget(void);

/* ---- building a launch ------------------------------------------------- */

/* Checks the configuration, loads the module and packs args into buf
 * (buf_cap bytes; a larger kernel gets a malloc'd buffer: *heap is then
 * set and the caller frees it after submit).  Errors are returned, not
 * recorded (the caller does rgpu_rt_ret). */
cudaError_t rgpu_rt_launch_prepare(rgpu_client *c, rgpu_rt_func *f, dim3 grid, dim3 block,
                                   void **args, size_t shmem, cudaStream_t stream, int per_thread,
                                   uint8_t *buf, size_t buf_cap, uint8_t **heap, rgpu_rt_op *op);
/* Connects, prepares the launch (its packed parameters in a stack buffer
 * or on the heap) and hands the op to use, freeing the buffer after.  A
 * failed prepare returns its error recorded; otherwise what use returns.
 * Launches submit the op; kernel graph nodes copy it. */
typedef cudaError_t (*rgpu_rt_launch_use)(rgpu_client *c, const rgpu_rt_op *op, void *ctx);
cudaError_t rgpu_rt_launch_with(rgpu_rt_func *f, dim3 grid, dim3 block, void **args, size_t shmem,
                                cudaStream_t stream, int per_thread, rgpu_rt_launch_use use,
                                void *ctx);
/* The same for a library's cudaKernel_t (rgpu_cudart_library.c: the
 * driver facade's launch path), on the legacy stream: kernel graph nodes
 * made from it. */
cudaError_t rgpu_rt_driver_launch_with(const void *func, dim3 grid, dim3 block, void **args,
                                       size_t shmem, rgpu_rt_launch_use use, void *ctx);
/* Blocks of blockSize threads with dynamicSMemSize bytes of dynamic shared
 * memory that fit on one multiprocessor, estimated from the properties
 * (registers not counted): cudaOccupancyMaxActiveBlocksPerMultiprocessor's
 * answer and the cooperative launch check. */
int rgpu_rt_occupancy_estimate(const struct cudaDeviceProp *p, int blockSize,
                               size_t dynamicSMemSize);
/* The driver's exact occupancy for f on dev (OCCUPANCY: one round trip per
 * new configuration, cached per function; the estimate above where the
 * server's driver has no calculator).  Errors are returned, not recorded.
 * No cudart lock held. */
cudaError_t rgpu_rt_occupancy(rgpu_client *c, rgpu_rt_func *f, int dev, int block_size,
                              size_t smem, unsigned flags, int *out);
/* The host stub of a registered function (rgpu_cudart_register.c). */
const void *rgpu_rt_func_stub(const rgpu_rt_func *f);

#endif
