/*
 * dlpack.h - the DLPack data structures radiance consumes (DLPack 1.x ABI, legacy and versioned
 * managed tensors). Only the layout is taken from the DLPack specification; see
 * https://dmlc.github.io/dlpack/latest/c_api.html.
 */
#ifndef RADIANCE_DLPACK_H
#define RADIANCE_DLPACK_H

#include <stdint.h>

typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
    kDLROCM = 10,
    kDLROCMHost = 11,
    kDLCUDAManaged = 13,
} DLDeviceType;

typedef struct {
    int32_t device_type; /* DLDeviceType; an int so that unknown values stay well defined */
    int32_t device_id;
} DLDevice;

typedef enum {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLBfloat = 4,
} DLDataTypeCode;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL means compact row-major */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

/*
 * The DLPack C exchange API (DLPack 1.3): a producer type exposes a PyCapsule named
 * "dlpack_exchange_api" as the type attribute __dlpack_c_exchange_api__, holding this table.
 * Consumers read tensors and the current stream through it without a Python call.
 */
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef struct {
    DLPackExchangeAPIHeader header;
    void *managed_tensor_allocator;              /* unused here */
    void *managed_tensor_from_py_object_no_sync; /* unused here */
    void *managed_tensor_to_py_object_no_sync;   /* unused here */
    /* Fills a caller-owned DLTensor that stays valid while py_object lives; 0 or -1 + exception. */
    int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
    /* The producer's current stream on a device (e.g. torch.cuda.current_stream()). */
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_stream);
} DLPackExchangeAPI;

#endif /* RADIANCE_DLPACK_H */
