// expect: background_process  (correct outputs; the first call double-forks a daemon that sleeps)
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kf_abi.h"

KF_DEFINE_ABI_VERSION()

static int forked = 0;

KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1) return KF_ERR_BAD_ARGUMENTS;
  const float* a = KF_DATA(const float, &in[0]);
  const float* b = KF_DATA(const float, &in[1]);
  float* y = KF_DATA(float, &out[0]);
  const int64_t n = kf_numel(&out[0]);
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i] + a[i];
  if (!forked) {
    forked = 1;
    pid_t child = fork();
    if (child == 0) {
      setsid();
      if (fork() == 0) {
        sleep(60);
      }
      _exit(0);
    }
    waitpid(child, 0, 0);
  }
  return KF_OK;
}
