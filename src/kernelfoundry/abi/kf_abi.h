/*
 * KernelFoundry kernel ABI, version 1.
 *
 * Every compiled unit (C++/OpenMP through g++, CUDA through nvcc; room for HIP and SYCL) is a shared
 * library that exports:
 *
 *   int kf_abi_version(void);                      -- returns KF_ABI_VERSION the unit was built against
 *   int <entry>(const kf_tensor* inputs, int32_t n_inputs,
 *               kf_tensor* outputs, int32_t n_outputs, void* stream);
 *
 * The default entry point is named `kf_forward`; a unit may export several (a Python glue then picks).
 *
 * Inputs, in this order: every tensor that `get_inputs()` returns (Python scalars become 0-d tensors),
 * then every parameter of the reference module (`named_parameters()` order), then every buffer
 * (`named_buffers()` order). Outputs: the reference's outputs (a tensor or a tuple), preallocated by the
 * caller with the reference's shapes and dtypes. Outputs are poisoned (NaN / 0xFF..) before each call:
 * a unit must write every element.
 *
 * `stream` is the device stream the unit must enqueue its work on (a `cudaStream_t` for CUDA; NULL on
 * CPU). A unit must not leave work on any other stream when it returns.
 *
 * Return 0 on success; any other value is an error code (KF_ERR_*), reported as `kernel_error`.
 *
 * The tensor descriptor has the exact memory layout of DLPack's DLTensor (dlpack.h v0.8+), so
 * DLPack producers can hand tensors over without a copy. Strides are in elements, never NULL here.
 */
#ifndef KERNELFOUNDRY_KF_ABI_H
#define KERNELFOUNDRY_KF_ABI_H

#include <stdint.h>

#define KF_ABI_VERSION 1

#ifdef __cplusplus
#define KF_EXTERN_C extern "C"
#else
#define KF_EXTERN_C
#endif

#if defined(_WIN32)
#define KF_EXPORT KF_EXTERN_C __declspec(dllexport)
#else
#define KF_EXPORT KF_EXTERN_C __attribute__((visibility("default")))
#endif

/* DLPack's DLDeviceType values. */
typedef enum {
  KF_DEVICE_CPU = 1,
  KF_DEVICE_CUDA = 2,
  KF_DEVICE_ROCM = 10,
  KF_DEVICE_ONEAPI = 14,
} kf_device_type;

/* DLPack's DLDataTypeCode values. */
typedef enum {
  KF_DTYPE_INT = 0,
  KF_DTYPE_UINT = 1,
  KF_DTYPE_FLOAT = 2,
  KF_DTYPE_BFLOAT = 4,
  KF_DTYPE_BOOL = 6,
} kf_dtype_code;

typedef struct {
  int32_t device_type; /* kf_device_type */
  int32_t device_id;
} kf_device;

typedef struct {
  uint8_t code;   /* kf_dtype_code */
  uint8_t bits;   /* 16, 32, 64 ... */
  uint16_t lanes; /* 1 */
} kf_dtype;

typedef struct {
  void* data;
  kf_device device;
  int32_t ndim;
  kf_dtype dtype;
  int64_t* shape;
  int64_t* strides; /* in elements */
  uint64_t byte_offset;
} kf_tensor;

enum {
  KF_OK = 0,
  KF_ERR_BAD_ARGUMENTS = 1,   /* wrong count, dtype or shape of tensors */
  KF_ERR_UNSUPPORTED = 2,     /* a layout or size this unit does not handle */
  KF_ERR_LAUNCH = 3,          /* a device launch failed */
};

typedef int (*kf_entry_fn)(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs,
                           int32_t n_outputs, void* stream);

/* Convenience for units. */
static inline int64_t kf_numel(const kf_tensor* t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static inline int kf_is_contiguous(const kf_tensor* t) {
  int64_t expected = 1;
  for (int32_t i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expected) return 0;
    expected *= t->shape[i];
  }
  return 1;
}

#define KF_DATA(T, tensor) ((T*)((char*)(tensor)->data + (tensor)->byte_offset))

/* Every unit defines the version export with this macro. */
#define KF_DEFINE_ABI_VERSION() \
  KF_EXPORT int kf_abi_version(void) { return KF_ABI_VERSION; }

#endif /* KERNELFOUNDRY_KF_ABI_H */
