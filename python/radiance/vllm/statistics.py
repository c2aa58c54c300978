"""The calibration statistics of clip act (RADIANCE_LMHEAD_INT4_STATS), checked against the head
they are used on; NumPy, safetensors and torch, no vLLM.

Which head a file belongs to (docs: README, "vLLM"):
- when the head is built: the file's hidden size must be the layer's, and its vocabulary size the
  layer's unpadded vocabulary (vLLM pads the vocabulary; the file counts the checkpoint's rows);
- after loading, at tensor parallelism 1: the SHA-256 of the head's rows as vLLM holds them
  (calibration.head_id) must be the file's. The hash is of the bytes in their dtype, so a
  checkpoint served in another dtype than it was calibrated in is another head.
- under tensor parallelism > 1 a rank holds only its vocabulary rows, and a hash of the whole head
  cannot be formed without gathering it: each rank checks hidden and vocabulary sizes only, and
  says so once in the log. Every rank reads the same file: the head is split by vocabulary rows,
  so the [hidden] statistics apply to every shard unchanged.
"""

import logging

from ..host import tensor_to_numpy
from .settings import ENV_STATS

logger = logging.getLogger("vllm.radiance")

# (path, mtime, size) -> Stats: the target's head and the drafter copies of a process share one
# read.
_loaded = {}


def load(path, hidden, vocab):
    """The Stats of `path` for a head [vocab, hidden]; ValueError naming ENV_STATS."""
    import os

    from radiance import calibration

    try:
        status = os.stat(path)
        key = (path, status.st_mtime_ns, status.st_size)  # a file written anew is read anew
    except OSError:
        key = None  # load_stats says what is wrong with the path
    stats = _loaded.get(key)
    if stats is None:
        try:
            stats = calibration.load_stats(path)
        except ValueError as error:
            raise ValueError(f"radiance: {ENV_STATS}: {error}") from None
        _loaded[key] = stats
    ident = stats.head
    if ident.hidden != hidden or ident.vocab != vocab:
        raise ValueError(f"radiance: {ENV_STATS}={path!r} holds statistics of a {ident.vocab} x "
                         f"{ident.hidden} head (vocab x hidden), but this model's lm_head is "
                         f"{vocab} x {hidden}: calibrate this model (radiance calibrate MODEL "
                         f"--out FILE)")
    return stats


def check_identity(stats, path, layer, weight):
    """After loading: at TP = 1 the hash of the head's rows must be the file's (see above)."""
    from radiance import calibration

    tp_size = getattr(layer, "tp_size", 1)
    if tp_size != 1:
        if getattr(layer, "tp_rank", 0) == 0:
            logger.info("radiance: %s: tensor parallelism %d, each rank holds a part of the "
                        "lm_head: checked its hidden and vocabulary sizes, not its hash",
                        ENV_STATS, tp_size)
        return
    rows = stats.head.vocab
    # One pass over the head on the host at start-up (a copy of it, and SHA-256 at roughly
    # 0.3 to 2 GB/s depending on the CPU): the price of refusing another model's statistics.
    ident = calibration.head_id(host_array(weight[:rows]))
    if ident != stats.head:
        raise ValueError(f"radiance: {ENV_STATS}={path!r} holds statistics of another head "
                         f"({stats.head.describe()}); this model's lm_head is {ident.describe()} "
                         f"as vLLM holds it ({str(weight.dtype).replace('torch.', '')}). Calibrate "
                         f"the checkpoint that vLLM serves, in the dtype it serves it in")
    logger.info("radiance: %s=%s: E[x^2] of %d tokens, measured on this lm_head (%s)", ENV_STATS,
                path, stats.tokens, ident.describe())


def host_array(tensor):
    """A torch tensor as a NumPy array of the same dtype and bytes (bf16 as ml_dtypes.bfloat16)."""
    return tensor_to_numpy(tensor)
