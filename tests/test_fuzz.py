"""Bounded fuzzing of radiance's argument handling: shapes, dtypes, byte orders, strides, offsets,
overlapping outputs and lying DLPack producers (tests/dlpack_forge.py).

Every case runs in a worker subprocess, so a crash (or a sanitizer report, under CI's ASan +
UBSan build) fails the case that caused it instead of ending the test run; the worker is then
started again. A case must either give the same bits as the plain call on native, contiguous
NumPy arrays, or raise TypeError/ValueError naming the argument; inputs are never modified.

RADIANCE_FUZZ_EXAMPLES sets the examples per test (default 1000: about a minute on 2 CPUs).
"""

import json
import os
import select
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import radiance

EXAMPLES = int(os.environ.get("RADIANCE_FUZZ_EXAMPLES", "1000"))
CASE_TIMEOUT_S = 120  # generous: sanitizer builds are slow

# The worker: reads one JSON case per line, answers one JSON line.
WORKER = textwrap.dedent(r'''
    import json, sys
    import numpy as np
    import radiance
    from dlpack_forge import ForgedProducer

    BF16 = np.dtype(radiance.bfloat16)
    DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16,
              "i32": np.dtype(np.int32), "i8": np.dtype(np.int8), "u8": np.dtype(np.uint8),
              "f64": np.dtype(np.float64)}

    def lay_out(values, spec):
        """values (native, contiguous) in spec's dtype, byte order and layout; the backing
        buffer is returned too (what overlap cases place an output in)."""
        a = values.astype(DTYPES[spec["dtype"]]) if spec["dtype"] != "i8view" else values
        if spec["order"] == "swapped":
            a = a.astype(a.dtype.newbyteorder("S"))
        layout = spec["layout"]
        if layout == "strided" and a.ndim >= 1:
            wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
            wide[..., ::2] = a
            return wide[..., ::2], wide
        if layout == "fortran":
            return np.asfortranarray(a), None
        if layout == "offset":  # starts `shift` bytes into a byte buffer: misaligned for shift % size
            raw = np.zeros(a.nbytes + 8, np.uint8)
            view = raw[spec["shift"]: spec["shift"] + a.nbytes].view(a.dtype).reshape(a.shape)
            view[...] = a
            return view, raw
        return a.copy(), None

    def as_argument(a, spec):
        if spec["kind"] == "forged":
            a = np.ascontiguousarray(a)
            return ForgedProducer(a, versioned=spec["versioned"], **spec["lie"]), a
        return a, a

    def stride_lie_is_moot(a, spec):
        """A lie of strides alone that addresses what the true strides do: equal to them on every
        dimension of extent above 1 (NumPy ignores the strides of extent-1 dimensions too), as
        [-1, 1] on one row, or [5, 5] on one element. A consumer reads ndim strides, so entries
        past them ([5, 5] on a one-dimensional bias) are not part of the tensor."""
        lie = spec.get("lie") or {}
        if spec["kind"] != "forged" or set(lie) != {"strides"} or len(lie["strides"]) < a.ndim:
            return False
        true = [step // a.itemsize for step in np.ascontiguousarray(a).strides]
        return all(said == real for said, real, extent in zip(lie["strides"], true, a.shape) if extent > 1)

    def read_alignment(argument, spec):
        """The boundary below which radiance copies an input: its element size, 4 for the
        int8 view of packed words (read as int32)."""
        return 4 if spec["dtype"] == "i8view" else getattr(argument, "array", argument).dtype.itemsize

    def call(fn, a, g, clip, kwargs):
        """radiance.<fn> on the named arguments a (output keywords in kwargs)."""
        if fn == "apply":
            return radiance.apply(a["x"], a["packed"], a["scales"], a["bias"], g, **kwargs)
        if fn == "quantize_rows":
            return radiance.quantize_rows(a["w"], g, clip, **kwargs)
        if fn == "dequantize":
            return radiance.dequantize(a["packed"], a["scales"], g)
        if fn == "unpack_shuffle":
            return radiance.unpack_shuffle(a["words"])
        return radiance.pack_shuffle(a["nibbles"])

    def run(case):
        overlaps_in_place = False
        rng = np.random.default_rng(case["seed"])
        fn, m, n, k, g = case["fn"], case["m"], case["n"], case["k"], case["group_size"]
        w = rng.standard_normal((n, k)).astype(np.float32)
        plain = {}
        if fn in ("apply", "dequantize", "unpack_shuffle"):
            packed, scales = radiance.quantize_rows(w, group_size=g if g in (32, 64, 128, 256) else 32)
        if fn == "apply":
            plain = {"x": rng.standard_normal((m, case["k_x"])).astype(np.float32),
                     "packed": packed, "scales": scales,
                     "bias": rng.standard_normal(n).astype(np.float32) if case["bias"] else None}
            outputs = {"out": np.zeros((m, n), BF16)}
        elif fn == "quantize_rows":
            plain = {"w": w}
            outputs = {"packed_out": np.zeros((n, k // 8), np.int32),
                       "scales_out": np.zeros((n, max(k // max(g, 1), 0)), BF16)}
        elif fn == "dequantize":
            plain = {"packed": packed, "scales": scales}
            outputs = {}
        elif fn == "unpack_shuffle":
            plain = {"words": packed}
            outputs = {}
        else:
            plain = {"nibbles": rng.integers(0, 17 if case["bad_nibble"] else 16, size=(n, k),
                                             dtype=np.uint8)}
            outputs = {}
        specs = case["args"]
        # the arguments as the case lays them out (dtype, order, layout, producer)
        args, backing, originals = {}, {}, {}
        moot = []  # the arguments whose producer's lie changes nothing (stride_lie_is_moot)
        for name, values in plain.items():
            if values is None:
                args[name] = None
                continue
            spec = specs[name]
            base = values
            if spec["dtype"] == "i8view":
                base = values.view(np.int8)
            elif spec["dtype"] == "same":
                spec = dict(spec, dtype={np.dtype(np.float32): "f32", BF16: "bf16",
                                         np.dtype(np.int32): "i32", np.dtype(np.uint8): "u8"}[values.dtype])
            a, buffer = lay_out(base, spec)
            # what the expected result is computed from: the same values and dtype, native, contiguous
            plain[name] = base if spec["dtype"] == "i8view" else base.astype(DTYPES[spec["dtype"]])
            args[name], held = as_argument(a, spec)
            if stride_lie_is_moot(held, spec):
                moot.append(name)
            backing[name] = buffer if buffer is not None else held
            originals[name] = backing[name].tobytes()
        for name, values in outputs.items():
            spec = specs.get(name)
            if spec is None or spec.get("omit"):
                continue
            target = values
            if spec["order"] == "swapped":
                target = target.astype(target.dtype.newbyteorder("S"))
            if spec["layout"] == "strided" and target.size:
                wide = np.zeros(target.shape[:-1] + (2 * target.shape[-1],), target.dtype)
                target = wide[..., ::2]
            if spec["layout"] == "offset":
                raw = np.zeros(target.nbytes + 8, np.uint8)
                target = raw[spec["shift"]: spec["shift"] + target.nbytes].view(target.dtype).reshape(target.shape)
            alias = case.get("alias")
            if alias and alias[0] == name and backing.get(alias[1]) is not None:
                buffer = backing[alias[1]]
                raw = buffer.reshape(-1).view(np.uint8) if buffer.flags.c_contiguous else None
                start = min(alias[2], max(raw.nbytes - target.nbytes, 0)) if raw is not None else 0
                start -= start % target.dtype.itemsize
                if raw is not None and target.nbytes and raw.nbytes - start >= target.nbytes:
                    target = raw[start: start + target.nbytes].view(target.dtype).reshape(target.shape)
                    # an input radiance reads in place (no conversion copy) shares these bytes
                    read_in_place = (specs[alias[1]]["order"] == "native" and
                                     (specs[alias[1]]["layout"] == "contiguous" or
                                      (specs[alias[1]]["layout"] == "offset" and
                                       specs[alias[1]]["shift"] % read_alignment(
                                           args[alias[1]], specs[alias[1]]) == 0)))
                    # an "offset" input lies `shift` bytes into its buffer, and the output may
                    # land in the buffer's padding past it: only shared bytes must be refused
                    data_start = specs[alias[1]]["shift"] if specs[alias[1]]["layout"] == "offset" else 0
                    data_end = data_start + np.asarray(plain[alias[1]]).nbytes
                    shares = start < data_end and data_start < start + target.nbytes
                    overlaps_in_place = read_in_place and shares and not specs[alias[1]].get("lie")
            args[name], outputs[name] = as_argument(target, spec)
            if stride_lie_is_moot(outputs[name], spec):
                moot.append(name)
        call_args = args
        kwargs = {}
        try:
            for name in ("out", "packed_out", "scales_out"):
                if name in specs and not specs[name].get("omit"):
                    kwargs[name] = call_args[name]
            got = call(fn, call_args, g, case.get("clip"), kwargs)
        except (TypeError, ValueError) as error:
            message = str(error)
            for name, original in originals.items():
                if backing[name].tobytes() != original:
                    return {"outcome": "modified", "detail": name + ": " + message}
            return {"outcome": "refused", "detail": f"{type(error).__name__}: {message}",
                    "must_refuse": overlaps_in_place, "moot": moot}
        except Exception as error:
            return {"outcome": "other", "detail": f"{type(error).__name__}: {error}"}
        # the plain call on native, contiguous NumPy arrays
        expected = call(fn, plain, g, case.get("clip"), {})
        pairs = list(zip(got, expected)) if isinstance(expected, tuple) else [(got, expected)]
        if fn == "quantize_rows":
            pairs += [(outputs[name], e) for name, e in zip(("packed_out", "scales_out"), expected)
                      if name in kwargs]
        elif "out" in kwargs:
            pairs.append((outputs["out"], expected))
        for a, b in pairs:
            a = a.array if isinstance(a, ForgedProducer) else a  # out= is returned as passed
            a, b = np.asarray(a), np.asarray(b)
            if a.shape != b.shape or a.astype(b.dtype).tobytes() != b.tobytes():
                return {"outcome": "wrong", "detail": f"shape {a.shape} vs {b.shape}"}
        for name, original in originals.items():
            if (case.get("alias") or [None, None])[1] == name:
                continue  # an output placed in this input's (copied) bytes was written
            if backing[name].tobytes() != original:
                return {"outcome": "modified", "detail": name}
        return {"outcome": "ok", "detail": "", "must_refuse": overlaps_in_place, "moot": moot}

    for line in sys.stdin:
        print(json.dumps(run(json.loads(line))), flush=True)
''')


class Worker:
    """One long-lived subprocess that runs cases; restarted after a crash."""

    def __init__(self):
        self.proc = None

    def start(self):
        here = os.path.dirname(os.path.abspath(__file__))
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(radiance.__file__)))
        path = os.pathsep.join([package_root, here, os.environ.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=path))

    def run(self, case):
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], CASE_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        self.proc.kill()
        self.proc.wait()
        stderr = self.proc.stderr.read()
        self.proc = None
        return {"outcome": "crash" if ready else "hang", "detail": stderr[-4000:]}

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()


# -- strategies ----------------------------------------------------------------------------------

LIES = [
    {"shape": [2, -1024]}, {"shape": [2**62, 2**62]}, {"shape": [2**40, 2**40]}, {"ndim": 7},
    {"ndim": -3}, {"null_shape": True}, {"strides": [5, 5]}, {"strides": [-1, 1]}, {"data": 0},
    {"byte_offset": 2**64 - 4}, {"device": [2, 0], "announced": [1, 0]},
    {"device": [1, 1], "announced": [1, 0]}, {"dtype": [2, 32, 2]}, {"dtype": [2, 8, 1]},
    {"dtype": [7, 16, 1]},
]


def argument(dtypes, output=False):
    plain = st.fixed_dictionaries({
        "kind": st.just("numpy"),
        "dtype": st.sampled_from(dtypes),
        "order": st.sampled_from(["native", "native", "swapped"]),
        "layout": st.sampled_from(["contiguous", "contiguous", "strided", "fortran", "offset"]),
        "shift": st.integers(0, 7),
    })
    forged = st.fixed_dictionaries({
        "kind": st.just("forged"),
        "dtype": st.sampled_from(dtypes),
        "order": st.just("native"),
        "layout": st.sampled_from(["contiguous", "offset"]),
        "shift": st.integers(0, 7),
        "versioned": st.booleans(),
        "lie": st.one_of(st.just({}), st.just({}), st.sampled_from(LIES)),
    })
    choices = [plain, forged]
    if output:
        choices.append(st.just({"omit": True}))
    return st.one_of(*choices)


FLOATS = ["same", "same", "f32", "f16", "bf16", "f64", "i32"]
group_sizes = st.sampled_from([32, 64, 128, 256, 32, 128, 0, 48, 2**31])
common = dict(seed=st.integers(0, 2**32 - 1), m=st.integers(0, 5), n=st.integers(0, 24),
              groups=st.integers(1, 3), group_size=group_sizes)


def case_of(draw, fn, args, alias_targets=()):
    g = draw(common["group_size"])
    k = draw(common["groups"]) * (g if g in (32, 64, 128, 256) else 32)
    case = {"fn": fn, "seed": draw(common["seed"]), "m": draw(common["m"]),
            "n": draw(common["n"]), "k": k, "group_size": g, "args": draw(args)}
    case["k_x"] = draw(st.sampled_from([k, k, k, k - 8 if k > 8 else k + 8]))
    case["bias"] = draw(st.booleans())
    case["clip"] = draw(st.sampled_from(["mse", "rtn", "mse", "MSE"]))
    case["bad_nibble"] = draw(st.booleans())
    if alias_targets and draw(st.booleans()):
        out, inputs = alias_targets
        case["alias"] = [out, draw(st.sampled_from(inputs)), draw(st.integers(0, 64))]
    return case


@st.composite
def apply_cases(draw):
    args = st.fixed_dictionaries({
        "x": argument(FLOATS), "packed": argument(["same", "same", "i8view", "f32"]),
        "scales": argument(["same", "same", "f16"]), "bias": argument(FLOATS),
        "out": argument(["bf16", "bf16", "f32"], output=True)})
    return case_of(draw, "apply", args, ("out", ["x", "packed", "scales", "bias"]))


@st.composite
def quantize_cases(draw):
    args = st.fixed_dictionaries({
        "w": argument(FLOATS), "packed_out": argument(["i32", "i32", "f32"], output=True),
        "scales_out": argument(["bf16", "bf16", "f16"], output=True)})
    case = case_of(draw, "quantize_rows", args, ("packed_out", ["w"]))
    if not case.get("alias") and draw(st.booleans()):
        case["alias"] = ["scales_out", "w", draw(st.integers(0, 64))]
    return case


@st.composite
def other_cases(draw):
    fn = draw(st.sampled_from(["dequantize", "unpack_shuffle", "pack_shuffle"]))
    args = st.fixed_dictionaries({
        "packed": argument(["same", "same", "i8view", "f32"]), "scales": argument(["same", "f16"]),
        "words": argument(["same", "same", "u8"]), "nibbles": argument(["same", "same", "i32"])})
    return case_of(draw, fn, args)


# -- what each case must give ----------------------------------------------------------------------


ARGUMENTS = {
    "apply": ("x", "packed", "scales", "bias", "out"),
    "quantize_rows": ("w", "packed_out", "scales_out"),
    "dequantize": ("packed", "scales"),
    "unpack_shuffle": ("words",),
    "pack_shuffle": ("nibbles",),
}
NAMES = ("x", "packed", "scales", "bias", "out", "w", "packed_out", "scales_out", "words",
         "nibbles", "group_size", "clip")


# An empty tensor's strides and data pointer mean nothing (NumPy's neither): not lies there.
EMPTY_MAY_SAY = {"strides", "data", "byte_offset"}


def is_empty(case, name):
    return case["n"] == 0 or (name in ("x", "out") and case["m"] == 0)


def check(worker, case):
    result = worker.run(case)
    outcome, detail = result["outcome"], result["detail"]
    where = f"\ncase: {json.dumps(case)}"
    assert outcome in ("ok", "refused"), f"{outcome}: {detail}{where}"
    if outcome == "refused":
        message = detail.split(": ", 1)[1]
        assert message.startswith(NAMES), f"the message does not name the argument: {detail}{where}"
    used = [n for n in ARGUMENTS[case["fn"]] if n != "bias" or case["bias"]]
    lied = [n for n in used if case["args"][n].get("lie") and
            not (is_empty(case, n) and set(case["args"][n]["lie"]) & EMPTY_MAY_SAY) and
            n not in result.get("moot", ())]  # strides that address what the true ones do
    assert outcome == "refused" or not lied, f"a lying producer ({lied}) was taken{where}"
    assert outcome == "refused" or not result["must_refuse"], \
        f"an output overlapping an input read in place was taken{where}"


PLAIN = {"kind": "numpy", "dtype": "same", "order": "native", "layout": "contiguous", "shift": 0}

FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(case=apply_cases())
def test_fuzz_apply(worker, case):
    check(worker, case)


def assert_one_element_stride_lie_is_taken(worker, name):
    """apply with its argument `name` (scales or bias) of one element announced with strides
    [5, 5]: those address the same element as the true strides, so apply takes it and computes
    what it should, with nothing to compute (m = 0) or two tokens."""
    for m in (0, 2):
        args = {"x": PLAIN, "packed": PLAIN, "scales": PLAIN, "bias": PLAIN, "out": {"omit": True},
                name: dict(PLAIN, kind="forged", versioned=False, lie={"strides": [5, 5]})}
        case = {"fn": "apply", "seed": 0, "m": m, "n": 1, "k": 32, "group_size": 32, "k_x": 32,
                "bias": name == "bias", "clip": "mse", "bad_nibble": False, "args": args}
        assert worker.run(case)["outcome"] == "ok", m
        check(worker, case)


def test_a_stride_lie_on_one_element_scales_is_no_lie(worker):
    # Hypothesis's find: scales [1, 1] announced with strides [5, 5]
    assert_one_element_stride_lie_is_taken(worker, "scales")


def test_a_stride_lie_on_a_one_element_bias_is_no_lie(worker):
    # Hypothesis's find: a bias of one element (n = 1, one dimension) announced with strides [5, 5]:
    # the consumer reads its one stride, of an extent-1 dimension, so the element is the true one
    assert_one_element_stride_lie_is_taken(worker, "bias")


def test_a_stride_lie_on_extent_one_dimensions_is_no_lie(worker):
    # Hypothesis's find: one row of words announced with strides [-1, 1] addresses the row as the
    # true strides [4, 1] do, so unpack_shuffle takes it; on two rows the same lie must be refused
    for n, outcome in ((1, "ok"), (2, "refused")):
        case = {"fn": "unpack_shuffle", "seed": 0, "m": 0, "n": n, "k": 32, "group_size": 32, "k_x": 32,
                "bias": False, "clip": "mse", "bad_nibble": False,
                "args": {"words": dict(PLAIN, kind="forged", versioned=False, lie={"strides": [-1, 1]})}}
        assert worker.run(case)["outcome"] == outcome, n
        check(worker, case)


def test_an_empty_x_with_a_null_data_pointer_is_taken(worker):
    # Hypothesis's find: x of no elements (m = 0) whose DLPack data pointer is null, as a producer
    # may hand out for an empty tensor; the CPU path copied 0 bytes from it (memcpy's source must
    # not be null even then: UBSan). Nothing to compute, with or without rows and bias.
    for n, bias in ((0, False), (3, True)):
        case = {"fn": "apply", "seed": 0, "m": 0, "n": n, "k": 32, "group_size": 32, "k_x": 32,
                "bias": bias, "clip": "mse", "bad_nibble": False,
                "args": {"x": dict(PLAIN, kind="forged", versioned=False, lie={"data": 0}), "packed": PLAIN,
                         "scales": PLAIN, "bias": PLAIN, "out": PLAIN}}
        assert worker.run(case)["outcome"] == "ok", n
        check(worker, case)


@FUZZ
@given(case=quantize_cases())
def test_fuzz_quantize_rows(worker, case):
    check(worker, case)


@FUZZ
@given(case=other_cases())
def test_fuzz_dequantize_pack_unpack(worker, case):
    check(worker, case)
