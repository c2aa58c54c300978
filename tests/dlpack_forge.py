"""DLPack producers built with ctypes that say whatever a test wants: negative or overflowing
shapes, strides, devices, dtypes, byte offsets, versions, deleters that raise.

A producer hands out a fresh capsule per __dlpack__ call over the memory of a NumPy array it keeps
alive. Capsules have no destructor: one the consumer does not take is simply dropped, so
`deleted` counts exactly the deleter calls the consumer made (DLPack: exactly once per taken
capsule, i.e. per capsule renamed to "used_dltensor"/"used_dltensor_versioned").
"""

import ctypes

import numpy as np

KDL_CPU, KDL_CUDA = 1, 2
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]

DTYPE_CODES = {
    "float32": (KDL_FLOAT, 32),
    "float16": (KDL_FLOAT, 16),
    "float64": (KDL_FLOAT, 64),
    "bfloat16": (KDL_BFLOAT, 16),
    "int32": (KDL_INT, 32),
    "int8": (KDL_INT, 8),
    "uint8": (KDL_UINT, 8),
}


class ForgedProducer:
    """A DLPack producer over `array`'s memory whose every field can lie.

    shape/strides (None: compact), dtype (code, bits, lanes) (default: the array's), device (the
    capsule's own field) and announced (what __dlpack_device__ says), byte_offset, data (an
    address; default the array's), ndim (default len(shape)), versioned, version, flags,
    null_shape, deleter_raises.
    """

    def __init__(self, array, *, shape=None, strides=None, dtype=None, device=(KDL_CPU, 0),
                 announced=None, byte_offset=0, data=None, ndim=None, versioned=False,
                 version=(1, 0), flags=0, null_shape=False, deleter_raises=False):
        self.array = array
        self.shape = tuple(array.shape if shape is None else shape)
        self.strides = strides
        if dtype is None:
            code, bits = DTYPE_CODES[array.dtype.name]
            dtype = (code, bits, 1)
        self.dtype = dtype
        self.device = device
        self.announced = device if announced is None else announced
        self.byte_offset = byte_offset
        self.data = array.ctypes.data if data is None else data
        self.ndim = len(self.shape) if ndim is None else ndim
        self.versioned = versioned
        self.version = version
        self.flags = flags
        self.null_shape = null_shape
        self.deleter_raises = deleter_raises
        self.deleted = 0
        self.capsules = []
        self._keep = []

    def _on_delete(self, _address):
        self.deleted += 1
        if self.deleter_raises:
            raise RuntimeError("forged deleter raised")

    def __dlpack_device__(self):
        return self.announced

    def __dlpack__(self, stream=None, max_version=None, **_):
        shape = (ctypes.c_int64 * max(len(self.shape), 1))(*self.shape)
        strides = None
        if self.strides is not None:
            strides = (ctypes.c_int64 * max(len(self.strides), 1))(*self.strides)
        tensor = DLTensor(
            data=self.data,
            device=DLDevice(*self.device),
            ndim=self.ndim,
            dtype=DLDataType(*self.dtype),
            shape=None if self.null_shape else ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
            strides=None if strides is None else ctypes.cast(strides,
                                                             ctypes.POINTER(ctypes.c_int64)),
            byte_offset=self.byte_offset,
        )
        deleter = DELETER(self._on_delete)
        if self.versioned:
            managed = DLManagedTensorVersioned(version=DLPackVersion(*self.version),
                                               deleter=deleter, flags=self.flags,
                                               dl_tensor=tensor)
            name = b"dltensor_versioned"
        else:
            managed = DLManagedTensor(dl_tensor=tensor, deleter=deleter)
            name = b"dltensor"
        self._keep.append((shape, strides, deleter, managed))
        capsule = _capsule_new(ctypes.addressof(managed), name, None)
        self.capsules.append(capsule)
        return capsule

    def taken(self):
        """How many of the capsules handed out the consumer took (renamed "used_...")."""
        return sum(_capsule_name(c).startswith(b"used_") for c in self.capsules)


def honest(array, **kwargs):
    """A producer that tells the truth about `array` (C-contiguous)."""
    return ForgedProducer(np.ascontiguousarray(array), **kwargs)
