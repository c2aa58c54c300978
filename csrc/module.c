/*
 * module.c - radiance._C: argument parsing, validation and dispatch to the CPU or GPU kernels.
 *
 * Every function turns its arguments into rad_views (tensor_view.c), checks shapes, dtypes and
 * devices with messages that name the argument, releases the GIL around the work and turns
 * every failure into a Python exception. Host memory runs the C kernels of cpu_kernels.c; GPU
 * memory runs the kernels of hip/ through csrc/include/radiance/radiance_gpu.h (in GPU builds only).
 *
 * Longer than 700 lines on purpose: it is the one place where Python arguments become C values,
 * for five entry points that share the same converters (group_size, clip, stream), the overlap and
 * device checks and the GIL/device guard; splitting it by entry point would spread those checks.
 */
#define PY_ARRAY_UNIQUE_SYMBOL radiance_ARRAY_API
#include "tensor_view.h"

#include <numpy/arrayobject.h>

#include "cpu_kernels.h"

#ifdef RADIANCE_WITH_GPU
#include "radiance/radiance_gpu.h"
#endif

#define MAX_VIEWS 5

/* The views of one call, released together on every path out. */
typedef struct {
    rad_view views[MAX_VIEWS];
    int count;
} view_set;

static rad_view *take_view(view_set *set, PyObject *obj, const char *name, int access,
                           long long stream) {
    rad_view *view = &set->views[set->count];
    if (rad_view_from_object(obj, name, access, stream, view) < 0) return NULL;
    set->count++;
    return view;
}

static void release_views(view_set *set) {
    for (int i = 0; i < set->count; i++) rad_view_release(&set->views[i]);
    set->count = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Argument checks                                                                            */

static int parse_stream(PyObject *obj, long long *stream) {
    if (obj == Py_None) {
        *stream = RV_STREAM_DEFAULT; /* the producer's current stream, else the default one */
        return 0;
    }
    if (!PyLong_Check(obj)) {
        PyObject *type_name = rad_type_name(obj);
        if (type_name)
            PyErr_Format(PyExc_TypeError,
                         "stream must be an int (a cudaStream_t/hipStream_t handle) or None, not %.100U",
                         type_name);
        Py_XDECREF(type_name);
        return -1;
    }
    *stream = PyLong_AsLongLong(obj);
    if (*stream == -1 && PyErr_Occurred()) return -1;
    if (*stream < 0) {
        PyErr_SetString(PyExc_ValueError, "stream must be a stream handle (>= 0)");
        return -1;
    }
    return 0;
}

/* PyArg "O&" converter: group_size as an int of {32, 64, 128, 256}. Any integer (NumPy's too)
 * is taken; one too large for a C int is out of range like any other, not an OverflowError. */
static int group_size_arg(PyObject *obj, void *out) {
    if (!PyIndex_Check(obj) || PyBool_Check(obj)) {
        PyObject *type_name = rad_type_name(obj);
        if (type_name)
            PyErr_Format(PyExc_TypeError, "group_size must be an int (32, 64, 128 or 256), not %.100U",
                         type_name);
        Py_XDECREF(type_name);
        return 0;
    }
    PyObject *index = PyNumber_Index(obj);
    if (!index) return 0;
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (value == -1 && PyErr_Occurred()) return 0;
    if (overflow || value < 0 || value > 0x7fffffff || !RAD_GROUP_OK((int)value)) {
        PyErr_Format(PyExc_ValueError, "group_size must be one of 32, 64, 128, 256, got %R", obj);
        return 0;
    }
    *(int *)out = (int)value;
    return 1;
}

/* PyArg "O&" converter: clip as a str (its name is checked by the caller). */
static int clip_arg(PyObject *obj, void *out) {
    if (!PyUnicode_Check(obj)) {
        PyObject *type_name = rad_type_name(obj);
        if (type_name)
            PyErr_Format(PyExc_TypeError, "clip must be a str naming the clip mode, not %.100U", type_name);
        Py_XDECREF(type_name);
        return 0;
    }
    Py_ssize_t length;
    const char *name = PyUnicode_AsUTF8AndSize(obj, &length);
    if (!name) return 0;
    if ((size_t)length != strlen(name)) {
        PyErr_SetString(PyExc_ValueError, "clip contains a NUL character");
        return 0;
    }
    *(const char **)out = name; /* lives as long as obj, an argument of the call */
    return 1;
}


static int check_ndim(const rad_view *v, const char *name, int ndim, const char *layout) {
    if (v->ndim == ndim) return 0;
    PyErr_Format(PyExc_ValueError, "%s must have %d dimension%s %s, got %d", name, ndim,
                 ndim == 1 ? "" : "s", layout, v->ndim);
    return -1;
}

static int check_dtype(const rad_view *v, const char *name, int dtype) {
    if (v->dtype == dtype) return 0;
    PyErr_Format(PyExc_TypeError, "%s must be %s, got %s", name, rad_view_dtype_name(dtype),
                 rad_view_dtype_name(v->dtype));
    return -1;
}

static int check_float_dtype(const rad_view *v, const char *name) {
    if (v->dtype == RV_F32 || v->dtype == RV_F16 || v->dtype == RV_BF16) return 0;
    PyErr_Format(PyExc_TypeError,
                 "%s must be bfloat16 (ml_dtypes.bfloat16), float16 or float32, got %s", name,
                 rad_view_dtype_name(v->dtype));
    return -1;
}

static int check_shape2(const rad_view *v, const char *name, int64_t rows, int64_t cols,
                        const char *what) {
    if (v->shape[0] == rows && v->shape[1] == cols) return 0;
    PyErr_Format(PyExc_ValueError, "%s must have shape %s = (%lld, %lld), got (%lld, %lld)", name,
                 what, (long long)rows, (long long)cols, (long long)v->shape[0],
                 (long long)v->shape[1]);
    return -1;
}

#ifdef RADIANCE_WITH_GPU
/* The stream to launch on: the one given, else the producer's current stream (known through the
 * DLPack exchange API), else the default stream. */
static void *launch_stream(long long stream, const rad_view *first) {
    if (stream != RV_STREAM_DEFAULT) return (void *)(intptr_t)stream;
    return first->has_current_stream ? first->current_stream : NULL;
}
#endif

/* All views on one device; returns that device, or -1 with an error. */
static int common_device(const view_set *set, const char *const *names) {
    const rad_view *first = &set->views[0];
    for (int i = 1; i < set->count; i++) {
        const rad_view *v = &set->views[i];
        if (v->device != first->device || v->device_id != first->device_id) {
            PyErr_Format(PyExc_ValueError,
                         "%s and %s are on different devices (%s:%d and %s:%d); move them to one",
                         names[0], names[i], first->device == RV_HOST ? "cpu" : "gpu",
                         first->device_id, v->device == RV_HOST ? "cpu" : "gpu", v->device_id);
            return -1;
        }
    }
    return first->device;
}

static PyObject *new_array(int nd, int64_t d0, int64_t d1, int typenum) {
    npy_intp dims[2] = {(npy_intp)d0, (npy_intp)d1};
    if (typenum >= 0) return PyArray_SimpleNew(nd, dims, typenum);
    PyObject *descr = rad_bf16_descr(); /* bf16; stolen by the call below */
    if (!descr) return NULL;
    return PyArray_SimpleNewFromDescr(nd, dims, (PyArray_Descr *)descr);
}

#define NEW_BF16 (-1)

/* ------------------------------------------------------------------------------------------ */
/* GPU dispatch                                                                               */

#ifdef RADIANCE_WITH_GPU
static int gpu_error(int code, const char *what) {
    if (code == RADIANCE_GPU_EINVAL)
        PyErr_Format(PyExc_ValueError, "%s: the GPU kernels refused these arguments", what);
    else
        PyErr_Format(PyExc_RuntimeError, "%s failed on the GPU: %s (error %d)", what,
                     radiance_gpu_error_string(code), code);
    return -1;
}

/*
 * Makes `device` current for the call and, after it, makes the caller's device current again if
 * that device has a context. Since CUDA 12, setting a device creates its primary context (hundreds
 * of MB of GPU memory) when it has none: a thread that never used its current device (a new thread
 * is on device 0) and calls us with tensors on cuda:1 would otherwise leave a context on cuda:0
 * that nothing asked for. Such a thread is left on the tensors' device instead, as torch's device
 * guard does (c10::cuda::MaybeExchangeDevice): a device without a context was never used, so
 * nothing the caller made lives there; what changes is that the thread's runtime device (and so
 * torch.cuda.current_device() in it) is then the tensors' device until the caller sets one.
 * The state is read on entry, before this call can have changed it; where it cannot be told (-1),
 * the caller's device is restored as always. `device` is the call's device (unused: `restore`
 * already says whether it differs from the caller's).
 */
typedef struct {
    int previous;
    int restore; /* make `previous` current again on leaving */
} device_guard;

static int enter_device(device_guard *guard, int device, const char *what) {
    int code = radiance_gpu_get_device(&guard->previous);
    guard->restore = 0;
    if (code == 0 && guard->previous != device) {
        guard->restore = radiance_gpu_device_has_context(guard->previous) != 0;
        code = radiance_gpu_set_device(device);
    }
    return code ? gpu_error(code, what) : 0;
}

static void leave_device(device_guard *guard, int device) {
    (void)device;
    if (guard->restore) radiance_gpu_set_device(guard->previous);
}
#endif

/* Refuses GPU memory this build cannot reach. */
static int check_gpu_reachable(int device, const char *name) {
#ifdef RADIANCE_WITH_GPU
    const int native = strcmp(radiance_gpu_backend(), "rocm") == 0 ? RV_ROCM : RV_CUDA;
    if (device == native) return 0;
    PyErr_Format(PyExc_ValueError, "%s is %s memory, but this radiance was built for %s", name,
                 device == RV_CUDA ? "CUDA" : "ROCm", radiance_gpu_backend());
    return -1;
#else
    (void)device;
    PyErr_Format(PyExc_ValueError,
                 "%s is GPU memory, but this radiance was built without a GPU backend; "
                 "reinstall it where ROCm or CUDA is found (RADIANCE_GPU=rocm|cuda)",
                 name);
    return -1;
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* quantize_rows                                                                              */

static int parse_clip(const char *clip_name, PyObject *act_obj, int *clip) {
    if (strcmp(clip_name, "mse") == 0) *clip = RAD_CLIP_MSE;
    else if (strcmp(clip_name, "rtn") == 0) *clip = RAD_CLIP_RTN;
    else if (strcmp(clip_name, "act") == 0) *clip = RAD_CLIP_ACT;
    else {
        PyErr_Format(PyExc_ValueError, "clip must be 'mse', 'rtn' or 'act', got '%s'", clip_name);
        return -1;
    }
    if (*clip == RAD_CLIP_ACT && act_obj == Py_None) {
        PyErr_SetString(PyExc_ValueError,
                        "clip='act' needs activation_sq= (float32 [K]: the mean of x^2 per input "
                        "channel over calibration hidden states)");
        return -1;
    }
    if (*clip != RAD_CLIP_ACT && act_obj != Py_None) {
        PyErr_Format(PyExc_ValueError,
                     "activation_sq is used by clip='act' only, but clip='%s'; pass "
                     "clip='act' or leave activation_sq out",
                     clip_name);
        return -1;
    }
    return 0;
}

/* The act error weights [cols] (rad_cpu_act_weights) of activation_sq, a float32 [cols] array in
 * host memory, as a new PyMem buffer; NULL with an exception naming activation_sq. */
static float *act_weights_from(view_set *set, PyObject *act_obj, int64_t cols, int group_size) {
    rad_view *a = take_view(set, act_obj, "activation_sq", RV_READ, 0);
    if (!a || check_ndim(a, "activation_sq", 1, "[K]") < 0) return NULL;
    if (a->device != RV_HOST) {
        PyErr_SetString(PyExc_ValueError,
                        "activation_sq must be in host memory here (a NumPy array or a CPU "
                        "tensor); radiance.quantize_rows copies a torch GPU tensor itself");
        return NULL;
    }
    if (a->dtype != RV_F32) {
        PyErr_Format(PyExc_TypeError, "activation_sq must be float32, got %s",
                     rad_view_dtype_name(a->dtype));
        return NULL;
    }
    if (a->shape[0] != cols) {
        PyErr_Format(PyExc_ValueError,
                     "activation_sq must have shape (K,) = (%lld,), one entry per column of w, "
                     "got (%lld,)",
                     (long long)cols, (long long)a->shape[0]);
        return NULL;
    }
    const float *values = (const float *)a->data;
    const int64_t bad = rad_cpu_first_bad_activation_sq(values, cols);
    if (bad >= 0) {
        PyObject *value = PyFloat_FromDouble((double)values[bad]);
        if (value)
            PyErr_Format(PyExc_ValueError,
                         "activation_sq[%lld] is %R; every entry must be finite and >= 0 (a "
                         "mean of squares)",
                         (long long)bad, value);
        Py_XDECREF(value);
        return NULL;
    }
    float *weights = (float *)PyMem_Malloc(sizeof(float) * (size_t)cols);
    if (!weights) {
        PyErr_NoMemory();
        return NULL;
    }
    rad_cpu_act_weights(values, cols, group_size, weights);
    return weights;
}

static PyObject *py_quantize_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"w",          "group_size", "clip",   "activation_sq",
                             "packed_out", "scales_out", "stream", NULL};
    PyObject *w_obj, *act_obj = Py_None, *packed_obj = Py_None, *scales_obj = Py_None,
                     *stream_obj = Py_None;
    int group_size = 128;
    const char *clip_name = "mse";
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O&O&$OOOO:quantize_rows", kwlist, &w_obj,
                                     group_size_arg, &group_size, clip_arg, &clip_name, &act_obj,
                                     &packed_obj, &scales_obj, &stream_obj))
        return NULL;
    long long stream;
    int clip;
    if (parse_stream(stream_obj, &stream) < 0 || parse_clip(clip_name, act_obj, &clip) < 0)
        return NULL;

    view_set set = {.count = 0};
    PyObject *packed_new = NULL, *scales_new = NULL, *result = NULL;
    float *act_weights = NULL;
    rad_view *w = take_view(&set, w_obj, "w", RV_READ, stream);
    if (!w || check_ndim(w, "w", 2, "[rows, cols]") < 0 || check_float_dtype(w, "w") < 0)
        goto done;
    const int64_t rows = w->shape[0], cols = w->shape[1];
    if (cols == 0 || cols % group_size != 0) {
        PyErr_Format(PyExc_ValueError,
                     "w has %lld columns; quantize_rows needs a positive multiple of "
                     "group_size=%d",
                     (long long)cols, group_size);
        goto done;
    }
    const int64_t words = cols / 8, groups = cols / group_size;
    if (clip == RAD_CLIP_ACT) {
        /* Its view is released at once: the weights are a copy, and the device checks below
         * compare w with the outputs only. */
        view_set act_set = {.count = 0};
        act_weights = act_weights_from(&act_set, act_obj, cols, group_size);
        release_views(&act_set);
        if (!act_weights) goto done;
    }

    if (w->device != RV_HOST) {
        static const char *const names[] = {"w", "packed_out", "scales_out"};
        if (check_gpu_reachable(w->device, "w") < 0) goto done;
        if (packed_obj == Py_None || scales_obj == Py_None) {
            PyErr_SetString(PyExc_TypeError,
                            "for GPU tensors pass packed_out= and scales_out= "
                            "(radiance.quantize_rows allocates them for torch tensors)");
            goto done;
        }
        rad_view *packed = take_view(&set, packed_obj, "packed_out", RV_WRITE, stream);
        rad_view *scales = packed ? take_view(&set, scales_obj, "scales_out", RV_WRITE, stream)
                                  : NULL;
        if (!scales || common_device(&set, names) < 0 ||
            check_ndim(packed, "packed_out", 2, "[rows, cols/8]") < 0 ||
            check_dtype(packed, "packed_out", RV_I32) < 0 ||
            check_shape2(packed, "packed_out", rows, words, "(rows, cols/8)") < 0 ||
            check_ndim(scales, "scales_out", 2, "[rows, cols/group_size]") < 0 ||
            check_dtype(scales, "scales_out", RV_BF16) < 0 ||
            check_shape2(scales, "scales_out", rows, groups, "(rows, cols/group_size)") < 0 ||
            rad_view_check_disjoint(packed, "packed_out", w, "w") < 0 ||
            rad_view_check_disjoint(scales, "scales_out", w, "w") < 0 ||
            rad_view_check_disjoint(scales, "scales_out", packed, "packed_out") < 0)
            goto done;
#ifdef RADIANCE_WITH_GPU
        int64_t bad_row = -1;
        int code = 0;
        device_guard guard;
        if (rows > 0) {
            if (enter_device(&guard, w->device_id, "quantize_rows") < 0) goto done;
            Py_BEGIN_ALLOW_THREADS
            if (clip == RAD_CLIP_ACT)
                code = radiance_gpu_quantize_rows_act(
                    w->data, w->dtype, rows, cols, group_size, act_weights,
                    (int32_t *)packed->data, (uint16_t *)scales->data, &bad_row,
                    launch_stream(stream, w));
            else
                code = radiance_gpu_quantize_rows(w->data, w->dtype, rows, cols, group_size,
                                                  clip, (int32_t *)packed->data,
                                                  (uint16_t *)scales->data, &bad_row,
                                                  launch_stream(stream, w));
            Py_END_ALLOW_THREADS
            leave_device(&guard, w->device_id);
        }
        if (code) {
            gpu_error(code, "quantize_rows");
            goto done;
        }
        if (bad_row >= 0) {
            PyErr_Format(PyExc_ValueError,
                         "w has a non-finite value (NaN or inf) in row %lld; it would poison "
                         "its whole group",
                         (long long)bad_row);
            goto done;
        }
        result = PyTuple_Pack(2, packed_obj, scales_obj);
#endif
        goto done;
    }

    /* Host memory. */
    int64_t bad_row;
    Py_BEGIN_ALLOW_THREADS
    bad_row = rad_cpu_first_nonfinite_row(w->data, w->dtype, rows, cols);
    Py_END_ALLOW_THREADS
    if (bad_row >= 0) {
        PyErr_Format(PyExc_ValueError,
                     "w has a non-finite value (NaN or inf) in row %lld; it would poison its "
                     "whole group",
                     (long long)bad_row);
        goto done;
    }
    PyObject *packed_target = packed_obj, *scales_target = scales_obj;
    if (packed_obj == Py_None) packed_target = packed_new = new_array(2, rows, words, NPY_INT32);
    if (packed_target && scales_obj == Py_None)
        scales_target = scales_new = new_array(2, rows, groups, NEW_BF16);
    if (!packed_target || !scales_target) goto done;
    {
        static const char *const names[] = {"w", "packed_out", "scales_out"};
        rad_view *packed = take_view(&set, packed_target, "packed_out", RV_WRITE, stream);
        rad_view *scales = packed ? take_view(&set, scales_target, "scales_out", RV_WRITE, stream)
                                  : NULL;
        if (!scales || common_device(&set, names) < 0 ||
            check_dtype(packed, "packed_out", RV_I32) < 0 ||
            check_ndim(packed, "packed_out", 2, "[rows, cols/8]") < 0 ||
            check_shape2(packed, "packed_out", rows, words, "(rows, cols/8)") < 0 ||
            check_dtype(scales, "scales_out", RV_BF16) < 0 ||
            check_ndim(scales, "scales_out", 2, "[rows, cols/group_size]") < 0 ||
            check_shape2(scales, "scales_out", rows, groups, "(rows, cols/group_size)") < 0 ||
            rad_view_check_disjoint(packed, "packed_out", w, "w") < 0 ||
            rad_view_check_disjoint(scales, "scales_out", w, "w") < 0 ||
            rad_view_check_disjoint(scales, "scales_out", packed, "packed_out") < 0)
            goto done;
        int status;
        Py_BEGIN_ALLOW_THREADS
        status = rad_cpu_quantize_rows(w->data, w->dtype, rows, cols, group_size, clip,
                                       act_weights, (int32_t *)packed->data,
                                       (uint16_t *)scales->data);
        Py_END_ALLOW_THREADS
        (void)status; /* -1 only means fewer threads ran; the result is complete either way */
        result = PyTuple_Pack(2, packed_target, scales_target);
    }
done:
    release_views(&set);
    PyMem_Free(act_weights);
    Py_XDECREF(packed_new);
    Py_XDECREF(scales_new);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* pack_shuffle / unpack_shuffle / dequantize (host memory)                                   */

static int check_host(const rad_view *v, const char *name, const char *function) {
    if (v->device == RV_HOST) return 0;
    PyErr_Format(PyExc_ValueError,
                 "%s: _C.%s runs on host memory; radiance.%s handles GPU tensors", name, function,
                 function);
    return -1;
}

static PyObject *py_pack_shuffle(PyObject *self, PyObject *arg) {
    (void)self;
    view_set set = {.count = 0};
    PyObject *result = NULL;
    rad_view *v = take_view(&set, arg, "nibbles", RV_READ, 0);
    if (!v || check_host(v, "nibbles", "pack_shuffle") < 0 ||
        check_ndim(v, "nibbles", 2, "[rows, cols]") < 0 || check_dtype(v, "nibbles", RV_U8) < 0)
        goto done;
    const int64_t rows = v->shape[0], cols = v->shape[1];
    if (cols % 8 != 0) {
        PyErr_Format(PyExc_ValueError, "nibbles has %lld columns; a multiple of 8 is needed",
                     (long long)cols);
        goto done;
    }
    int64_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = rad_cpu_first_bad_nibble((const uint8_t *)v->data, rows * cols);
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError,
                     "nibbles[%lld, %lld] = %d; nibbles must be in 0..15 (q + 8)",
                     (long long)(bad / cols), (long long)(bad % cols),
                     (int)((const uint8_t *)v->data)[bad]);
        goto done;
    }
    result = new_array(2, rows, cols / 8, NPY_INT32);
    if (!result) goto done;
    Py_BEGIN_ALLOW_THREADS
    rad_cpu_pack_shuffle((const uint8_t *)v->data, rows, cols,
                         (int32_t *)PyArray_DATA((PyArrayObject *)result));
    Py_END_ALLOW_THREADS
done:
    release_views(&set);
    return result;
}

static PyObject *py_unpack_shuffle(PyObject *self, PyObject *arg) {
    (void)self;
    view_set set = {.count = 0};
    PyObject *result = NULL;
    rad_view *v = take_view(&set, arg, "words", RV_READ, 0);
    if (!v || check_host(v, "words", "unpack_shuffle") < 0 ||
        check_ndim(v, "words", 2, "[rows, cols/8]") < 0 || check_dtype(v, "words", RV_I32) < 0)
        goto done;
    if (v->shape[1] > NPY_MAX_INTP / 8) {
        PyErr_Format(PyExc_ValueError,
                     "words has %lld words per row; their nibbles (8 per word) would not fit in "
                     "memory",
                     (long long)v->shape[1]);
        goto done;
    }
    const int64_t rows = v->shape[0], cols = v->shape[1] * 8;
    result = new_array(2, rows, cols, NPY_UINT8);
    if (!result) goto done;
    Py_BEGIN_ALLOW_THREADS
    rad_cpu_unpack_shuffle((const int32_t *)v->data, rows, cols,
                           (uint8_t *)PyArray_DATA((PyArrayObject *)result));
    Py_END_ALLOW_THREADS
done:
    release_views(&set);
    return result;
}

/* packed int32 [N, K/8] (or the int8 view [N, K/2] of the same bytes that vLLM keeps) and bf16
 * scales [N, K/G]: checks them and returns K, or -1. */
static int64_t check_packed_head(const rad_view *packed, const rad_view *scales, int group_size) {
    if (check_ndim(packed, "packed", 2, "[N, K/8]") < 0) return -1;
    if (packed->dtype != RV_I32 && packed->dtype != RV_I8) {
        PyErr_Format(PyExc_TypeError,
                     "packed must be int32 [N, K/8] (or its int8 view [N, K/2]), got %s",
                     rad_view_dtype_name(packed->dtype));
        return -1;
    }
    if (packed->dtype == RV_I8 && packed->shape[1] % 4 != 0) {
        PyErr_Format(PyExc_ValueError,
                     "packed is an int8 view with %lld columns; whole int32 words need a "
                     "multiple of 4",
                     (long long)packed->shape[1]);
        return -1;
    }
    if (packed->shape[1] > NPY_MAX_INTP / 64) { /* K and K floats of dequantize fit in memory */
        PyErr_Format(PyExc_ValueError, "packed has %lld columns; that many do not fit in memory",
                     (long long)packed->shape[1]);
        return -1;
    }
    if (check_ndim(scales, "scales", 2, "[N, K/group_size]") < 0 ||
        check_dtype(scales, "scales", RV_BF16) < 0)
        return -1;
    const int64_t n = packed->shape[0];
    const int64_t k = packed->shape[1] * (packed->dtype == RV_I8 ? 2 : 8);
    if (k == 0 || k % group_size != 0) {
        PyErr_Format(PyExc_ValueError,
                     "packed holds K = %lld columns, not a positive multiple of group_size=%d",
                     (long long)k, group_size);
        return -1;
    }
    if (check_shape2(scales, "scales", n, k / group_size, "(N, K/group_size)") < 0) return -1;
    return k;
}

/* An int8 view of the packed words is read as int32 words: one not on a 4-byte boundary is
 * copied, as any misaligned input is. */
static int align_words(rad_view *packed) {
    return packed->dtype == RV_I8 ? rad_view_align(packed, 4, "packed") : 0;
}

static PyObject *py_dequantize(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"packed", "scales", "group_size", NULL};
    PyObject *packed_obj, *scales_obj;
    int group_size = 128;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O&:dequantize", kwlist, &packed_obj,
                                     &scales_obj, group_size_arg, &group_size))
        return NULL;
    view_set set = {.count = 0};
    PyObject *result = NULL;
    rad_view *packed = take_view(&set, packed_obj, "packed", RV_READ, 0);
    rad_view *scales = packed ? take_view(&set, scales_obj, "scales", RV_READ, 0) : NULL;
    if (!scales || check_host(packed, "packed", "dequantize") < 0 ||
        check_host(scales, "scales", "dequantize") < 0 || align_words(packed) < 0)
        goto done;
    const int64_t k = check_packed_head(packed, scales, group_size);
    if (k < 0) goto done;
    const int64_t n = packed->shape[0];
    result = new_array(2, n, k, NPY_FLOAT32);
    if (!result) goto done;
    Py_BEGIN_ALLOW_THREADS
    rad_cpu_dequantize((const int32_t *)packed->data, (const uint16_t *)scales->data, n, k,
                       group_size, (float *)PyArray_DATA((PyArrayObject *)result));
    Py_END_ALLOW_THREADS
done:
    release_views(&set);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* apply                                                                                      */

static PyObject *py_apply(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"x", "packed", "scales", "bias", "group_size", "out", "stream", NULL};
    PyObject *x_obj, *packed_obj, *scales_obj, *bias_obj = Py_None, *out_obj = Py_None,
                                                *stream_obj = Py_None;
    int group_size = 128;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|OO&$OO:apply", kwlist, &x_obj,
                                     &packed_obj, &scales_obj, &bias_obj, group_size_arg,
                                     &group_size, &out_obj, &stream_obj))
        return NULL;
    long long stream;
    if (parse_stream(stream_obj, &stream) < 0) return NULL;

    view_set set = {.count = 0};
    const char *names[MAX_VIEWS] = {"x", "packed", "scales"};
    PyObject *out_new = NULL, *result = NULL;
    rad_view *x = take_view(&set, x_obj, "x", RV_READ, stream);
    rad_view *packed = x ? take_view(&set, packed_obj, "packed", RV_READ, stream) : NULL;
    rad_view *scales = packed ? take_view(&set, scales_obj, "scales", RV_READ, stream) : NULL;
    if (!scales) goto done;
    rad_view *bias = NULL;
    if (bias_obj != Py_None) {
        names[set.count] = "bias";
        if (!(bias = take_view(&set, bias_obj, "bias", RV_READ, stream))) goto done;
    }
    if (check_ndim(x, "x", 2, "[M, K]") < 0 || check_float_dtype(x, "x") < 0 ||
        align_words(packed) < 0)
        goto done;
    const int64_t k = check_packed_head(packed, scales, group_size);
    if (k < 0) goto done;
    const int64_t m = x->shape[0], n = packed->shape[0];
    if (x->shape[1] != k) {
        PyErr_Format(PyExc_ValueError, "x has K = %lld columns, but packed holds K = %lld",
                     (long long)x->shape[1], (long long)k);
        goto done;
    }
    if (bias) {
        if (check_ndim(bias, "bias", 1, "[N]") < 0 || check_float_dtype(bias, "bias") < 0)
            goto done;
        if (bias->shape[0] != n) {
            PyErr_Format(PyExc_ValueError, "bias has %lld entries, but the head has N = %lld rows",
                         (long long)bias->shape[0], (long long)n);
            goto done;
        }
    }
    const int on_gpu = x->device != RV_HOST;
    PyObject *out_target = out_obj;
    if (out_obj == Py_None) {
        if (on_gpu) {
            PyErr_SetString(PyExc_TypeError,
                            "for GPU tensors pass out= (radiance.apply allocates it for torch "
                            "tensors)");
            goto done;
        }
        out_target = out_new = new_array(2, m, n, NEW_BF16);
        if (!out_new) goto done;
    }
    names[set.count] = "out";
    rad_view *out = take_view(&set, out_target, "out", RV_WRITE, stream);
    if (!out || common_device(&set, names) < 0 || check_ndim(out, "out", 2, "[M, N]") < 0 ||
        check_dtype(out, "out", RV_BF16) < 0 || check_shape2(out, "out", m, n, "(M, N)") < 0)
        goto done;
    for (int i = 0; i < set.count - 1; i++)
        if (rad_view_check_disjoint(out, "out", &set.views[i], names[i]) < 0) goto done;

    if (on_gpu) {
        if (check_gpu_reachable(x->device, "x") < 0 || check_dtype(x, "x", RV_BF16) < 0 ||
            (bias && check_dtype(bias, "bias", RV_BF16) < 0))
            goto done;
        const void *ptrs[4] = {x->data, packed->data, scales->data, out->data};
        static const char *const ptr_names[4] = {"x", "packed", "scales", "out"};
        for (int i = 0; i < 4; i++)
            if ((uintptr_t)ptrs[i] % 16) {
                PyErr_Format(PyExc_ValueError,
                             "%s must start at a 16-byte aligned address on the GPU", ptr_names[i]);
                goto done;
            }
#ifdef RADIANCE_WITH_GPU
        int code = 0;
        if (m > 0 && n > 0) {
            device_guard guard;
            if (enter_device(&guard, x->device_id, "apply") < 0) goto done;
            /* No GIL release: the launch is asynchronous and short. */
            code = radiance_gpu_apply((const uint16_t *)x->data, m, k,
                                      (const int32_t *)packed->data,
                                      (const uint16_t *)scales->data,
                                      bias ? (const uint16_t *)bias->data : NULL, n, group_size,
                                      (uint16_t *)out->data, launch_stream(stream, x));
            leave_device(&guard, x->device_id);
        }
        if (code) {
            gpu_error(code, "apply");
            goto done;
        }
        result = Py_NewRef(out_target);
#endif
        goto done;
    }

    int status;
    Py_BEGIN_ALLOW_THREADS
    status = rad_cpu_apply(x->data, x->dtype, m, k, (const int32_t *)packed->data,
                           (const uint16_t *)scales->data, bias ? bias->data : NULL,
                           bias ? bias->dtype : RAD_F32, n, group_size, (uint16_t *)out->data);
    Py_END_ALLOW_THREADS
    if (status < 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_NewRef(out_target);
done:
    release_views(&set);
    Py_XDECREF(out_new);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* Build information                                                                          */

static PyObject *py_gpu_backend(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
#ifdef RADIANCE_WITH_GPU
    return PyUnicode_FromString(radiance_gpu_backend());
#else
    return PyUnicode_FromString("none");
#endif
}

static PyObject *py_gpu_device_count(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    int count = 0;
#ifdef RADIANCE_WITH_GPU
    if (radiance_gpu_device_count(&count) != 0) count = 0; /* no driver or no device */
#endif
    return PyLong_FromLong(count);
}

static PyObject *py_cpu_threads(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyLong_FromLong(rad_cpu_threads());
}

static PyMethodDef methods[] = {
    {"quantize_rows", (PyCFunction)(void (*)(void))py_quantize_rows, METH_VARARGS | METH_KEYWORDS,
     "quantize_rows(w, group_size=128, clip='mse', *, activation_sq=None, packed_out=None, "
     "scales_out=None, stream=None) -> (packed, scales)"},
    {"pack_shuffle", py_pack_shuffle, METH_O, "pack_shuffle(nibbles) -> words"},
    {"unpack_shuffle", py_unpack_shuffle, METH_O, "unpack_shuffle(words) -> nibbles"},
    {"dequantize", (PyCFunction)(void (*)(void))py_dequantize, METH_VARARGS | METH_KEYWORDS,
     "dequantize(packed, scales, group_size=128) -> float32 [N, K]"},
    {"apply", (PyCFunction)(void (*)(void))py_apply, METH_VARARGS | METH_KEYWORDS,
     "apply(x, packed, scales, bias=None, group_size=128, *, out=None, stream=None) -> out"},
    {"gpu_backend", py_gpu_backend, METH_NOARGS, "'cuda', 'rocm' or 'none': the GPU build"},
    {"gpu_device_count", py_gpu_device_count, METH_NOARGS, "GPUs visible to the GPU backend"},
    {"cpu_threads", py_cpu_threads, METH_NOARGS, "threads the CPU kernels use"},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *module) {
    (void)module;
    if (PyArray_ImportNumPyAPI() < 0) return -1;
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "radiance._C", "radiance's C core: int4 lm_head kernels.", 0, methods,
    slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModuleDef_Init(&module_def); }
