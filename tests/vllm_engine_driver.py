"""One vLLM engine run for tests/test_vllm_engine.py: a script, because vLLM starts its engine
core and workers with spawn, which re-imports the main module (pytest's is not importable so).

    PYTHONPATH=tests python tests/vllm_engine_driver.py REQUEST.json RESULT.npz

REQUEST.json: {"model": folder, "first": [[token ids], ...], "windows": [[token ids], ...],
"logprobs": k}. The environment decides the head (RADIANCE_LMHEAD_INT4, ..._GS). RESULT.npz holds:
- the lm_head as the worker holds it: its method's class name, group size, every parameter's
  dtype and shape, and the parameters themselves;
- per prompt of "first": the top-k token ids and logprobs of the first generated token;
- per window of "windows": teacher-forced prompt logprobs, per position the logprob of the text's
  token and the top-1 token id (the last position's top-1 is the greedy first token);
- after a weight reload through the engine (model.load_weights inside the worker, as RL
  frameworks update weights) with the head's rows rolled by one: the head's parameters again
  and their addresses before and after; then the original weights reloaded and the first-token
  logprobs of "first" once more.
"""

import json
import sys

import numpy as np


def _head(model):
    language = model.get_language_model() if hasattr(model, "get_language_model") else model
    return language.lm_head


def head_state(model):
    """What the worker holds for the head: class, group size, parameters (NumPy; bf16 as its
    uint16 bits) and their addresses."""
    import torch

    head = _head(model)
    method = head.quant_method
    params = {}
    for name, param in head.named_parameters():
        data = param.data.detach().cpu()
        params[name] = {
            "dtype": str(data.dtype).replace("torch.", ""), "shape": list(data.shape),
            "address": int(param.data.data_ptr()),
            "bits": (data.view(torch.int16) if data.dtype == torch.bfloat16 else data).numpy(),
        }
    return {"method": type(method).__name__, "group_size": getattr(method, "group_size", None),
            "module": type(head).__name__, "params": params}


def reload_head(model, path, roll):
    """Load the checkpoint's embedding table (tied to the head) rolled by `roll` rows through the
    model's own load_weights, as an RL weight update does; returns head_state after it."""
    import torch
    from safetensors.torch import load_file

    tensors = load_file(path)
    name = "model.embed_tokens.weight"
    table = torch.roll(tensors[name], roll, dims=0) if roll else tensors[name]
    model.load_weights(iter([(name, table)]))
    return head_state(model)


def _first_token(llm, prompts, k):
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=k)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], params,
                           use_tqdm=False)
    ids, logprobs = [], []
    for output in outputs:
        top = output.outputs[0].logprobs[0]
        ranked = sorted(top.items(), key=lambda item: item[1].rank)[:k]
        ids.append([token for token, _ in ranked])
        logprobs.append([entry.logprob for _, entry in ranked])
    return np.array(ids, np.int64), np.array(logprobs, np.float64)


def _teacher_forced(llm, windows):
    """Per window: logprob of each text token given the tokens before it (positions 1..n-1) and
    the top-1 token after every position (0..n-1)."""
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=1, prompt_logprobs=1)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in windows], params,
                           use_tqdm=False)
    true_logprobs, top1 = [], []
    for ids, output in zip(windows, outputs):
        positions = output.prompt_logprobs[1:]  # the first token has no prediction
        true_logprobs.append([entry[token].logprob for token, entry in zip(ids[1:], positions)])
        best = [min(entry.items(), key=lambda item: item[1].rank)[0] for entry in positions]
        best.append(output.outputs[0].token_ids[0])  # greedy: the top-1 after the last token
        top1.append(best)
    return (np.concatenate([np.array(t, np.float64) for t in true_logprobs]),
            np.concatenate([np.array(t, np.int64) for t in top1]))


def _flatten(prefix, state, out):
    out[f"{prefix}method"] = np.array(state["method"])
    out[f"{prefix}module"] = np.array(state["module"])
    out[f"{prefix}group_size"] = np.array(state["group_size"] or 0)
    for name, param in state["params"].items():
        out[f"{prefix}param.{name}.dtype"] = np.array(param["dtype"])
        out[f"{prefix}param.{name}.shape"] = np.array(param["shape"], np.int64)
        out[f"{prefix}param.{name}.address"] = np.array(param["address"], np.uint64)
        out[f"{prefix}param.{name}.bits"] = param["bits"]


def main(request_path, result_path):
    import os
    import time
    from functools import partial

    from vllm import LLM

    request = json.loads(open(request_path).read())
    started = time.perf_counter()
    llm = LLM(model=request["model"], dtype="bfloat16", max_model_len=request["max_model_len"],
              seed=0, enforce_eager=True, max_num_seqs=8)
    out = {"startup_s": np.array(time.perf_counter() - started)}
    checkpoint = os.path.join(request["model"], "model.safetensors")

    _flatten("head.", llm.apply_model(head_state)[0], out)
    out["first.ids"], out["first.logprobs"] = _first_token(llm, request["first"],
                                                           request["logprobs"])
    out["text.true_logprobs"], out["text.top1"] = _teacher_forced(llm, request["windows"])
    _flatten("rolled.", llm.apply_model(partial(reload_head, path=checkpoint, roll=1))[0], out)
    _flatten("restored.", llm.apply_model(partial(reload_head, path=checkpoint, roll=0))[0], out)
    out["again.ids"], out["again.logprobs"] = _first_token(llm, request["first"],
                                                           request["logprobs"])
    out["total_s"] = np.array(time.perf_counter() - started)
    np.savez(result_path, **out)


if __name__ == "__main__":
    # The functions sent to the worker (apply_model) must be importable there by name: run them
    # from this file imported as a module, not from __main__, which is another module in each
    # spawned process.
    import vllm_engine_driver

    vllm_engine_driver.main(*sys.argv[1:3])
