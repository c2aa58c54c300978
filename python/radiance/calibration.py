"""Calibration statistics for clip "act": E[x^2] per hidden channel, kept in a small safetensors file.

    a = compute_activation_sq(hidden_states)            # float32 [hidden]
    save_stats(path, a, tokens=n, head=weight, model_path=..., source=text_source(text))
    stats = load_stats(path, expected_hidden=576, expected_head_id=head_id(weight))
    radiance.quantize_rows(weight, 64, "act", activation_sq=stats.activation_sq)

The file holds one float32 tensor `activation_sq` [hidden] and, in the safetensors metadata, the
token count and the identity of the head the statistics belong to (vocab, hidden, a SHA-256 of
the head's bytes, the model path), and optionally where the tokens came from (`source`: the
statistics are those of the first `tokens` tokens of that text or array, so a later evaluation on
the same source can leave them out). Reading checks the file against what the caller expects:
statistics of another head would weigh the wrong channels silently. Needs NumPy and safetensors
only.
"""

import hashlib
import os
from dataclasses import dataclass

import numpy as np

from .host import tensor_to_numpy

FORMAT = "radiance.activation_sq"
VERSION = "1"
TENSOR = "activation_sq"


@dataclass(frozen=True)
class HeadId:
    """Which head statistics belong to: its shape and a hash of its bytes."""

    vocab: int
    hidden: int
    sha256: str  # of the head's bytes as stored (C order), with its dtype name in front

    def describe(self):
        return f"{self.vocab} x {self.hidden} head, sha256 {self.sha256[:16]}"


@dataclass(frozen=True)
class Stats:
    activation_sq: np.ndarray  # float32 [hidden]
    tokens: int
    head: HeadId
    model_path: str
    # "text sha256:<hex>" or "hidden sha256:<hex>": the statistics are of the first `tokens`
    # tokens of that source; "" when unknown.
    source: str = ""


def _numpy(a, name):
    if hasattr(a, "detach"):  # a torch tensor, without importing torch
        a = tensor_to_numpy(a)  # bf16 keeps its bytes, so a torch head and its NumPy copy hash alike
    a = np.asarray(a)
    if a.dtype.kind not in "fiu" and a.dtype.name != "bfloat16":
        raise TypeError(f"{name} must be real numbers, got {a.dtype}")
    return a


def compute_activation_sq(hidden_states):
    """E[x^2] per channel of hidden states [tokens, hidden] (or [..., hidden]) as float32 [hidden].

    Accumulated in float64, then rounded once to float32.
    """
    h = _numpy(hidden_states, "hidden_states")
    if h.ndim < 2 or h.shape[-1] == 0:
        raise ValueError(
            f"hidden_states must be [tokens, hidden] (or [..., hidden]), got shape {h.shape}"
        )
    h = h.reshape(-1, h.shape[-1])
    if h.shape[0] == 0:
        raise ValueError("hidden_states holds no tokens")
    total = np.zeros(h.shape[1], np.float64)
    for start in range(0, h.shape[0], 4096):  # bounded float64 copies
        chunk = h[start : start + 4096].astype(np.float64)
        if not np.isfinite(chunk).all():
            raise ValueError("hidden_states has non-finite values (NaN or inf)")
        total += (chunk * chunk).sum(axis=0)
    a = (total / h.shape[0]).astype(np.float32)
    if not np.isfinite(a).all():
        raise ValueError("hidden_states squares overflow float32; check the hidden states")
    return a


def head_id(weight):
    """The HeadId of a head weight [vocab, hidden] (NumPy, ml_dtypes or torch)."""
    w = _numpy(weight, "head")
    if w.ndim != 2:
        raise ValueError(f"head must be 2-D [vocab, hidden], got shape {w.shape}")
    digest = hashlib.sha256(w.dtype.name.encode() + b"\0")
    flat = np.ascontiguousarray(w).reshape(-1).view(np.uint8)
    for start in range(0, flat.size, 1 << 26):
        digest.update(flat[start : start + (1 << 26)].data)
    return HeadId(int(w.shape[0]), int(w.shape[1]), digest.hexdigest())


def text_source(text):
    """The `source` of statistics computed on `text` (a str): its SHA-256 as UTF-8."""
    return "text sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def array_source(hidden_states):
    """The `source` of statistics computed on the rows of a hidden-states array."""
    h = _numpy(hidden_states, "hidden_states")
    digest = hashlib.sha256(f"{h.dtype.name}{list(h.shape)}".encode() + b"\0")
    digest.update(np.ascontiguousarray(h).reshape(-1).view(np.uint8).data)
    return "hidden sha256:" + digest.hexdigest()


def save_stats(path, activation_sq, *, tokens, head, model_path="", source=""):
    """Write the statistics of `head` (a weight array or a HeadId) to a safetensors file.

    `source` (text_source / array_source) says which text or array the first `tokens` tokens
    were taken from."""
    from safetensors.numpy import save_file

    a = np.ascontiguousarray(_numpy(activation_sq, "activation_sq"), dtype=np.float32)
    ident = head if isinstance(head, HeadId) else head_id(head)
    if a.ndim != 1 or a.shape[0] != ident.hidden:
        raise ValueError(
            f"activation_sq must be [hidden] = [{ident.hidden}] for this head, got {a.shape}"
        )
    _check_values(a, path)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        raise ValueError(f"tokens must be a positive int, got {tokens!r}")
    metadata = {
        "format": FORMAT,
        "version": VERSION,
        "tokens": str(tokens),
        "vocab": str(ident.vocab),
        "hidden": str(ident.hidden),
        "head_sha256": ident.sha256,
        "model_path": str(model_path),
        "source": str(source),
    }
    save_file({TENSOR: a}, os.fspath(path), metadata=metadata)


def _check_values(a, where):
    bad = np.flatnonzero(~(np.isfinite(a) & (a >= 0)))
    if bad.size:
        raise ValueError(
            f"{where}: activation_sq[{bad[0]}] is {a[bad[0]]}; every entry must be finite and >= 0"
        )


def load_stats(path, *, expected_hidden=None, expected_head_id=None):
    """Read a statistics file; ValueError if it is not one, or if it belongs to another head.

    expected_head_id: a HeadId (e.g. head_id(weight)) that must match vocab, hidden and hash.
    """
    from safetensors import safe_open

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such statistics file")
    try:
        with safe_open(path, framework="numpy") as f:
            metadata = f.metadata() or {}
            keys = list(f.keys())
            a = f.get_tensor(TENSOR) if TENSOR in keys else None
    except Exception as error:  # safetensors raises its own types for a damaged header
        raise ValueError(f"{path}: not a safetensors file ({error})") from None
    if metadata.get("format") != FORMAT or a is None:
        raise ValueError(f"{path}: not a radiance statistics file (format {FORMAT!r})")
    if metadata.get("version") != VERSION:
        raise ValueError(f"{path}: statistics version {metadata.get('version')!r}, expected {VERSION}")
    try:
        tokens = int(metadata["tokens"])
        ident = HeadId(int(metadata["vocab"]), int(metadata["hidden"]), metadata["head_sha256"])
    except (KeyError, ValueError):
        raise ValueError(f"{path}: damaged metadata (tokens, vocab, hidden, head_sha256)") from None
    if a.dtype != np.float32 or a.ndim != 1 or a.shape[0] != ident.hidden:
        raise ValueError(
            f"{path}: activation_sq is {a.dtype} {a.shape}, expected float32 [{ident.hidden}]"
        )
    _check_values(a, path)
    if expected_hidden is not None and ident.hidden != expected_hidden:
        raise ValueError(
            f"{path}: statistics for hidden size {ident.hidden}, but the model has "
            f"{expected_hidden}"
        )
    if expected_head_id is not None and ident != expected_head_id:
        raise ValueError(
            f"{path}: statistics of another head ({ident.describe()}); this model's is "
            f"{expected_head_id.describe()}"
        )
    return Stats(a, tokens, ident, metadata.get("model_path", ""), metadata.get("source", ""))
