// expect: timed_run_wrong  (correct for the first 6 calls, then returns scaled garbage cheaply)
#include <stdint.h>
#include "kf_abi.h"

KF_DEFINE_ABI_VERSION()

static int64_t calls = 0;

KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1) return KF_ERR_BAD_ARGUMENTS;
  const float* a = KF_DATA(const float, &in[0]);
  const float* b = KF_DATA(const float, &in[1]);
  float* y = KF_DATA(float, &out[0]);
  const int64_t n = kf_numel(&out[0]);
  if (++calls <= 6) {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i] + a[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i];
  }
  return KF_OK;
}
