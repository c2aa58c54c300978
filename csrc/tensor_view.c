/*
 * tensor_view.c - NumPy arrays and DLPack tensors turned into one validated view.
 *
 * DLPack rules followed here (DLPack's Python specification): the consumer asks the producer
 * for a capsule with __dlpack__(stream=..., max_version=(1, 0)), falling back to the legacy
 * call for producers that do not know max_version; it renames the capsule to "used_dltensor"
 * ("used_dltensor_versioned") when it takes ownership, and calls the deleter exactly once, when
 * the view is released. A capsule it did not take keeps its name, and its own destructor frees it.
 */
#define PY_ARRAY_UNIQUE_SYMBOL radiance_ARRAY_API
#define NO_IMPORT_ARRAY
#include "tensor_view.h"

#include <numpy/arrayobject.h>
#include <string.h>

static PyObject *g_bf16_descr; /* ml_dtypes.bfloat16's descriptor, loaded on first use */

PyObject *rad_bf16_descr(void) {
    if (!g_bf16_descr) {
        PyObject *module = PyImport_ImportModule("ml_dtypes");
        if (!module) return NULL;
        PyObject *type = PyObject_GetAttrString(module, "bfloat16");
        Py_DECREF(module);
        if (!type) return NULL;
        PyArray_Descr *descr = NULL;
        int ok = PyArray_DescrConverter(type, &descr);
        Py_DECREF(type);
        if (!ok) return NULL;
        g_bf16_descr = (PyObject *)descr;
    }
    Py_INCREF(g_bf16_descr);
    return g_bf16_descr;
}

const char *rad_view_dtype_name(int dtype) {
    switch (dtype) {
    case RV_F32: return "float32";
    case RV_F16: return "float16";
    case RV_BF16: return "bfloat16";
    case RV_I32: return "int32";
    case RV_U8: return "uint8";
    case RV_I8: return "int8";
    default: return "an unsupported dtype";
    }
}

static int numpy_dtype(PyArray_Descr *descr) {
    switch (descr->type_num) {
    case NPY_FLOAT32: return RV_F32;
    case NPY_FLOAT16: return RV_F16;
    case NPY_INT32: return RV_I32;
    case NPY_UINT8: return RV_U8;
    case NPY_INT8: return RV_I8;
    default: break;
    }
    PyObject *bf16 = rad_bf16_descr();
    if (!bf16) {
        PyErr_Clear(); /* without ml_dtypes there is no bf16 array to recognise */
        return RV_OTHER;
    }
    int same = PyArray_EquivTypes(descr, (PyArray_Descr *)bf16);
    Py_DECREF(bf16);
    return same ? RV_BF16 : RV_OTHER;
}

static int dlpack_dtype(DLDataType t) {
    if (t.lanes != 1) return RV_OTHER;
    if (t.code == kDLFloat && t.bits == 32) return RV_F32;
    if (t.code == kDLFloat && t.bits == 16) return RV_F16;
    if (t.code == kDLBfloat && t.bits == 16) return RV_BF16;
    if (t.code == kDLInt && t.bits == 32) return RV_I32;
    if (t.code == kDLUInt && t.bits == 8) return RV_U8;
    if (t.code == kDLInt && t.bits == 8) return RV_I8;
    return RV_OTHER;
}

static int dtype_size(int dtype) {
    switch (dtype) {
    case RV_F32: case RV_I32: return 4;
    case RV_F16: case RV_BF16: return 2;
    default: return 1;
    }
}

static void clear_view(rad_view *view) { memset(view, 0, sizeof *view); }

static int from_numpy(PyObject *obj, const char *name, int access, rad_view *view) {
    PyArrayObject *arr;
    if (access == RV_WRITE) {
        arr = (PyArrayObject *)obj;
        if (!PyArray_IS_C_CONTIGUOUS(arr) || !PyArray_ISALIGNED(arr)) {
            PyErr_Format(PyExc_ValueError,
                         "%s must be a C-contiguous, aligned array (it is written in place)", name);
            return -1;
        }
        if (PyArray_ISBYTESWAPPED(arr)) {
            PyErr_Format(PyExc_ValueError,
                         "%s has non-native byte order (dtype %R); it is written in place, so it "
                         "must be in native byte order",
                         name, (PyObject *)PyArray_DESCR(arr));
            return -1;
        }
        if (!PyArray_ISWRITEABLE(arr)) {
            PyErr_Format(PyExc_ValueError, "%s is read-only; it must be writeable", name);
            return -1;
        }
        Py_INCREF(obj);
    } else {
        /* Inputs of any layout and byte order are made contiguous, aligned and native, as NumPy's
         * own functions do (a copy only where needed). */
        PyArray_Descr *native = NULL; /* NULL keeps the array's dtype */
        if (PyArray_ISBYTESWAPPED((PyArrayObject *)obj)) {
            native = PyArray_DescrNewByteorder(PyArray_DESCR((PyArrayObject *)obj), NPY_NATIVE);
            if (!native) return -1;
        }
        arr = (PyArrayObject *)PyArray_FromAny(obj, native, 0, 0,
                                               NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, NULL);
        if (!arr) return -1;
    }
    int ndim = PyArray_NDIM(arr);
    if (ndim > RV_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s has %d dimensions; at most 2 are expected", name, ndim);
        Py_DECREF(arr);
        return -1;
    }
    view->array = (PyObject *)arr;
    view->data = PyArray_DATA(arr);
    view->dtype = numpy_dtype(PyArray_DESCR(arr));
    view->ndim = ndim;
    for (int i = 0; i < ndim; i++) view->shape[i] = (int64_t)PyArray_DIM(arr, i);
    view->nbytes = (int64_t)PyArray_NBYTES(arr);
    view->device = RV_HOST;
    view->device_id = 0;
    return 0;
}

/* Replaces a producer's RuntimeError/BufferError (torch's carry a C++ backtrace) by a ValueError
 * that names the argument and keeps the first line of the producer's message. */
static void name_producer_error(const char *name) {
    if (!PyErr_ExceptionMatches(PyExc_RuntimeError) && !PyErr_ExceptionMatches(PyExc_BufferError))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    if (!text) {
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return;
    }
    Py_ssize_t end = PyUnicode_FindChar(text, '\n', 0, PyUnicode_GetLength(text), 1);
    PyObject *first_line =
        end >= 0 ? PyUnicode_Substring(text, 0, end) : Py_NewRef(text);
    Py_DECREF(text);
    if (!first_line) {
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return;
    }
    PyErr_Format(PyExc_ValueError, "%s could not be read through DLPack: %U", name, first_line);
    Py_DECREF(first_line);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* obj.__dlpack_device__() -> (device_type, device_id). */
static int query_device(PyObject *obj, const char *name, int *type, int *id) {
    PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (!dev) return -1;
    int ok = PyTuple_Check(dev) && PyTuple_Size(dev) == 2;
    if (ok) {
        *type = (int)PyLong_AsLong(PyTuple_GetItem(dev, 0));
        *id = (int)PyLong_AsLong(PyTuple_GetItem(dev, 1));
        ok = !PyErr_Occurred();
    }
    Py_DECREF(dev);
    if (!ok && !PyErr_Occurred())
        PyErr_Format(PyExc_TypeError, "%s.__dlpack_device__() did not return (type, id)", name);
    return ok ? 0 : -1;
}

/* Py_DECREF where an exception may be set: a destructor that runs Python code (a producer's
 * deleter) must neither see nor replace the error being raised. */
static void decref_keeping_error(PyObject *obj) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    Py_DECREF(obj);
    if (PyErr_Occurred()) PyErr_WriteUnraisable(NULL);
    PyErr_Restore(type, value, tb);
}

/* Call obj.__dlpack__ with the stream (None on the host) and max_version=(1, 0); producers that
 * predate max_version raise TypeError, and are asked again without it. */
static PyObject *request_capsule(PyObject *obj, int on_gpu, long long stream) {
    PyObject *method = PyObject_GetAttrString(obj, "__dlpack__");
    if (!method) return NULL;
    PyObject *kwargs = PyDict_New();
    PyObject *stream_obj = on_gpu && stream != -1 ? PyLong_FromLongLong(stream) : Py_NewRef(Py_None);
    PyObject *version = Py_BuildValue("(ii)", 1, 0);
    PyObject *args = PyTuple_New(0);
    PyObject *capsule = NULL;
    if (kwargs && stream_obj && version && args &&
        PyDict_SetItemString(kwargs, "stream", stream_obj) == 0 &&
        PyDict_SetItemString(kwargs, "max_version", version) == 0) {
        capsule = PyObject_Call(method, args, kwargs);
        if (!capsule && PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            if (PyDict_DelItemString(kwargs, "max_version") == 0)
                capsule = PyObject_Call(method, args, kwargs);
        }
    }
    Py_XDECREF(args);
    Py_XDECREF(version);
    Py_XDECREF(stream_obj);
    Py_XDECREF(kwargs);
    Py_DECREF(method);
    return capsule;
}

/* Bytes of one element of a DLPack dtype, or 0 where the dtype is not one radiance reads. */
static int64_t dlpack_itemsize(int dtype) { return dtype == RV_OTHER ? 0 : dtype_size(dtype); }

/*
 * Every field of a producer's DLTensor, checked before its memory is touched: a producer may
 * hand out negative or overflowing shapes, strides that are not row-major, a null or wrapping
 * data pointer; none of that may reach memcpy or a kernel.
 */
static int fill_view(rad_view *view, const DLTensor *t, int device, int dev_id, const char *name,
                     int access, uint64_t flags) {
    if (t->ndim < 0 || t->ndim > RV_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s has %d dimensions; at most 2 are expected", name,
                     (int)t->ndim);
        return -1;
    }
    if (t->ndim > 0 && !t->shape) {
        PyErr_Format(PyExc_ValueError, "%s: its DLPack tensor has %d dimensions but no shape",
                     name, (int)t->ndim);
        return -1;
    }
    /* Elements, then bytes, in 64 bits without overflow: a zero dimension makes the tensor empty,
     * but the other dimensions must still be sizes that could exist. */
    int64_t elements = 1, nonzero = 1;
    for (int i = 0; i < t->ndim; i++) {
        const int64_t d = t->shape[i];
        if (d < 0) {
            PyErr_Format(PyExc_ValueError, "%s has a negative dimension in its DLPack shape (%lld)",
                         name, (long long)d);
            return -1;
        }
        if (d > 0 && __builtin_mul_overflow(nonzero, d, &nonzero)) {
            PyErr_Format(PyExc_ValueError, "%s: the sizes of its DLPack shape overflow 64 bits",
                         name);
            return -1;
        }
        elements = d == 0 ? 0 : elements * d;
    }
    const int dtype = dlpack_dtype(t->dtype);
    int64_t bytes, bytes_if_nonempty;
    if (__builtin_mul_overflow(nonzero, dlpack_itemsize(dtype), &bytes_if_nonempty) ||
        bytes_if_nonempty > (int64_t)PY_SSIZE_T_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: its DLPack shape is larger than any memory", name);
        return -1;
    }
    bytes = elements == 0 ? 0 : bytes_if_nonempty;
    if (elements > 0 && t->strides) {
        int64_t expected = 1; /* cannot overflow: the product of the shape did not */
        for (int i = t->ndim - 1; i >= 0; i--) {
            if (t->shape[i] != 1 && t->strides[i] != expected) {
                PyErr_Format(PyExc_ValueError,
                             "%s must be contiguous (row-major); call .contiguous() first", name);
                return -1;
            }
            expected *= t->shape[i];
        }
    }
    const uintptr_t base = (uintptr_t)t->data;
    if (elements > 0 && (!t->data || t->byte_offset > UINTPTR_MAX - base ||
                         (uint64_t)bytes > UINTPTR_MAX - base - t->byte_offset)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: its DLPack data pointer is null or its byte_offset runs past the end of "
                     "the address space",
                     name);
        return -1;
    }
    if (access == RV_WRITE && (flags & DLPACK_FLAG_BITMASK_READ_ONLY)) {
        PyErr_Format(PyExc_ValueError, "%s is read-only; it must be writeable", name);
        return -1;
    }
    view->data = elements > 0 ? (void *)(base + (uintptr_t)t->byte_offset) : t->data;
    view->dtype = dtype;
    view->ndim = t->ndim;
    view->device = device;
    view->device_id = device == RV_HOST ? 0 : dev_id;
    for (int i = 0; i < t->ndim; i++) view->shape[i] = t->shape[i];
    view->nbytes = bytes;
    if (dtype == RV_OTHER) return 0; /* refused by the caller's dtype check, never read */
    if (access == RV_READ) return rad_view_align(view, dtype_size(dtype), name);
    if ((uintptr_t)view->data % (uintptr_t)dtype_size(dtype)) {
        PyErr_Format(PyExc_ValueError, "%s is not aligned to its element size", name);
        return -1;
    }
    return 0;
}

static int view_device(int dev_type, const char *name) {
    switch (dev_type) {
    case kDLCPU: case kDLCUDAHost: case kDLROCMHost: return RV_HOST;
    case kDLCUDA: case kDLCUDAManaged: return RV_CUDA;
    case kDLROCM: return RV_ROCM;
    default:
        PyErr_Format(PyExc_ValueError,
                     "%s is on DLPack device type %d; radiance takes host, CUDA or ROCm memory",
                     name, dev_type);
        return -1;
    }
}

/* The exchange API of obj's type (walking to a 1.x table), or NULL. A few types are cached:
 * torch.Tensor and torch.nn.Parameter are both common. */
static const DLPackExchangeAPI *exchange_api(PyTypeObject *type) {
    enum { CACHE = 4 };
    static PyTypeObject *types[CACHE];
    static const DLPackExchangeAPI *apis[CACHE];
    static int next;
    for (int i = 0; i < CACHE; i++)
        if (types[i] == type) return apis[i];
    const DLPackExchangeAPI *api = NULL;
    PyObject *capsule = PyObject_GetAttrString((PyObject *)type, "__dlpack_c_exchange_api__");
    if (!capsule) {
        PyErr_Clear();
    } else {
        if (PyCapsule_IsValid(capsule, "dlpack_exchange_api")) {
            const DLPackExchangeAPIHeader *h =
                (const DLPackExchangeAPIHeader *)PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
            while (h && h->version.major != 1) h = h->prev_api;
            api = (const DLPackExchangeAPI *)h;
            if (api && !api->dltensor_from_py_object_no_sync) api = NULL;
        }
        Py_DECREF(capsule);
    }
    Py_XDECREF(types[next]);
    Py_INCREF(type); /* held so that the cached pointer cannot be reused by another type */
    types[next] = type;
    apis[next] = api;
    next = (next + 1) % CACHE;
    return api;
}

static int from_exchange_api(PyObject *obj, const DLPackExchangeAPI *api, const char *name,
                             int access, rad_view *view) {
    DLTensor t;
    memset(&t, 0, sizeof t);
    if (api->dltensor_from_py_object_no_sync(obj, &t) != 0) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "%s could not be exported through DLPack", name);
        name_producer_error(name);
        return -1;
    }
    const int device = view_device(t.device.device_type, name);
    if (device < 0) return -1;
    view->array = Py_NewRef(obj); /* the DLTensor borrows obj's memory */
    if (fill_view(view, &t, device, t.device.device_id, name, access, 0) < 0) return -1;
    if (device != RV_HOST && api->current_work_stream) {
        void *current = NULL;
        if (api->current_work_stream(t.device.device_type, t.device.device_id, &current) != 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_RuntimeError, "%s: the producer did not name its stream", name);
            return -1;
        }
        view->has_current_stream = 1;
        view->current_stream = current;
    }
    return 0;
}

static int from_dlpack(PyObject *obj, const char *name, int access, long long stream,
                       rad_view *view) {
    int dev_type, dev_id;
    if (query_device(obj, name, &dev_type, &dev_id) < 0) return -1;
    const int device = view_device(dev_type, name);
    if (device < 0) return -1;
    /* The kernels launch on `stream`, or on the default stream when none was given. On CUDA,
     * DLPack reserves 0 (ambiguous) and names the legacy default stream 1. */
    long long consumer_stream = stream == RV_STREAM_DEFAULT ? 0 : stream;
    if (device == RV_CUDA && consumer_stream == 0) consumer_stream = 1;
    PyObject *capsule = request_capsule(obj, device != RV_HOST, consumer_stream);
    if (!capsule) {
        name_producer_error(name);
        return -1;
    }

    DLTensor *t = NULL;
    uint64_t flags = 0;
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        DLManagedTensorVersioned *mt =
            (DLManagedTensorVersioned *)PyCapsule_GetPointer(capsule, "dltensor_versioned");
        if (mt->version.major != 1) {
            PyErr_Format(PyExc_ValueError,
                         "%s: DLPack version %u.%u is not supported (radiance reads 1.x)", name,
                         mt->version.major, mt->version.minor);
            decref_keeping_error(capsule); /* not taken: the capsule's destructor frees it */
            return -1;
        }
        if (PyCapsule_SetName(capsule, "used_dltensor_versioned") < 0) {
            decref_keeping_error(capsule);
            return -1;
        }
        view->versioned = mt;
        t = &mt->dl_tensor;
        flags = mt->flags;
    } else if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *mt = (DLManagedTensor *)PyCapsule_GetPointer(capsule, "dltensor");
        if (PyCapsule_SetName(capsule, "used_dltensor") < 0) {
            decref_keeping_error(capsule);
            return -1;
        }
        view->legacy = mt;
        t = &mt->dl_tensor;
    } else {
        PyErr_Format(PyExc_TypeError, "%s.__dlpack__() did not return a DLPack capsule", name);
        decref_keeping_error(capsule);
        return -1;
    }
    Py_DECREF(capsule); /* renamed: its destructor leaves the tensor to us */

    /* The capsule's own device must be the one the producer announced: the host must never
     * dereference a GPU pointer, nor a kernel a host one. */
    if (t->device.device_type != dev_type || t->device.device_id != dev_id) {
        PyErr_Format(PyExc_ValueError,
                     "%s: its DLPack capsule is on device (%d, %d) but __dlpack_device__() "
                     "says (%d, %d)",
                     name, (int)t->device.device_type, (int)t->device.device_id, dev_type, dev_id);
        return -1;
    }
    return fill_view(view, t, device, dev_id, name, access, flags);
}

PyObject *rad_type_name(PyObject *obj) {
    return PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__name__");
}

int rad_view_from_object(PyObject *obj, const char *name, int access, long long stream,
                         rad_view *view) {
    clear_view(view);
    int status;
    const DLPackExchangeAPI *api;
    if (PyArray_Check(obj)) {
        status = from_numpy(obj, name, access, view);
    } else if ((api = exchange_api(Py_TYPE(obj))) != NULL) {
        status = from_exchange_api(obj, api, name, access, view);
    } else if (PyObject_HasAttrString(obj, "__dlpack__") &&
               PyObject_HasAttrString(obj, "__dlpack_device__")) {
        status = from_dlpack(obj, name, access, stream, view);
    } else {
        PyObject *type_name = rad_type_name(obj);
        if (type_name)
            PyErr_Format(PyExc_TypeError,
                         "%s must be a NumPy array or a tensor with __dlpack__ (torch, CuPy), not %.100U",
                         name, type_name);
        Py_XDECREF(type_name);
        return -1;
    }
    if (status < 0) {
        PyObject *type, *value, *tb; /* release must not clobber the error being raised */
        PyErr_Fetch(&type, &value, &tb);
        rad_view_release(view);
        PyErr_Restore(type, value, tb);
    }
    return status;
}

/* Drops what keeps the view's memory alive. Deleters and destructors may run Python code: they
 * run with the caller's exception (if any) put aside, and one they raise is reported as
 * unraisable rather than replacing it, or a successful call returning with an error set. */
static void release_owner(rad_view *view) {
    if (!view->versioned && !view->legacy && !view->array) return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (view->versioned && view->versioned->deleter) view->versioned->deleter(view->versioned);
    if (view->legacy && view->legacy->deleter) view->legacy->deleter(view->legacy);
    Py_XDECREF(view->array);
    if (PyErr_Occurred()) PyErr_WriteUnraisable(NULL);
    PyErr_Restore(type, value, tb);
    view->versioned = NULL;
    view->legacy = NULL;
    view->array = NULL;
}

void rad_view_release(rad_view *view) {
    release_owner(view);
    clear_view(view);
}

static PyObject *new_host_array(const rad_view *view) {
    npy_intp dims[RV_MAX_DIMS];
    for (int i = 0; i < view->ndim; i++) dims[i] = (npy_intp)view->shape[i];
    int typenum;
    switch (view->dtype) {
    case RV_F32: typenum = NPY_FLOAT32; break;
    case RV_F16: typenum = NPY_FLOAT16; break;
    case RV_I32: typenum = NPY_INT32; break;
    case RV_U8: typenum = NPY_UINT8; break;
    case RV_I8: typenum = NPY_INT8; break;
    default: {
        PyObject *descr = rad_bf16_descr(); /* stolen below */
        if (!descr) return NULL;
        return PyArray_SimpleNewFromDescr(view->ndim, dims, (PyArray_Descr *)descr);
    }
    }
    return PyArray_SimpleNew(view->ndim, dims, typenum);
}

int rad_view_align(rad_view *view, int alignment, const char *name) {
    if ((uintptr_t)view->data % (uintptr_t)alignment == 0 || view->dtype == RV_OTHER) return 0;
    if (view->device != RV_HOST) {
        PyErr_Format(PyExc_ValueError,
                     "%s must start on a %d-byte boundary (GPU memory is not copied)", name,
                     alignment);
        return -1;
    }
    /* NumPy's allocations are aligned far beyond any element size. */
    PyObject *copy = new_host_array(view);
    if (!copy) return -1;
    memcpy(PyArray_DATA((PyArrayObject *)copy), view->data, (size_t)view->nbytes);
    release_owner(view);
    view->array = copy;
    view->data = PyArray_DATA((PyArrayObject *)copy);
    return 0;
}

int rad_view_check_disjoint(const rad_view *a, const char *a_name, const rad_view *b,
                            const char *b_name) {
    if (a->device != b->device || a->device_id != b->device_id || a->nbytes <= 0 ||
        b->nbytes <= 0)
        return 0;
    const uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
    if (a0 < b0 + (uintptr_t)b->nbytes && b0 < a0 + (uintptr_t)a->nbytes) {
        PyErr_Format(PyExc_ValueError,
                     "%s and %s overlap in memory; radiance does not compute in place: give %s "
                     "memory of its own",
                     a_name, b_name, a_name);
        return -1;
    }
    return 0;
}
