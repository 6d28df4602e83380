/* rgpu_managed_proto: the limits of MANAGED_PULL (proto/rgpu_messages.def),
 * shared by the client's runtime and the server.  Header-only. */
#ifndef RGPU_MANAGED_PROTO_H
#define RGPU_MANAGED_PROTO_H

/* The most bytes one MANAGED_PULL covers: its reply (bitmap + changed
 * chunks) stays well inside a frame. */
#define RGPU_MANAGED_PULL_MAX_BYTES (32ull << 20)
#define RGPU_MANAGED_CHUNK_MIN 4096u
#define RGPU_MANAGED_CHUNK_MAX (16u << 20)
/* The chunk the client asks for: a changed byte costs its whole chunk. */
#define RGPU_MANAGED_CHUNK 65536u

#endif
