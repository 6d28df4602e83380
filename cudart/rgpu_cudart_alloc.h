/* Device allocation shared by cudaMalloc/cudaFree (rgpu_cudart_memory.c)
 * and the stream-ordered allocator (rgpu_cudart_mempool.c): one path, so
 * cudaMallocAsync costs exactly what cudaMalloc does (usually no round
 * trip: the arena) and fails exactly where it would. */
#ifndef RGPU_CUDART_ALLOC_H
#define RGPU_CUDART_ALLOC_H

#include "rgpu_cudart.h"

/* size > 0 bytes on device dev: the arena or MEM_ALLOC.  On failure the
 * error is recorded as the thread's last (rgpu_rt_sync_ret) and returned. */
cudaError_t rgpu_rt_dev_alloc(rgpu_client *c, int dev, size_t size, void **devPtr);
/* Frees what rgpu_rt_dev_alloc returned (not NULL).  Nothing waits: an
 * arena block is reused only after a later device-wide synchronization
 * completed, a MEM_FREE is queued and runs after the device's earlier
 * work.  cudaErrorInvalidValue (recorded) for an unknown pointer. */
cudaError_t rgpu_rt_dev_free(rgpu_client *c, void *devPtr);

/* The server's own allocation, below the arena: MEM_ALLOC waiting for the
 * address (a CUresult or < 0), and MEM_FREE queued.  For memory that must
 * be a block of its own (arena chunks, managed memory's pages). */
rgpu_status rgpu_rt_server_alloc(rgpu_client *c, int dev, uint64_t size, uint64_t *dptr);
rgpu_status rgpu_rt_server_free(rgpu_client *c, int dev, uint64_t dptr);

/* Stream-ordered pools (rgpu_cudart_mempool.c): gives back every freed
 * block dev's pools keep for same-stream reuse (queued frees); 1 if there
 * were any.  An allocation about to fail calls it and tries again, so
 * kept blocks never cause an out-of-memory a local GPU would not have. */
int rgpu_rt_mempool_release_cached(rgpu_client *c, int dev);
/* cudaFree(p): 1 if p is a block a pool keeps (the program freed it
 * already with cudaFreeAsync: cudaErrorInvalidValue); else forgets p's
 * pool record if it has one (pool allocations may be freed by cudaFree). */
int rgpu_rt_mempool_on_free(uint64_t p);
/* cudaDeviceReset: the kept blocks' memory went with the context. */
void rgpu_rt_mempool_forget_device(int dev);

#endif
