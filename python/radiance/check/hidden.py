"""Real final hidden states for ``radiance check``: the model run with transformers on text, or
states saved earlier in a .npy file.

The states are captured at the input of the model's output projection, so they are exactly what
the head multiplies. torch and transformers are imported when a model is loaded, not before.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import zipfile
from dataclasses import dataclass

import numpy as np

from .checkpoint import model_kind
from .errors import CheckInputError


def default_text():
    """The public-domain prose shipped with radiance (see data/README.md)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # radiance/
    here = os.path.join(package, "data", "sample.txt")
    with open(here, encoding="utf-8") as f:
        return f.read()


def read_text(path):
    if not os.path.isfile(path):
        raise CheckInputError(f"{path}: no such text file")
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if not text.strip():
        raise CheckInputError(f"{path}: the text file is empty")
    return text


def read_hidden_header(path, option="hidden"):
    """(shape, dtype) of the saved hidden states in the .npy file ``path``, read from its header
    alone, so that a wrong file is refused before any model loads; errors name ``option``."""
    if not os.path.isfile(path):
        raise CheckInputError(f"{option} {path}: no such file")
    if zipfile.is_zipfile(path):
        raise CheckInputError(
            f"{option} {path}: a .npz archive (numpy.savez); {option} takes one array "
            f"[tokens, hidden] saved with numpy.save (.npy)"
        )
    with open(path, "rb") as f:
        if f.read(len(np.lib.format.MAGIC_PREFIX)) != np.lib.format.MAGIC_PREFIX:
            raise CheckInputError(
                f"{option} {path}: not a .npy file; {option} takes one array [tokens, hidden] "
                f"saved with numpy.save"
            )
        f.seek(0)
        try:
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read_header(f)
        except (ValueError, OSError) as e:
            raise CheckInputError(f"{option} {path}: a damaged .npy header ({e})") from None
    if dtype.hasobject or dtype.fields is not None:
        raise CheckInputError(
            f"{option} {path}: holds {'Python objects' if dtype.hasobject else 'records'}, not "
            f"numbers; save the hidden states as a float32 array [tokens, hidden]"
        )
    if len(shape) != 2:
        raise CheckInputError(
            f"{option} {path}: hidden states must be 2-D [tokens, hidden], got shape {list(shape)}"
        )
    if dtype.name not in ("float32", "float16"):
        hint = (
            " (bfloat16 arrays are saved by NumPy as raw 2-byte records: save float32 instead)"
            if dtype.kind == "V" and dtype.itemsize == 2
            else ""
        )
        raise CheckInputError(
            f"{option} {path}: hidden states have unsupported dtype {dtype}; expected float32 or "
            f"float16{hint}"
        )
    return tuple(shape), dtype


def load_hidden(path, width, option="hidden"):
    """The hidden states [tokens, width] saved in the .npy file ``path``; errors name ``option``."""
    try:
        hidden = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise CheckInputError(f"{option} {path}: cannot read it as a .npy array ({e})") from None
    if hidden.shape[1] != width:
        raise CheckInputError(
            f"head and hidden sizes do not match: the head is [vocab, {width}] but {option} "
            f"{path} holds hidden states [{hidden.shape[0]}, {hidden.shape[1]}]"
        )
    return hidden


@dataclass
class Runner:
    """A transformers causal LM and its tokenizer, ready to give final hidden states."""

    model: object
    tokenizer: object
    device: str
    source: str

    def token_text(self, row):
        """The text of vocabulary row ``row`` (its token decoded), or None past the vocabulary."""
        if row >= len(self.tokenizer):
            return None  # a padded head has rows no token maps to
        try:
            return self.tokenizer.decode([int(row)])
        except Exception:  # a tokenizer that cannot decode this id alone
            return self.tokenizer.convert_ids_to_tokens(int(row))


def _require_transformers():
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise CheckInputError(
            f"computing hidden states needs {' and '.join(missing)}: pip install 'radiance[check]' "
            f"(or pass --hidden FILE.npy with precomputed final hidden states)"
        )


def load_runner(path, device="cpu", dtype=None, progress=True):
    """Load the model at ``path`` (GGUF file or HF folder) with transformers, offline."""
    _require_transformers()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not progress:
        transformers.utils.logging.disable_progress_bar()

    kind = model_kind(path)
    kwargs = {"local_files_only": True}
    if kind == "gguf":
        if importlib.util.find_spec("accelerate") is None:
            raise CheckInputError(
                "transformers needs `accelerate` to load a GGUF: pip install 'radiance[check]'"
            )
        folder, kwargs["gguf_file"] = os.path.split(os.path.abspath(path))
    elif kind == "folder":
        folder = path
        if not os.path.isfile(os.path.join(folder, "config.json")):
            raise CheckInputError(
                f"{folder}: no config.json, so transformers cannot run this model"
            )
    else:
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isfile(os.path.join(folder, "config.json")):
            raise CheckInputError(
                f"{path}: a bare safetensors file holds the head but no model to compute hidden "
                f"states with; pass --hidden FILE.npy, or the model folder"
            )
    if dtype is None:
        dtype = torch.float32 if str(device).startswith("cpu") else torch.bfloat16
    try:
        with quiet_gguf_bar(not progress):
            tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kwargs)
    except OSError as e:
        raise CheckInputError(
            f"{path}: transformers could not load this model offline: {e}"
        ) from None
    model.to(device)
    model.eval()
    return Runner(model, tokenizer, str(device), path)


@contextlib.contextmanager
def quiet_gguf_bar(quiet=True):
    """Silence the bar transformers draws while it converts a GGUF: it calls tqdm itself, past
    `transformers.utils.logging.disable_progress_bar()`, and tqdm reads its TQDM_DISABLE
    variable only when it is imported."""
    module = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
    if module is None and quiet:
        try:
            import transformers.modeling_gguf_pytorch_utils as module
        except ImportError:  # a transformers without GGUF support: no bar to silence
            module = None
    original = getattr(module, "tqdm", None)
    if not quiet or original is None:
        yield
        return
    module.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        module.tqdm = original


def tokenize(runner, text, max_tokens=None):
    """The token ids of `text` as the model reads it, at most `max_tokens` (None: all)."""
    ids = runner.tokenizer(text, add_special_tokens=True)["input_ids"]
    if len(ids) < 2:
        raise CheckInputError("the text gives fewer than 2 tokens; give a longer text")
    return ids if max_tokens is None else ids[:max_tokens]


def next_tokens(ids, count):
    """The id of the token that follows each of the first ``count`` of ``ids`` (-1 past the end
    of the text): row t of their hidden states predicts it, which gives the perplexity."""
    following = np.full(count, -1, np.int64)
    known = np.asarray(ids[1 : count + 1], np.int64)
    following[: known.size] = known
    return following


def hidden_states(runner, ids, seq_len=512, progress=False):
    """Final hidden states [tokens, hidden] (float32 NumPy) that feed the output projection.

    Also returns the largest |model logits - hidden @ head.T| relative to the logit RMS, measured
    with the model's own head, which shows the captured states are the head's real input.
    """
    import torch

    model = runner.model
    head = model.get_output_embeddings()
    if head is None:
        raise CheckInputError(f"{runner.source}: the model has no output embeddings (lm_head)")
    captured = []
    hook = head.register_forward_pre_hook(lambda module, args: captured.append(args[0].detach()))
    windows = [ids[i : i + seq_len] for i in range(0, len(ids), seq_len)]
    states = []
    worst = 0.0
    try:
        iterator = windows
        if progress:
            try:
                from tqdm.auto import tqdm

                iterator = tqdm(windows, desc="hidden states", unit="window", file=sys.stderr)
            except ImportError:
                pass
        weight = head.weight.detach().float()
        bias = None if getattr(head, "bias", None) is None else head.bias.detach().float()
        for window in iterator:
            captured.clear()
            input_ids = torch.tensor([window], device=head.weight.device)
            with torch.inference_mode():
                out = model(input_ids=input_ids)
            hidden = captured[-1].reshape(-1, captured[-1].shape[-1]).float()
            logits = out.logits.reshape(-1, out.logits.shape[-1]).float()
            again = torch.nn.functional.linear(hidden, weight, bias)
            rms = float(logits.pow(2).mean().sqrt()) or 1.0
            worst = max(worst, float((logits - again).abs().max()) / rms)
            states.append(hidden.cpu().numpy())
    finally:
        hook.remove()
    return np.concatenate(states), worst
