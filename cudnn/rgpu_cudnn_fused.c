/* cudnnConvolutionBiasActivationForward: y = act(alpha1 conv(x, w) +
 * alpha2 z + bias), composed on the client from the calls rgpu already
 * carries (no new message): y = alpha2 z (cudnnAddTensor; skipped when z
 * is y, whose old value the convolution's beta blends in), the
 * convolution with beta 1 (or alpha2), the bias added, the ReLU in place.
 * All of them are queued on the handle's stream without a reply, so the
 * fused call costs no round trip either; the server checks each as it
 * does alone.  Everything cuDNN checks is checked here before the first
 * message, so a refused call sends nothing. */
#include "rgpu_cudnn_wire.h"
#include "rgpu_log.h"

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnConvolutionBiasActivationForward(
    cudnnHandle_t handle, const void *alpha1, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionFwdAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes,
    const void *alpha2, const cudnnTensorDescriptor_t zDesc, const void *z,
    const cudnnTensorDescriptor_t biasDesc, const void *bias,
    const cudnnActivationDescriptor_t activationDesc, const cudnnTensorDescriptor_t yDesc,
    void *y) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *xt = rgpu_cudnn_tensor(xDesc), *yt = rgpu_cudnn_set_tensor(yDesc);
  struct cudnnTensorStruct *zt = rgpu_cudnn_set_tensor(zDesc), *bt = rgpu_cudnn_set_tensor(biasDesc);
  struct cudnnActivationStruct *act = rgpu_cudnn_act(activationDesc);
  cudnnStatus_t st = !h ? CUDNN_STATUS_BAD_PARAM
                        : rgpu_cudnn_conv_check(xt, rgpu_cudnn_filter(wDesc),
                                                rgpu_cudnn_conv(convDesc), yt);
  if (!st && (!alpha1 || !alpha2 || !x || !w || !z || !bias || !y || !zt || !bt || !act ||
              (workSpaceSizeInBytes && !workSpace) || (int)algo < 0 ||
              (int)algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || !rgpu_cudnn_same_dims(zt, yt) ||
              zt->type != yt->type || bt->type != yt->type || bt->nb_dims != yt->nb_dims))
    st = CUDNN_STATUS_BAD_PARAM;
  /* The bias is 1xKx1x1 (its Nd form). */
  for (int i = 0; !st && i < bt->nb_dims; i++)
    if (bt->dim[i] != (i == 1 ? yt->dim[1] : 1)) st = CUDNN_STATUS_BAD_PARAM;
  /* cuDNN fuses ReLU, and the identity with IMPLICIT_PRECOMP_GEMM only. */
  if (!st && act->mode != CUDNN_ACTIVATION_RELU &&
      !(act->mode == CUDNN_ACTIVATION_IDENTITY &&
        algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cudnnConvolutionBiasActivationForward: activation mode %d with algorithm %d is "
                "not supported (cuDNN fuses ReLU, and the identity with IMPLICIT_PRECOMP_GEMM); "
                "it returns CUDNN_STATUS_NOT_SUPPORTED", act->mode, (int)algo);
    st = CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (st) return rgpu_cudnn_refused(st);
  /* 1 and 0 in the data's width (double for double data, float
   * otherwise), as cuDNN reads its host factors. */
  union {
    float f;
    double d;
  } unit, nothing;
  if (yt->type == CUDNN_DATA_DOUBLE) unit.d = 1.0, nothing.d = 0.0;
  else unit.f = 1.0f, nothing.f = 0.0f;
  const void *conv_beta = &unit;
  if (z == y)
    conv_beta = alpha2; /* y already holds z: the convolution's blend scales it */
  else if ((st = rgpu_cudnn_cudnnAddTensor(handle, alpha2, zDesc, z, &nothing, yDesc, y)))
    return st;
  if ((st = rgpu_cudnn_cudnnConvolutionForward(handle, alpha1, xDesc, x, wDesc, w, convDesc, algo,
                                               workSpace, workSpaceSizeInBytes, conv_beta, yDesc,
                                               y)) ||
      (st = rgpu_cudnn_cudnnAddTensor(handle, &unit, biasDesc, bias, &unit, yDesc, y)))
    return st;
  if (act->mode == CUDNN_ACTIVATION_IDENTITY) return CUDNN_STATUS_SUCCESS;
  return rgpu_cudnn_cudnnActivationForward(handle, activationDesc, &unit, yDesc, y, &nothing,
                                           yDesc, y);
}
