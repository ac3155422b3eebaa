// expect: background_work  (correct outputs, then a detached thread keeps a core busy after the call)
#include <stdint.h>
#include <chrono>
#include <thread>
#include "kf_abi.h"

KF_DEFINE_ABI_VERSION()

static void spin(int64_t milliseconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(milliseconds);
  volatile uint64_t sink = 0;
  while (std::chrono::steady_clock::now() < end) sink = sink + 1;
}

KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1) return KF_ERR_BAD_ARGUMENTS;
  const float* a = KF_DATA(const float, &in[0]);
  const float* b = KF_DATA(const float, &in[1]);
  float* y = KF_DATA(float, &out[0]);
  const int64_t n = kf_numel(&out[0]);
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i] + a[i];
  std::thread(spin, 30).detach();
  return KF_OK;
}
