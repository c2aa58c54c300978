"""Tensor parallelism over the vocabulary, two processes: NCCL on two GPUs, gloo on the CPU.

Each rank takes its vocabulary shard as vLLM's VocabParallelEmbedding lays it out (the vocabulary
padded to a multiple of 64 rows, split evenly; a rank's rows past the vocabulary are zeros),
quantizes it on its own device, computes its shard's logits and all-gathers them. The gathered
logits must equal one device's full-head logits bit for bit, and lie within one bf16 rounding of
the float64 reference. Bit for bit because nothing differs but the grouping of rows:
- quantization is row-local (a row's scales and words depend on that row alone), so a shard's
  rows are the full head's rows, and padding rows are all-zero rows that the gather slices off;
- a logit y[m, n] is computed from x[m] and row n alone, by a kernel the dispatcher picks from
  (M, K, group size, device) but never from N, with no split of a row's K-sum that depends on N:
  the same fp32 operations in the same order; the all-gather copies bytes.
The same again through vLLM's own shard indices and weight loader and radiance's
RadianceLMHeadInt4 method, where vLLM can be imported (never on the GPU host, where vLLM is not
installed: those cases skip, saying so).

Every wait is bounded: a rank that hangs or dies fails the test within RANK_TIMEOUT_S.
NCCL_NVLS_ENABLE=0 (NVLink multicast off) is set before any process group exists.
"""

import dataclasses
import datetime
import importlib.util
import os
import queue as queue_module
import re
import socket
import time

import ml_dtypes
import numpy as np
import pytest

import radiance
from reference import apply_reference

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

BF16 = ml_dtypes.bfloat16
WORLD_SIZE = 2
VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE
RANK_TIMEOUT_S = 240  # start-up (imports, CUDA, NCCL) and the work of one run, every rank


# --- the shard layout ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Shard:
    """A rank's rows: padded_start..padded_end of the padded vocabulary; of those, start..end
    hold vocabulary rows and the rest (end - start .. rows) are zero padding."""

    padded_start: int
    padded_end: int
    start: int
    end: int

    @property
    def rows(self):
        return self.padded_end - self.padded_start


def vocab_shard(vocab, rank, world_size, padding=VOCAB_PADDING):
    """Rank's shard of a vocab-row head, laid out as vLLM's VocabParallelEmbedding does (no
    added vocabulary): pad the vocabulary to a multiple of `padding`, split it evenly."""
    padded = -(-vocab // padding) * padding
    if padded % world_size:
        raise ValueError(f"{padded} padded vocabulary rows do not split over {world_size} ranks")
    per_rank = padded // world_size
    lo = rank * per_rank
    return Shard(lo, lo + per_rank, min(lo, vocab), min(lo + per_rank, vocab))


def shard_rows(table, shard):
    """The shard's rows of a [vocab, ...] table, zero-padded to shard.rows (as vLLM loads it)."""
    piece = table[shard.start:shard.end]
    padding = torch.zeros((shard.rows - piece.shape[0], *table.shape[1:]), dtype=table.dtype,
                          device=table.device)
    return torch.cat([piece, padding])


def gather_shards(pieces, vocab):
    """Shard logits [M, rows] in rank order -> the vocabulary's logits [M, vocab]."""
    return torch.cat(list(pieces), dim=-1)[..., :vocab]


def test_vocab_shard_layout():
    # Worked by hand: 1000 rows pad to 1024; rank 1 holds 512..999 and 24 zero rows.
    assert vocab_shard(1000, 0, 2) == Shard(0, 512, 0, 512)
    assert vocab_shard(1000, 1, 2) == Shard(512, 1024, 512, 1000)
    assert vocab_shard(151936, 7, 8) == Shard(132944, 151936, 132944, 151936)  # no padding
    assert vocab_shard(65, 3, 4) == Shard(96, 128, 65, 65)  # a rank of padding only
    assert vocab_shard(65, 3, 4).end - vocab_shard(65, 3, 4).start == 0
    with pytest.raises(ValueError, match="do not split"):
        vocab_shard(100, 0, 3)
    rng = np.random.default_rng()
    for _ in range(200):
        vocab, world = int(rng.integers(1, 300_000)), int(rng.choice([1, 2, 4, 8]))
        shards = [vocab_shard(vocab, r, world) for r in range(world)]
        assert len({s.rows for s in shards}) == 1 and shards[0].rows * world % VOCAB_PADDING == 0
        assert shards[-1].padded_end - vocab < VOCAB_PADDING
        covered = [n for s in shards for n in range(s.start, s.end)]
        assert covered == list(range(vocab)), (vocab, world)  # every row once, in order


def test_shard_rows_and_gather_rebuild_the_head():
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    vocab, hidden = 1003, 8
    table = torch.randn(vocab, hidden, generator=g)
    shards = [vocab_shard(vocab, r, 2) for r in range(2)]
    pieces = [shard_rows(table, s) for s in shards]
    assert [tuple(p.shape) for p in pieces] == [(512, hidden), (512, hidden)]
    assert torch.equal(pieces[1][vocab - 512:], torch.zeros(1024 - vocab, hidden))
    assert torch.equal(gather_shards([p.t() for p in pieces], vocab), table.t())
    bias_pieces = [shard_rows(table[:, 0], s) for s in shards]
    assert torch.equal(gather_shards(bias_pieces, vocab), table[:, 0])


# Only whether vLLM is installed, at collection: importing it takes seconds, and every spawned
# rank imports this module again. Whether it imports is checked by the tests that need it.
needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed here (the GPU host has none; .ci/vllm_env.sh makes a CPU venv "
           "with it)")


def _import_vllm_or_skip():
    try:
        import vllm.model_executor.layers.vocab_parallel_embedding  # noqa: F401
    except Exception as error:  # a vLLM that cannot run here: say exactly why
        pytest.skip(f"vllm is installed but cannot be imported: {type(error).__name__}: {error}")


@needs_vllm
def test_vocab_shard_is_vllms():
    _import_vllm_or_skip()
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    rng = np.random.default_rng()
    for _ in range(200):
        vocab, world = int(rng.integers(1, 300_000)), int(rng.choice([1, 2, 4, 8]))
        padded = -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
        for rank in range(world):
            ours = vocab_shard(vocab, rank, world)
            theirs = VocabParallelEmbedding._get_indices(padded, padded, vocab, vocab, rank, world)
            assert ours == Shard(theirs.padded_org_vocab_start_index,
                                 theirs.padded_org_vocab_end_index,
                                 theirs.org_vocab_start_index, theirs.org_vocab_end_index)


# --- one rank -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    vocab: int
    hidden: int
    group_size: int
    clip: str
    ms: tuple  # token counts, one apply (and one gather) each


# The GPU case covers every kernel the dispatcher picks on an H200 for M (1..100) at K = 2944; the
# CPU case is small, two cores are shared here.
CASES = {"nccl": Case(12347, 2944, 128, "mse", (1, 5, 8, 16, 33, 64, 100)),
         "gloo": Case(1003, 384, 64, "mse", (1, 5))}


def make_problem(case, seed):
    """The full head, its bias and the hidden states: the same on every rank (same seed)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(case.vocab, case.hidden, generator=g) * 0.02
    w[torch.rand(case.vocab, case.hidden, generator=g) < 0.01] *= 8  # outliers
    w[case.vocab // 3] = 0.0
    bias = torch.randn(case.vocab, generator=g).to(torch.bfloat16)
    xs = [(torch.randn(m, case.hidden, generator=g) * 2).to(torch.bfloat16) for m in case.ms]
    return w.to(torch.bfloat16), bias, xs


def _bits(t):
    """A CPU NumPy copy of t's bits (bf16 as int16): what crosses the process boundary."""
    t = t.detach().cpu().contiguous()
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().copy()


def _init_process_group(backend, rank, port, device):
    kwargs = dict(backend=backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                  world_size=WORLD_SIZE, timeout=datetime.timedelta(seconds=RANK_TIMEOUT_S // 2))
    if backend == "nccl":
        kwargs["device_id"] = device  # binds the communicator to this rank's GPU at once
    dist.init_process_group(**kwargs)


def _shard_logits_radiance(case, shard, w, bias, xs, device):
    """radiance's calls on this rank's shard: (packed, scales, {M: logits [M, rows]})."""
    from radiance import torch_ops

    w_shard = shard_rows(w, shard).to(device)
    packed, scales = radiance.quantize_rows(w_shard, case.group_size, case.clip)
    bias_shard = shard_rows(bias, shard).to(device)
    logits = {}
    for x in xs:
        x_dev = x.to(device)
        y = torch_ops.apply_int4(x_dev, packed.view(torch.int8), scales, bias_shard,
                                 case.group_size)
        y_public = radiance.apply(x_dev, packed, scales, bias_shard, case.group_size)
        if not torch.equal(y.view(torch.int16), y_public.view(torch.int16)):
            raise AssertionError(f"M={x.shape[0]}: torch_ops.apply_int4 and radiance.apply differ")
        logits[x.shape[0]] = y
    return packed, scales, logits


def _shard_logits_vllm(case, shard, w, bias, xs, device, rank):
    """The same through vLLM's objects: the shard indices VocabParallelEmbedding computes, its
    weight loader, UnquantizedEmbeddingMethod.create_weights on the rank's device, then
    RadianceLMHeadInt4's process_weights_after_loading and apply."""
    import types

    import radiance.vllm as rv
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    padded = shard.rows * WORLD_SIZE
    indices = VocabParallelEmbedding._get_indices(padded, padded, case.vocab, case.vocab, rank,
                                                  WORLD_SIZE)
    method = rv.RadianceLMHeadInt4(group_size=case.group_size, clip=case.clip)
    layer = torch.nn.Module()
    with torch.device(device):
        method.create_weights(layer, case.hidden, [shard.rows], case.hidden, padded,
                              torch.bfloat16)
    layer.tp_rank, layer.tp_size = rank, WORLD_SIZE
    loader_owner = types.SimpleNamespace(shard_indices=indices, org_vocab_size=case.vocab)
    VocabParallelEmbedding.weight_loader(loader_owner, layer.weight, w)
    if layer.weight.device != device:
        raise AssertionError(f"vLLM created the weight on {layer.weight.device}, not {device}")
    method.process_weights_after_loading(layer)
    bias_shard = shard_rows(bias, shard).to(device)
    logits = {x.shape[0]: method.apply(layer, x.to(device), bias_shard) for x in xs}
    return layer.weight.view(torch.int32), layer.weight_scale, logits


def _rank_main(rank, backend, port, seed, case, through_vllm, results):
    """One rank; puts (rank, dict of NumPy arrays) or (rank, error text) on `results`."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # before the process group: NVLink multicast off
    if backend == "gloo":
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)  # what vLLM's workers do
            device = torch.device("cuda", rank)
        else:
            device = torch.device("cpu")
        _init_process_group(backend, rank, port, device)
        w, bias, xs = make_problem(case, seed)
        shard = vocab_shard(case.vocab, rank, WORLD_SIZE)
        if through_vllm:
            packed, scales, logits = _shard_logits_vllm(case, shard, w, bias, xs, device, rank)
        else:
            packed, scales, logits = _shard_logits_radiance(case, shard, w, bias, xs, device)
        out = {"packed": _bits(packed), "scales": _bits(scales),
               "devices": sorted({str(t.device) for t in (packed, scales, *logits.values())})}
        # One device's full head (vLLM's TP=1 layout: the vocabulary padded to 64 rows).
        full = vocab_shard(case.vocab, 0, 1)
        packed_full, scales_full = radiance.quantize_rows(shard_rows(w, full).to(device),
                                                          case.group_size, case.clip)
        bias_full = shard_rows(bias, full).to(device)
        for m, y in logits.items():
            pieces = [torch.empty_like(y) for _ in range(WORLD_SIZE)]
            dist.all_gather(pieces, y.contiguous())
            out[f"gathered {m}"] = _bits(gather_shards(pieces, case.vocab))
            x = xs[case.ms.index(m)].to(device)
            y_full = radiance.apply(x, packed_full, scales_full, bias_full, case.group_size)
            out[f"full {m}"] = _bits(y_full[:, :case.vocab])
        dist.barrier()
        results.put((rank, out))
    except BaseException as error:  # the parent reports it
        import traceback

        results.put((rank, f"{type(error).__name__}: {error}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# --- the parent ---------------------------------------------------------------------------------


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(target, args, timeout_s=RANK_TIMEOUT_S):
    """Spawns WORLD_SIZE processes target(rank, *args, results); {rank: result}. Fails the test
    if a rank dies without a result or the ranks are not all done within timeout_s; leaves no
    process behind."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    results = context.Queue()
    ranks = [context.Process(target=target, args=(rank, *args, results), daemon=True)
             for rank in range(WORLD_SIZE)]
    for process in ranks:
        process.start()
    got, deadline, trouble_since = {}, time.monotonic() + timeout_s, None
    try:
        while len(got) < WORLD_SIZE and time.monotonic() < deadline:
            try:
                rank, result = results.get(timeout=2)
                got[rank] = result
            except queue_module.Empty:
                pass
            # A rank that failed (its peers now wait in a collective that never completes) or
            # died without a word (a signal, os._exit): wait a little for the others, then stop.
            failed = any(isinstance(r, str) for r in got.values())
            silent_dead = [r for r, p in enumerate(ranks) if r not in got and not p.is_alive()]
            if failed or silent_dead:
                trouble_since = trouble_since or time.monotonic()
                if time.monotonic() - trouble_since > 5:
                    break
    finally:
        done = trouble_since is None and len(got) == WORLD_SIZE
        for process in ranks:  # ranks that answered only close their process group
            process.join(timeout=30 if done else 3)
        for process in ranks:
            if process.is_alive():
                process.kill()
                process.join(timeout=10)
    for rank, result in sorted(got.items()):
        if isinstance(result, str):
            pytest.fail(f"rank {rank} failed:\n{result}")
    missing = [r for r in range(WORLD_SIZE) if r not in got]
    if missing:
        codes = {r: ranks[r].exitcode for r in missing}
        pytest.fail(f"ranks {missing} gave no result within {timeout_s} s (exit codes {codes}): "
                    f"a hang or a crash")
    return got


def _float64_excess(y, x, packed, scales, group_size, bias):
    """The worst |y - ref| over one bf16 rounding of ref plus fp32 accumulation (<= 1 passes)."""
    ref = apply_reference(x, radiance.unpack_shuffle(packed), scales, group_size, bias)
    w_hat = radiance.dequantize(packed, scales, group_size).astype(np.float64)
    bound = (2.0**-8 * np.abs(ref) + 2e-6 * (np.abs(x.astype(np.float64)) @ np.abs(w_hat).T)
             + 1e-6)
    return float((np.abs(y.astype(np.float64) - ref) / bound).max())


def _numpy_bf16(t):
    return t.view(torch.int16).numpy().view(BF16)


def check_tensor_parallel_run(got, case, seed, expected_devices):
    """The ranks' results against the CPU: shards quantized bit for bit as the CPU quantizes the
    same padded shard; gathered logits equal to the full head's on every rank; within one bf16
    rounding of the float64 reference."""
    w, bias, xs = make_problem(case, seed)
    for rank in range(WORLD_SIZE):
        result = got[rank]
        assert result["devices"] == [expected_devices[rank]], (rank, result["devices"])
        shard = vocab_shard(case.vocab, rank, WORLD_SIZE)
        want_packed, want_scales = radiance.quantize_rows(shard_rows(w, shard), case.group_size,
                                                          case.clip)
        np.testing.assert_array_equal(result["packed"], want_packed.numpy(),
                                      err_msg=f"rank {rank} packed, seed {seed}")
        np.testing.assert_array_equal(result["scales"], want_scales.view(torch.int16).numpy(),
                                      err_msg=f"rank {rank} scales, seed {seed}")
    for m in case.ms:
        for rank in range(WORLD_SIZE):
            gathered, full = got[rank][f"gathered {m}"], got[rank][f"full {m}"]
            assert gathered.shape == (m, case.vocab), (rank, m, gathered.shape)
            np.testing.assert_array_equal(gathered, full,
                                          err_msg=f"M={m}: rank {rank}'s gathered logits against "
                                                  f"its full head, seed {seed}")
            np.testing.assert_array_equal(gathered, got[0][f"gathered {m}"],
                                          err_msg=f"M={m}: rank {rank} against rank 0")
    # Every M at once: one float64 product of the whole head.
    packed, scales = radiance.quantize_rows(_numpy_bf16(w), case.group_size, case.clip)
    x = np.concatenate([_numpy_bf16(x) for x in xs])
    y = np.concatenate([got[0][f"gathered {m}"] for m in case.ms]).view(BF16)
    excess = _float64_excess(y, x, packed, scales, case.group_size, _numpy_bf16(bias))
    assert excess <= 1.0, f"seed {seed}: worst error {excess:.2f}x the bf16 bound"


# --- the runs -----------------------------------------------------------------------------------


def _distributed_skip_reason(backend):
    """Why torch cannot run `backend` here, or None. The GPU count is tests/conftest.py's."""
    if not dist.is_available():
        return "torch was built without torch.distributed"
    if backend == "gloo" and not dist.is_gloo_available():
        return "torch was built without gloo"
    return None


def _backend(name, *marks):
    reason = _distributed_skip_reason(name)
    return pytest.param(name, marks=[*marks, pytest.mark.skipif(reason is not None,
                                                                reason=reason or "")])


BACKENDS = [_backend("nccl", pytest.mark.gpu(WORLD_SIZE)), _backend("gloo")]


def _run(backend, through_vllm, monkeypatch):
    if backend == "nccl" and not dist.is_nccl_available():
        # here, not in BACKENDS: a host without the GPUs is told that first (NCCL needs them)
        pytest.skip("torch was built without NCCL")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")  # the ranks inherit it, and set it again
    seed = int.from_bytes(os.urandom(4), "little")
    case = CASES[backend]
    got = run_ranks(_rank_main, (backend, _free_port(), seed, case, through_vllm))
    devices = [f"cuda:{r}" if backend == "nccl" else "cpu" for r in range(WORLD_SIZE)]
    check_tensor_parallel_run(got, case, seed, devices)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tp2_shards_gathered_equal_the_full_head(backend, monkeypatch):
    _run(backend, False, monkeypatch)


@needs_vllm
@pytest.mark.parametrize("backend", BACKENDS)
def test_tp2_through_vllm_shard_indices_and_radiance_method(backend, monkeypatch):
    _import_vllm_or_skip()
    _run(backend, True, monkeypatch)


def _rank_hangs(rank, results):
    if rank == 0:
        results.put((rank, {"answered": True}))
    time.sleep(3600)  # a rank stuck in a collective that never completes


def _rank_dies(rank, results):
    if rank == 1:
        os._exit(3)  # a crash: no result, no exception
    results.put((rank, {"answered": True}))


def test_a_hung_or_dead_rank_fails_in_bounded_time():
    """run_ranks itself: a rank that never answers or dies silently is a failure, soon, and no
    process is left behind. The two cases run at once (each waits mostly on its child)."""
    import concurrent.futures

    def outcome(target, timeout_s):
        started = time.monotonic()
        try:
            run_ranks(target, (), timeout_s=timeout_s)
        except pytest.fail.Exception as failure:
            return str(failure), time.monotonic() - started
        return "no failure", time.monotonic() - started

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = {target.__name__: pool.submit(outcome, target, timeout_s)
                for target, timeout_s in ((_rank_hangs, 15), (_rank_dies, 200))}
        results = {name: run.result(timeout=300) for name, run in runs.items()}
    for name, (message, seconds) in results.items():
        # Rank 0 of the hang may not even have started within 15 s on a loaded machine.
        assert re.search(r"ranks \[(0, )?1\] gave no result", message), (name, message)
        assert "None" not in message, f"{name}: a process is still running: {message}"
        assert seconds < 90, (name, seconds)
    assert "{1: 3}" in results["_rank_dies"][0], results["_rank_dies"]
