"""Keeping an int4 head in step with weight reloads: the tied-embedding case and a plain second
`load_weights` into the packed parameter. torch only; the vLLM objects arrive as arguments."""

import logging

import torch

from .shards import quantize_into

logger = logging.getLogger("vllm.radiance")


def is_tied(layer):
    """Whether layer.weight is shared with another module (the input embeddings)."""
    if getattr(layer, "_radiance_tied", False):
        return True
    owner = loader_owner(layer.weight)
    return owner is not None and owner is not layer


def loader_owner(param):
    """The module whose weight_loader the parameter carries (the module that created it)."""
    loader = getattr(param, "weight_loader", None)
    return getattr(loader, "_radiance_owner", None) or getattr(loader, "__self__", None)


def follow_tied_embedding(head, source, packed, weight_scale, method):
    """Keep a tied head's int4 copy in step with the embedding table it was tied to.

    The checkpoint of a tied model holds only the embeddings, so a weight reload writes the
    embedding and never reaches the head. Two reload paths are followed: vLLM's layerwise reload
    (reload_weights) runs the embedding method's process_weights_after_loading again, and a plain
    second load_weights calls the embedding parameter's weight_loader; after either, the head is
    re-quantized in place from the new table.
    """
    loader = getattr(source, "weight_loader", None)
    embedding = loader_owner(source)
    if embedding is None or embedding is head:
        logger.warning("radiance: %s is tied to a table whose owner is unknown; a later weight "
                       "reload will not reach the int4 head", head.prefix or "lm_head")
        return
    words = packed.data.view(torch.int32)

    def requantize(table):
        if tuple(table.shape) != (words.shape[0], words.shape[1] * 8):
            raise ValueError(f"radiance: the embedding table tied to {head.prefix or 'lm_head'} "
                             f"changed shape to {tuple(table.shape)}; the int4 head holds "
                             f"[{words.shape[0]}, {words.shape[1] * 8}]")
        quantize_into(table.data, words, weight_scale.data, method.group_size, method.clip,
                      method.activation_sq)

    embedding_method = embedding.quant_method
    original_process = embedding_method.process_weights_after_loading

    def process_weights_after_loading(layer):
        original_process(layer)
        requantize(layer.weight)

    embedding_method.process_weights_after_loading = process_weights_after_loading

    def radiance_tied_embedding_loader(param, loaded_weight):
        loader(param, loaded_weight)
        requantize(param)

    radiance_tied_embedding_loader._radiance_owner = embedding
    source.weight_loader = radiance_tied_embedding_loader


def packed_weight_loader(layer, method):
    """Loads a checkpoint's float [vocab, hidden] lm_head weight into an already-int4 head.

    vLLM's layerwise reload restores the bf16 parameter and runs process_weights_after_loading
    again; this loader serves a plain second `load_weights` instead: it takes this rank's rows
    the way VocabParallelEmbedding.weight_loader does and re-quantizes them in place, so the
    tensors that CUDA graphs captured keep their addresses.
    """

    def radiance_packed_weight_loader(param, loaded_weight):
        words = param.data.view(torch.int32)
        rows, cols = words.shape[0], words.shape[1] * 8
        if (loaded_weight.dim() != 2 or not loaded_weight.dtype.is_floating_point
                or loaded_weight.shape != (layer.org_vocab_size, cols)):
            raise ValueError(f"radiance: {layer.prefix or 'lm_head'}.weight is int4 now (int8 "
                             f"[{rows}, {cols // 2}]); it reloads from a float [vocab="
                             f"{layer.org_vocab_size}, hidden={cols}] checkpoint weight, got "
                             f"{loaded_weight.dtype} {tuple(loaded_weight.shape)}")
        start = layer.shard_indices.org_vocab_start_index
        stop = layer.shard_indices.org_vocab_end_index
        shard = loaded_weight.narrow(0, start, stop - start)
        quantize_into(shard, words, layer.weight_scale.data, method.group_size, method.clip,
                      method.activation_sq)

    return radiance_packed_weight_loader
