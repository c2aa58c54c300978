/*
 * tensor_view.h - NumPy arrays and DLPack tensors turned into one validated view.
 *
 * A view borrows the memory of the object it came from and keeps it alive until
 * rad_view_release(). Views are always contiguous, row-major and aligned to their element size.
 */
#ifndef RADIANCE_TENSOR_VIEW_H
#define RADIANCE_TENSOR_VIEW_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "dlpack.h"
#include "radiance/format.h"

/* Element types; the first three are enum rad_dtype of format.h, so that a view's dtype goes to
 * the kernels as it is. */
enum rad_view_dtype {
    RV_F32 = RAD_F32,
    RV_F16 = RAD_F16,
    RV_BF16 = RAD_BF16,
    RV_I32 = 3,
    RV_U8 = 4,
    RV_I8 = 5,
    RV_OTHER = 6,
};

/* Where the memory lives. */
enum rad_view_device { RV_HOST = 0, RV_CUDA = 1, RV_ROCM = 2 };

#define RV_MAX_DIMS 4

typedef struct {
    void *data;
    int dtype;
    int ndim;
    int64_t shape[RV_MAX_DIMS];
    int64_t nbytes; /* bytes from data to the end of the tensor: for overlap checks */
    int device;    /* enum rad_view_device */
    int device_id; /* GPU ordinal; 0 on the host */
    /* The producer's current stream on that device, where its exchange API tells it. */
    int has_current_stream;
    void *current_stream;
    /* Ownership: exactly one of these holds the memory alive. */
    PyObject *array;
    DLManagedTensor *legacy;
    DLManagedTensorVersioned *versioned;
} rad_view;

/* How an argument is used: inputs are read; outputs must be writable and are never copied. */
enum rad_view_access { RV_READ = 0, RV_WRITE = 1 };

/*
 * Fill `view` from obj: a NumPy array (any layout or byte order for inputs: non-contiguous,
 * misaligned or byte-swapped ones are copied; outputs must be C-contiguous, aligned, in native
 * byte order and writeable) or any object with __dlpack__ (must be contiguous; misaligned host
 * inputs are copied). Every field of a DLPack tensor is checked before its memory is touched. Producers with the DLPack C exchange API (torch) are read through it,
 * with no Python call and no synchronization: the consumer then launches on the producer's
 * current stream (view->current_stream) or a stream it was given. Other producers are asked
 * through __dlpack__(stream=stream, ...) and make their work visible on that stream; `stream` is
 * RV_STREAM_DEFAULT when none was given. Returns 0, or -1 with a Python exception naming `name`.
 */
#define RV_STREAM_DEFAULT (-2LL)
int rad_view_from_object(PyObject *obj, const char *name, int access, long long stream,
                         rad_view *view);
void rad_view_release(rad_view *view);

/* Makes an input view start on an `alignment`-byte boundary: host memory is copied into a fresh
 * NumPy array where it does not; GPU memory is refused. Returns 0, or -1 with an error. */
int rad_view_align(rad_view *view, int alignment, const char *name);

/* ValueError naming both arguments where two views on one device share bytes; else 0. */
int rad_view_check_disjoint(const rad_view *a, const char *a_name, const rad_view *b,
                            const char *b_name);

/* "float32", "bfloat16", ...: for messages. */
const char *rad_view_dtype_name(int dtype);

/* type(obj).__name__ (new reference), or NULL with an error: for messages, since the stable ABI
 * the module is built for (abi3) hides PyTypeObject's tp_name. */
PyObject *rad_type_name(PyObject *obj);

/* The dtype ml_dtypes.bfloat16 as a NumPy descriptor (new reference), or NULL with an error. */
PyObject *rad_bf16_descr(void);

#endif /* RADIANCE_TENSOR_VIEW_H */
