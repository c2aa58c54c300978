#!/usr/bin/env python3
"""The SM clock, the board's power and the energy of a call while one kernel runs on and on.

Whether what holds the int4 head behind bf16 at many tokens is the power limit. Why: from 384
tokens the int4 head trails bf16 cuBLAS by 2-10 % on the H200, and its time grows faster than its
work there (docs/PERF_LOG.md, twenty-seventh round). In gpu.py's run of 2026-12-05 03:38 UTC, 2048
tokens (eight chunks of 256 in one launch) took 1.14x / 1.17x eight times 256 tokens' time on
248320 x 5120 / 262144 x 5376 (bf16: 1.06x / 1.07x), and 384 tokens (two chunks of 192) took
1.04-1.09x twice 192 tokens' time on 262144 x 5376 in every gpu.py run that timed both, while the
heads whose calls are short stay at 0.9-1.0x. A call of milliseconds at the board's power limit
runs at a lower SM clock than one of a few hundred microseconds; if the int4 kernel draws more
power per flop than cuBLAS, it loses more clock, and time, the longer it runs. This measures that
instead of guessing it.

Per head and token count M, for radiance (one call), radiance with one call per token chunk (the
tiles the planner runs in one launch, each chunk a launch of its own through out= slices: whether
the launch of several chunks, not the length of the call, costs), bf16 `x @ W.t()` and, where its
wheel is installed, Humming (vLLM's W4A16 kernel; gpu.py's --peers):
1. gpu.py's timing method (a GPU sleep before each round, one call of each back to back, the
   order rotated, the median): µs;
2. each alone, back to back for --seconds, with two spins of the SM clock (torch.cuda._sleep of
   SPIN_SHORT and SPIN_LONG cycles, alternating, each between two CUDA events) after every call:
   µs per call (the median), the SM clock from the spins (their cycles' difference over their
   times' difference, so the launch gap of a spin drops out), and from nvidia-smi sampling every
   20 ms: the SM clock, the board's power, the temperature and the clock event reasons (SW power
   cap, thermal, ...) seen in the window. Mcycles = µs per call x the spins' clock: the work of a
   call in SM cycles, which a clock lost to the power limit does not change; mJ = the board's
   power x µs per call: the energy of a call.

    python benchmarks/harness/sustained_clocks.py [--heads 262144x5376,...] [--m 192,384,2048]
                                                  [--peers bf16,humming] [--seconds 1.0] [--out DIR]

Writes sustained_clocks.md and sustained_clocks.json into --out.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests"))  # reference: fold_chunks_of
from gpu import DEV, Rotating, environment, int4_head_sets, make_peers, rounds  # noqa: E402

import radiance  # noqa: E402
from reference import fold_chunks_of  # noqa: E402

HEADS = "262144x5376,248320x5120,151936x5120,128256x4096"
TOKENS = "192,256,384,512,2048"
SPIN_SHORT, SPIN_LONG = 10_000, 60_000  # cycles of torch.cuda._sleep: about 5 and 30 µs at 2 GHz
SMI_FIELDS = ("clocks.sm", "power.draw.instant", "power.draw", "temperature.gpu", "clocks_event_reasons.active",
              "clocks_throttle_reasons.active")
# NVML's clock event reasons (nvml.h, nvmlClocksEventReason*), by bit
REASONS = {0x1: "idle", 0x2: "app clocks", 0x4: "SW power cap", 0x8: "HW slowdown", 0x10: "sync boost",
           0x20: "SW thermal", 0x40: "HW thermal", 0x80: "HW power brake", 0x100: "display clocks"}


def spin_clock_mhz(short_us, long_us):
    """The SM clock from the times of a SPIN_SHORT and a SPIN_LONG spin: their cycles' difference
    over their times' difference, so that what a spin costs beside its cycles drops out."""
    return (SPIN_LONG - SPIN_SHORT) / (long_us - short_us) if long_us > short_us else float("nan")


def smi_fields():
    """The fields of SMI_FIELDS this nvidia-smi knows (one of power.draw.instant / power.draw and of
    the two names of the event reasons), in order; [] without nvidia-smi."""
    known = []
    for field in SMI_FIELDS:
        if field in ("power.draw",) and "power.draw.instant" in known:
            continue
        if field == "clocks_throttle_reasons.active" and "clocks_event_reasons.active" in known:
            continue
        try:
            probe = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits",
                                    f"--id={torch.cuda.current_device()}"],
                                   capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return []
        value = probe.stdout.strip()
        if probe.returncode == 0 and value and "not a valid field" not in value.lower() \
                and "n/a" not in value.lower() and "not supported" not in value.lower():
            known.append(field)
    return known


class Sampler:
    """nvidia-smi sampling every 20 ms into a file for the whole run; window() reads back the samples
    between two wall-clock times (nvidia-smi's timestamps are the host's local time)."""

    def __init__(self, fields):
        self.fields = fields
        self.file = tempfile.NamedTemporaryFile("w+", suffix=".csv", delete=False)
        self.proc = None
        if fields:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=timestamp," + ",".join(fields), "--format=csv,noheader,nounits",
                 "-lms", "20", f"--id={torch.cuda.current_device()}"],
                stdout=self.file, stderr=subprocess.DEVNULL)
            time.sleep(0.5)

    def window(self, start, end):
        if self.proc is None:
            return {}
        time.sleep(0.1)  # the window's last samples written
        self.file.flush()
        rows = []
        with open(self.file.name) as fh:
            for line in fh:
                parts = [p.strip() for p in line.split(",")]
                if len(parts) != len(self.fields) + 1:
                    continue
                try:
                    stamp = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
                except ValueError:
                    continue
                if start <= stamp <= end:
                    rows.append(dict(zip(self.fields, parts[1:])))
        out = {"samples": len(rows)}

        def numbers(field):
            values = []
            for r in rows:
                try:
                    values.append(float(r[field]))
                except (KeyError, ValueError):
                    pass
            return values

        for field, key in (("clocks.sm", "smi_MHz"), ("temperature.gpu", "max_C")):
            values = numbers(field)
            if values:
                out[key] = max(values) if key == "max_C" else statistics.mean(values)
        power = numbers("power.draw.instant") or numbers("power.draw")
        if power:
            out["W"] = statistics.mean(power)
        bits = 0
        for r in rows:
            for field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
                try:
                    bits |= int(r[field], 16)
                except (KeyError, ValueError):
                    pass
        out["reasons"] = ", ".join(name for bit, name in REASONS.items() if bits & bit) or "none"
        return out

    def close(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.file.close()
        os.unlink(self.file.name)


def sustained(fn, x, out, seconds, per_call_us, sampler):
    """fn back to back for about `seconds`, each call followed by a clock spin (short and long in
    turn): (median µs per call, the spins' SM clock in MHz, nvidia-smi's window)."""
    calls = max(20, int(seconds * 1e6 / (per_call_us + 40)))
    for _ in range(3):
        fn(x, out)
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2 * calls + 1)]
    start = datetime.datetime.now()
    events[0].record()
    for i in range(calls):
        fn(x, out)
        events[2 * i + 1].record()
        torch.cuda._sleep(SPIN_SHORT if i % 2 == 0 else SPIN_LONG)
        events[2 * i + 2].record()
    events[-1].synchronize()
    end = datetime.datetime.now()
    call_us = [events[2 * i].elapsed_time(events[2 * i + 1]) * 1e3 for i in range(calls)]
    spins = [events[2 * i + 1].elapsed_time(events[2 * i + 2]) * 1e3 for i in range(calls)]
    # the first quarter of the window is the clock settling: left out of every number
    skip = calls // 4
    call_us, spins = call_us[skip:], spins[skip:]
    short = statistics.median(spins[i] for i in range(len(spins)) if (i + skip) % 2 == 0)
    long_ = statistics.median(spins[i] for i in range(len(spins)) if (i + skip) % 2 == 1)
    spin_mhz = spin_clock_mhz(short, long_)
    settled = start + (end - start) / 4
    return statistics.median(call_us), spin_mhz, sampler.window(settled, end)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", default=HEADS)
    ap.add_argument("--m", default=TOKENS)
    ap.add_argument("--peers", default="bf16,humming", help="gpu.py's peers (a missing one is skipped)")
    ap.add_argument("--seconds", type=float, default=1.0, help="of each kernel alone, back to back")
    ap.add_argument("--round-budget", type=float, default=0.1, help="seconds of gpu.py's rounds per cell")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = environment()
    l2 = torch.cuda.get_device_properties(DEV).L2_cache_size
    sampler = Sampler(smi_fields())
    lines = [f"# sustained clocks, {env['date']}: {env['gpu']} ({env['nvidia_smi']}), torch {env['torch']}",
             f"nvidia-smi fields: {', '.join(sampler.fields) or 'none (no nvidia-smi)'}; "
             f"spins of {SPIN_SHORT} / {SPIN_LONG} cycles"]
    print("\n".join(lines), flush=True)
    # the spins' clock at rest: the reference for the clocks under load
    torch.cuda.synchronize()
    idle = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    idle_mhz = []
    for _ in range(20):
        idle[0].record()
        torch.cuda._sleep(SPIN_SHORT)
        idle[1].record()
        torch.cuda._sleep(SPIN_LONG)
        idle[2].record()
        idle[2].synchronize()
        idle_mhz.append(spin_clock_mhz(idle[0].elapsed_time(idle[1]) * 1e3, idle[1].elapsed_time(idle[2]) * 1e3))
    lines.append(f"spins' clock with nothing else running: {statistics.median(idle_mhz):.0f} MHz")
    print(lines[-1], flush=True)
    results = {"environment": env, "idle_spin_MHz": statistics.median(idle_mhz), "cells": []}
    header = (f"{'M':>5} {'kernel':<16} {'rounds µs':>10} {'sust. µs':>9} {'spin MHz':>8} {'smi MHz':>8} "
              f"{'W':>5} {'°C':>4} {'Mcycles':>8} {'mJ':>6}  reasons")
    for head in args.heads.split(","):
        n, k = (int(v) for v in head.lower().split("x"))
        group = 128 if k % 128 == 0 else 64
        sets = int4_head_sets(n, k, group, l2)

        def one_call(x, out, p, s):
            radiance.apply(x, p, s, group_size=group, out=out)

        def per_chunk(x, out, p, s):
            per = fold_chunks_of(x.shape[0])
            for t0 in range(0, x.shape[0], per):
                radiance.apply(x[t0:t0 + per], p, s, group_size=group, out=out[t0:t0 + per])

        base = {"radiance": Rotating(sets, one_call)}
        peers = make_peers([p for p in args.peers.split(",") if p], n, k, group, l2)
        base.update({p: f for p, f in peers.items() if not isinstance(f, str)})
        first = len(lines)
        lines += [f"\n## {n} x {k}, group {group}"] + [f"{p}: {f}" for p, f in peers.items() if isinstance(f, str)]
        lines.append(header)
        print("\n".join(lines[first:]), flush=True)
        for m in (int(v) for v in args.m.split(",")):
            fns = dict(base)
            per = fold_chunks_of(m)
            chunks = -(-m // per)
            if chunks > 1:
                fns[f"radiance {chunks}x{per}"] = Rotating(sets, per_chunk, 1)
            x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
            outs = {name: torch.empty(m, n, device=DEV, dtype=torch.bfloat16) for name in fns}
            t = rounds(fns, x, outs, args.round_budget)
            for name, fn in fns.items():
                call_us, spin_mhz, smi = sustained(fn, x, outs[name], args.seconds, t[name], sampler)
                cell = {"head": head, "m": m, "kernel": name, "rounds_us": t[name], "sustained_us": call_us,
                        "spin_MHz": spin_mhz, "Mcycles": call_us * spin_mhz / 1e6,
                        "mJ": smi.get("W", float("nan")) * call_us / 1e3, **smi}
                results["cells"].append(cell)
                lines.append(f"{m:>5} {name:<16} {t[name]:>10.1f} {call_us:>9.1f} {spin_mhz:>8.0f} "
                             f"{smi.get('smi_MHz', float('nan')):>8.0f} {smi.get('W', float('nan')):>5.0f} "
                             f"{smi.get('max_C', float('nan')):>4.0f} {cell['Mcycles']:>8.3f} {cell['mJ']:>6.1f}  "
                             f"{smi.get('reasons', '')}")
                print(lines[-1], flush=True)
            del x, outs, fns
        del base, peers, sets
        torch.cuda.empty_cache()
    sampler.close()
    with open(os.path.join(args.out, "sustained_clocks.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "sustained_clocks.json"), "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
