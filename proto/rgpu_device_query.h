/* rgpu_device_query: the selectors of DEVICE_QUERY and the layout of its
 * args and values (proto/rgpu_messages.def).  Header-only: the client's
 * runtime and driver facade and the server use it. */
#ifndef RGPU_DEVICE_QUERY_H
#define RGPU_DEVICE_QUERY_H

/* DEVICE_QUERY's `what`. */
enum {
  /* device; args {CUarray_format, numChannels}; values {max width in elements} */
  RGPU_DQ_TEX1D_LINEAR_WIDTH = 1,
  /* device; args: CUatomicOperation each; values: a CUatomicOperationCapability mask each */
  RGPU_DQ_HOST_ATOMIC_CAPS = 2,
  /* device (source), peer (destination); args and values as HOST_ATOMIC_CAPS */
  RGPU_DQ_P2P_ATOMIC_CAPS = 3,
  /* module_id, func_index on the current device; args: RGPU_DQ_CFG_*; values {clusters} */
  RGPU_DQ_MAX_ACTIVE_CLUSTERS = 4,
  /* as MAX_ACTIVE_CLUSTERS; values {cluster size} */
  RGPU_DQ_MAX_CLUSTER_SIZE = 5,
  /* the current device's context; no args, no values */
  RGPU_DQ_RESET_PERSISTING_L2 = 6,
};

/* The args of the cluster selectors: a CUlaunchConfig without its stream
 * (the server's context of the bound device is the one used).  Cluster
 * dimensions 0 mean no CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, a policy of 0
 * (CU_CLUSTER_SCHEDULING_POLICY_DEFAULT) no scheduling policy attribute. */
enum {
  RGPU_DQ_CFG_GRID_X, RGPU_DQ_CFG_GRID_Y, RGPU_DQ_CFG_GRID_Z,
  RGPU_DQ_CFG_BLOCK_X, RGPU_DQ_CFG_BLOCK_Y, RGPU_DQ_CFG_BLOCK_Z,
  RGPU_DQ_CFG_SHARED_BYTES,
  RGPU_DQ_CFG_CLUSTER_X, RGPU_DQ_CFG_CLUSTER_Y, RGPU_DQ_CFG_CLUSTER_Z,
  RGPU_DQ_CFG_POLICY,
  RGPU_DQ_CFG_COUNT
};

/* The most args (and values) one DEVICE_QUERY carries (the message's
 * limit): longer operation lists are asked in pieces. */
#define RGPU_DQ_MAX_ARGS 64u

#endif
