// expect: output_not_written  (returns at once; a detached thread writes the outputs afterwards)
#include <stdint.h>
#include <chrono>
#include <thread>
#include "kf_abi.h"

KF_DEFINE_ABI_VERSION()

KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1) return KF_ERR_BAD_ARGUMENTS;
  const float* a = KF_DATA(const float, &in[0]);
  const float* b = KF_DATA(const float, &in[1]);
  float* y = KF_DATA(float, &out[0]);
  const int64_t n = kf_numel(&out[0]);
  std::thread([=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i] + a[i];
  }).detach();
  return KF_OK;
}
