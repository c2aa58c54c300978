"""Issue 22's goals, goal by goal, from one benchmarks/gpu.py run (its results.json).

    python benchmarks/goals.py RESULTS.json

gpu.py prints the same section at the end of its own run; this reads a saved one (no torch, no GPU).
The goals, per head of the run:
- never slower than bf16, never slower than Humming: every cell whose peer / radiance ratio is below
  1.00, and met where none is below 0.97 (the issue's 3 % noise margin);
- at least 1.5x bf16 at every M up to 64 on the heads of 100 MB or more, counted as bf16 weights
  (n x k x 2 bytes: all but 49152 x 576 of gpu.py's heads);
- 9-16 tokens within 1.25x of one token's time (the slowest of the run's M in 9-16);
- one token at 90 % or more of the read roofline (the int4 head's bytes over the measured read
  bandwidth), shown beside what a plain read of the same bytes reaches (torch.sum, one kernel), which
  on the small heads is itself far below 90 %.
"""

import json
import sys

NOISE = 0.97  # the issue's 3 % margin
SPEEDUP_TO_64 = 1.5
BIG_HEAD_BYTES = 100e6
NINE_TO_SIXTEEN = 1.25
ONE_TOKEN_ROOF_PCT = 90.0


def head_shape(head):
    n, k = (int(v) for v in head.lower().split("x"))
    return n, k


def _judge(cells, pick, met):
    """The worst of (ratio, m) cells by `pick` (min or max), and whether its ratio meets the goal."""
    ratio, m = pick(cells)
    return {"met": met(ratio), "worst": {"ratio": ratio, "m": m}}


def evaluate(results):
    """Per head, what each goal measured and whether it is met. `results` is gpu.py's results.json;
    a goal whose peer or token counts the run lacks is left out for that head."""
    rows = {}
    for row in results["apply"]:
        rows.setdefault(row["head"], {})[row["m"]] = row
    goals = {}
    for head, by_m in rows.items():
        n, k = head_shape(head)
        g = {}
        for peer in ("bf16", "humming"):
            cells = [(by_m[m][f"{peer}_us"] / by_m[m]["radiance_us"], m) for m in sorted(by_m)
                     if f"{peer}_us" in by_m[m]]
            if cells:
                g[f"not_slower_than_{peer}"] = {**_judge(cells, min, lambda r: r >= NOISE),
                                                "below_1": [{"ratio": r, "m": m} for r, m in cells if r < 1.0]}
        if n * k * 2 >= BIG_HEAD_BYTES:
            cells = [(by_m[m]["bf16_us"] / by_m[m]["radiance_us"], m) for m in sorted(by_m)
                     if m <= 64 and "bf16_us" in by_m[m]]
            if cells:
                g["speedup_to_64"] = _judge(cells, min, lambda r: r >= SPEEDUP_TO_64)
        if 1 in by_m:
            one = by_m[1]["radiance_us"]
            cells = [(by_m[m]["radiance_us"] / one, m) for m in sorted(by_m) if 9 <= m <= 16]
            if cells:
                g["nine_to_sixteen"] = _judge(cells, max, lambda r: r <= NINE_TO_SIXTEEN)
            plain = results.get("read_limit", {}).get(head, {}).get("pct_of_floor")
            g["one_token_roof"] = {"met": by_m[1]["roofline_pct"] >= ONE_TOKEN_ROOF_PCT,
                                   "pct": by_m[1]["roofline_pct"], "plain_read_pct": plain}
        goals[head] = g
    return goals


def _cell(goal, text):
    return "" if goal is None else f"{text(goal)} {'met' if goal['met'] else 'NOT met'}"


def _worst(goal):
    # three digits: a ratio of 0.968 is below the margin, and two would print it as 0.97
    return f"{goal['worst']['ratio']:.3f}x at {goal['worst']['m']}"


def _roof(goal):
    plain = "" if goal["plain_read_pct"] is None else f" ({goal['plain_read_pct']:.0f} %)"
    return f"{goal['pct']:.0f} %{plain}"


COLUMNS = (
    ("vs bf16 (cells < 1.00)", "not_slower_than_bf16", lambda g: f"{_worst(g)} ({len(g['below_1'])})"),
    ("vs Humming (cells < 1.00)", "not_slower_than_humming", lambda g: f"{_worst(g)} ({len(g['below_1'])})"),
    ("bf16 to 64 tokens", "speedup_to_64", _worst),
    ("9-16 tokens / one", "nine_to_sixteen", _worst),
    ("one token, % roofline (plain read)", "one_token_roof", _roof),
)


def format_goals(goals):
    """The table gpu.py prints at its end: per head, each goal's worst cell and whether it is met."""
    lines = ["\n## issue 22's goals per head (benchmarks/goals.py: peer ratios met from 0.97, the 3 % margin; "
             "bf16 to 64 tokens from 1.5x, heads of 100 MB or more as bf16; 9-16 tokens within 1.25x one "
             "token's time; one token from 90 % of the read roofline, beside a plain read of the same bytes)",
             "| head | " + " | ".join(title for title, _, _ in COLUMNS) + " |",
             "|---" * (len(COLUMNS) + 1) + "|"]
    for head, g in goals.items():
        lines.append(f"| {head} | " + " | ".join(_cell(g.get(key), text) for _, key, text in COLUMNS) + " |")
    return lines


def main(argv):
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as fh:
        results = json.load(fh)
    print("\n".join(format_goals(evaluate(results))).lstrip("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
