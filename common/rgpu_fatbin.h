/* rgpu_fatbin: reading nvcc fatbinaries and the cubins inside them.
 *
 * Used by the client library (to size, hash and send the images a program
 * registers, and to learn kernel parameter layouts when the server cannot
 * report them) and by softgpu (to find the PTX it interprets).  The format
 * is undocumented; /work/shared/notes/cuda-abi.md sections 2 and 3 describe
 * what was measured.  Every input is treated as hostile: all functions
 * bounds-check against the size they are given and never read past it.
 *
 * Memory: the caller owns everything it passes in.  Functions that allocate
 * say so and have a matching _free. */
#ifndef RGPU_FATBIN_H
#define RGPU_FATBIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RGPU_FATBIN_MAGIC 0xBA55ED50u          /* data header */
#define RGPU_FATBIN_WRAPPER_MAGIC 0x466243B1u  /* __fatBinC_Wrapper_t */
#define RGPU_FATBIN_HEADER_SIZE 16u
/* Larger images are refused: no real fatbin comes near it and it bounds
 * what a corrupted size field can make us allocate. */
#define RGPU_FATBIN_MAX_SIZE ((size_t)1 << 30)
/* Passed as `bound` when only the start of the image is known (a pointer
 * from __cudaRegisterFatBinary): the header's fat_size is trusted. */
#define RGPU_FATBIN_SIZE_UNKNOWN ((size_t)-1)
/* More entries than this in one image means corruption (-arch=all gives 13). */
#define RGPU_FATBIN_MAX_ENTRIES 4096u

enum {
  RGPU_FATBIN_KIND_PTX = 1,
  RGPU_FATBIN_KIND_ELF = 2,
};

enum {
  RGPU_FATBIN_FLAG_64BIT = 0x1,
  RGPU_FATBIN_FLAG_LINUX = 0x10,
  RGPU_FATBIN_FLAG_LZ4 = 0x2000,   /* raw LZ4 block */
  RGPU_FATBIN_FLAG_ZSTD = 0x8000,  /* standard zstd frame */
  RGPU_FATBIN_FLAG_ARCH_SPECIFIC = 0x100000, /* sm_90a and similar */
};

/* Results: 0 or one of these negative codes. */
enum {
  RGPU_FATBIN_OK = 0,
  RGPU_FATBIN_ERR_ARG = -1,         /* NULL pointer or bad argument */
  RGPU_FATBIN_ERR_MAGIC = -2,       /* not a fatbin / not an ELF */
  RGPU_FATBIN_ERR_TRUNCATED = -3,   /* a size field points past the buffer */
  RGPU_FATBIN_ERR_CORRUPT = -4,     /* inconsistent header fields */
  RGPU_FATBIN_ERR_TOO_LARGE = -5,   /* over RGPU_FATBIN_MAX_SIZE or the caller's limit */
  RGPU_FATBIN_ERR_NOMEM = -6,
  RGPU_FATBIN_ERR_DECOMPRESS = -7,  /* compressed payload did not decode to the declared size */
  RGPU_FATBIN_ERR_UNSUPPORTED = -8, /* unknown compression or ELF class */
  RGPU_FATBIN_ERR_NOT_FOUND = -9,   /* no entry / section of the requested kind */
};

/* A human-readable text for one of the codes above. */
const char *rgpu_fatbin_strerror(int err);

/* One entry of a fatbin.  `payload` points into the image given to
 * rgpu_fatbin_open and is valid only as long as that image. */
typedef struct {
  unsigned kind;            /* RGPU_FATBIN_KIND_* (others are listed, too) */
  unsigned arch;            /* 75 = sm_75 / compute_75 */
  unsigned ptx_major, ptx_minor;
  uint64_t flags;           /* RGPU_FATBIN_FLAG_* */
  size_t offset;            /* of the entry header from the image start */
  const uint8_t *payload;
  size_t payload_size;      /* bytes stored (compressed, padded) */
  size_t compressed_size;   /* 0 when not compressed */
  size_t uncompressed_size; /* declared size after decompression; 0 when not compressed */
} rgpu_fatbin_entry;

typedef struct {
  const uint8_t *image;
  size_t size;              /* header + fat_size */
  size_t nentries;
  rgpu_fatbin_entry *entries; /* allocated */
} rgpu_fatbin;

/* Total bytes (header included) of the fatbin starting at `image`, from its
 * header alone; 0 when the header is not a fatbin header or claims more
 * than RGPU_FATBIN_MAX_SIZE.  Reads 16 bytes. */
size_t rgpu_fatbin_image_size(const void *image);

/* Walks the fatbin at `image`.  `bound` is the number of readable bytes
 * there, or RGPU_FATBIN_SIZE_UNKNOWN to trust the header.  Trailing bytes
 * past the header's size (padding, further fatbins) are ignored.  Fills *out
 * (entries allocated: release with rgpu_fatbin_close). */
int rgpu_fatbin_open(const void *image, size_t bound, rgpu_fatbin *out);
void rgpu_fatbin_close(rgpu_fatbin *fb);

/* The PTX entry with the highest arch <= max_arch (max_arch 0: the highest
 * of all); NULL when there is none. */
const rgpu_fatbin_entry *rgpu_fatbin_best_ptx(const rgpu_fatbin *fb, unsigned max_arch);
/* Same for cubin (ELF) entries. */
const rgpu_fatbin_entry *rgpu_fatbin_best_elf(const rgpu_fatbin *fb, unsigned max_arch);

/* Copies one entry's payload, decompressed, into a new buffer (*out, free()
 * it) of *out_len bytes plus a NUL terminator that *out_len does not count,
 * so PTX text can be used as a C string.  For uncompressed PTX entries the
 * zero padding is trimmed.  `limit` caps the output size (0: the global
 * RGPU_FATBIN_MAX_SIZE). */
int rgpu_fatbin_extract(const rgpu_fatbin_entry *e, size_t limit, void **out, size_t *out_len);

/* Kernel parameter layouts from a cubin's .nv.info.<kernel> sections. */
typedef struct {
  uint32_t offset;
  uint32_t size;
} rgpu_fatbin_param;

typedef struct {
  char *name;               /* mangled kernel name */
  size_t nparams;
  rgpu_fatbin_param *params; /* by ordinal */
  size_t param_bytes;       /* CBANK_PARAM_SIZE when present, else end of the last param */
} rgpu_fatbin_kernel;

typedef struct {
  size_t nkernels;
  rgpu_fatbin_kernel *kernels;
} rgpu_fatbin_param_table;

/* Parses the ELF (cubin) in elf[0..len) and fills *out with one row per
 * kernel that has a .nv.info.<name> section (kernels without parameters
 * have nparams 0).  Allocates: release with rgpu_fatbin_param_table_free. */
int rgpu_fatbin_elf_params(const void *elf, size_t len, rgpu_fatbin_param_table *out);
void rgpu_fatbin_param_table_free(rgpu_fatbin_param_table *t);
const rgpu_fatbin_kernel *rgpu_fatbin_param_table_find(const rgpu_fatbin_param_table *t,
                                                       const char *name);

/* The same table from the .entry signatures of PTX text (natural or
 * declared alignment; a .align after .ptr is the pointee's and is ignored),
 * for images that carry no cubin.  Allocates like rgpu_fatbin_elf_params. */
int rgpu_fatbin_ptx_params(const char *ptx, size_t len, rgpu_fatbin_param_table *out);

/* Convenience for the client: the param table of the best ELF entry of a
 * fatbin (decompressing it when needed), or of its best PTX entry when it
 * holds no cubin.  RGPU_FATBIN_ERR_NOT_FOUND when it holds neither. */
int rgpu_fatbin_params(const rgpu_fatbin *fb, rgpu_fatbin_param_table *out);

/* The fatbin a __fatBinC_Wrapper_t (what __cudaRegisterFatBinary receives)
 * points to: checks the wrapper's magic and version (1, or 2 for -rdc
 * linked images) and returns its data pointer. */
int rgpu_fatbin_wrapper_data(const void *wrapper, const void **data, unsigned *version);

#ifdef __cplusplus
}
#endif
#endif
