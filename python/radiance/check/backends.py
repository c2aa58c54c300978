"""Where ``check`` runs: NumPy arrays on the CPU, or torch tensors on their device.

A backend quantizes with a method (an int4 method through radiance, a peer format through
peers.py), dequantizes rows, computes the reference and the quantized logits, and gives the two
head calls that the timing compares. Whatever it computes comes back to the host as NumPy: the
statistics are always gathered there.
"""

from __future__ import annotations

import sys
import time

import ml_dtypes
import numpy as np

import radiance
from radiance import peer_formats
from radiance.host import tensor_to_numpy


def torch_module():
    return sys.modules.get("torch")


def is_torch(obj):
    torch = torch_module()
    return torch is not None and isinstance(obj, torch.Tensor)


def to_numpy(a):
    """A host NumPy array of ``a`` (NumPy or torch, any device); bf16 stays ml_dtypes.bfloat16."""
    if is_torch(a):
        return tensor_to_numpy(a)
    return np.asarray(a)


def to_float32(a):
    """float32 copy of a NumPy array; bf16 by a bit shift, which ml_dtypes' cast is slow at."""
    if a.dtype == ml_dtypes.bfloat16:
        return (np.ascontiguousarray(a).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def numpy_to_torch(a, device):
    torch = torch_module()
    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(a).to(device)


def dtype_name(a):
    if is_torch(a):
        return str(a.dtype).replace("torch.", "")
    return str(np.asarray(a).dtype) if not hasattr(a, "dtype") else str(a.dtype)


class Int4Head:
    """A head quantized to radiance's int4 format, run by ``radiance.apply`` on the backend."""

    def __init__(self, backend, packed, scales, group_size):
        self.backend, self.group_size = backend, group_size
        self.packed, self.scales = packed, scales

    def bytes_per_step(self):
        n, k = self.backend.shape
        return peer_formats.bytes_per_step("int4", n, k, self.group_size)

    def dequantize_rows(self, r0, r1):
        packed, scales = self.packed[r0:r1], self.scales[r0:r1]
        return to_numpy(radiance.dequantize(packed, scales, self.group_size))

    def logits(self, x):
        return self.backend.int4_logits(x, self.packed, self.scales, self.group_size)


class PeerRunner:
    """A peer-format head (peers.py) whose product runs on the backend."""

    def __init__(self, backend, head):
        self.backend, self.head = backend, head
        self.values = backend.device_matrix(head.values)

    def bytes_per_step(self):
        return self.head.bytes_per_step()

    def dequantize_rows(self, r0, r1):
        return self.head.dequantize_rows(r0, r1)

    def logits(self, x):
        activations, token_scale = self.head.activations(to_float32(to_numpy(x)))
        product = self.backend.matmul_t(activations, self.values)
        return self.head.finish(product, token_scale, self.backend.bias_host)


def quantize(backend, method, group_size, activation_sq=None):
    """The head of ``method`` (methods.Method) on ``backend``: an Int4Head or a PeerRunner."""
    if method.format == "int4":
        if method.needs_activation_sq:
            packed, scales = method.quantize(
                backend.weight, group_size, activation_sq=activation_sq
            )
        else:
            packed, scales = method.quantize(backend.weight, group_size)
        return Int4Head(backend, packed, scales, group_size)
    return PeerRunner(backend, method.quantize(backend.host_weight_f32()))


class NumpyBackend:
    """Quantize, dequantize and apply with NumPy arrays on the CPU."""

    def __init__(self, weight, bias):
        self.device = "cpu"
        self.weight = np.ascontiguousarray(weight)
        self.weight_f32 = to_float32(self.weight)
        self.bias = None if bias is None else np.asarray(bias).astype(np.float32)
        self.bias_native = None if bias is None else np.asarray(bias)
        self.bias_host = self.bias
        self.shape = self.weight.shape
        self.reference_name = "NumPy float32 matmul"

    def activations(self, hidden):
        return np.ascontiguousarray(to_numpy(hidden).astype(ml_dtypes.bfloat16))

    def host_weight_f32(self):
        return self.weight_f32

    def device_matrix(self, a):
        return a

    def matmul_t(self, x, w):
        return x @ w.T

    def weight_rows(self, r0, r1):
        return self.weight_f32[r0:r1]

    def reference_logits(self, x):
        y = to_float32(x) @ self.weight_f32.T
        return y if self.bias is None else y + self.bias

    def int4_logits(self, x, packed, scales, group_size):
        y = radiance.apply(x, packed, scales, bias=self.bias_native, group_size=group_size)
        return to_float32(to_numpy(y))

    def timers(self, x, packed, scales, group_size):
        bias = self.bias

        x_f32 = to_float32(x)

        def reference():
            y = x_f32 @ self.weight_f32.T
            return y if bias is None else y + bias

        def int4():
            return radiance.apply(x, packed, scales, bias=self.bias_native, group_size=group_size)

        return reference, int4, lambda: None


class TorchBackend:
    """Quantize and apply with torch tensors on their device (the GPU kernels for CUDA)."""

    def __init__(self, weight, bias, device):
        torch = torch_module()
        self.torch = torch
        if not is_torch(weight):
            weight = numpy_to_torch(weight, device)
        self.weight = weight.detach().to(device).contiguous()
        self.device = str(self.weight.device)
        self.weight_f32 = self.weight.float()
        if bias is not None and not is_torch(bias):
            bias = numpy_to_torch(np.asarray(bias), device)
        self.bias = None if bias is None else bias.detach().to(self.weight.device)
        self.bias_host = None if bias is None else to_numpy(self.bias.float())
        self.shape = tuple(self.weight.shape)
        self.reference_name = "torch.nn.functional.linear bfloat16"

    def activations(self, hidden):
        torch = self.torch
        if not is_torch(hidden):
            hidden = numpy_to_torch(np.asarray(hidden), self.weight.device)
        return hidden.detach().to(self.weight.device).to(torch.bfloat16).contiguous()

    def host_weight_f32(self):
        return to_numpy(self.weight_f32)

    def device_matrix(self, a):
        return numpy_to_torch(a, self.weight.device)

    def matmul_t(self, x, w):
        return to_numpy(self.torch.nn.functional.linear(numpy_to_torch(x, w.device), w))

    def weight_rows(self, r0, r1):
        return to_numpy(self.weight_f32[r0:r1])

    def reference_logits(self, x):
        torch = self.torch
        bias = None if self.bias is None else self.bias.float()
        return to_numpy(torch.nn.functional.linear(x.float(), self.weight_f32, bias))

    def int4_logits(self, x, packed, scales, group_size):
        bias = None if self.bias is None else self.bias.to(self.torch.bfloat16)
        y = radiance.apply(x, packed, scales, bias=bias, group_size=group_size)
        return to_float32(to_numpy(y))

    def timers(self, x, packed, scales, group_size):
        torch = self.torch
        # The unquantized head as a server runs it: bf16 weights and activations.
        weight = self.weight.to(torch.bfloat16)
        x_ref = x
        bias_ref = None if self.bias is None else self.bias.to(torch.bfloat16)
        bias_int4 = bias_ref

        def reference():
            return torch.nn.functional.linear(x_ref, weight, bias_ref)

        def int4():
            return radiance.apply(x, packed, scales, bias=bias_int4, group_size=group_size)

        if self.weight.device.type == "cuda":
            sync = torch.cuda.synchronize
        else:
            sync = lambda: None  # noqa: E731
        return reference, int4, sync


def median_ms(fn, sync, min_repeats=3, max_repeats=50, budget_s=0.5):
    fn()
    sync()
    times = []
    start = time.perf_counter()
    while len(times) < max_repeats:
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
        if len(times) >= min_repeats and time.perf_counter() - start > budget_s:
            break
    return float(np.median(times) * 1e3)

