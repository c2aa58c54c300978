"""Host NumPy copies of torch tensors, shared by the check tool, calibration and the vLLM plugin.

torch's ``.numpy()`` has no bfloat16; radiance keeps bf16 as ``ml_dtypes.bfloat16`` with the same
bytes, so a torch head and its NumPy copy quantize, hash and compare alike. torch itself is not
imported here: only a tensor the caller already holds is converted.
"""

import ml_dtypes


def tensor_to_numpy(tensor):
    """A torch tensor (any device) as a host NumPy array of the same dtype and values."""
    tensor = tensor.detach().to("cpu")
    if str(tensor.dtype) == "torch.bfloat16":
        import torch  # already imported: `tensor` is one

        return tensor.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()
