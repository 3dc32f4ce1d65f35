#!/usr/bin/env python3
"""Replays one trace through several KV policies and prints a Markdown table of the figures the
A/B compares: prefix hit rate, the memory breakdown (time-weighted means), preemptions, TTFT and
TPOT p50/p99, throughput, VMM time on the critical path, and the replay's wall time.

    tools/policy-table.py [--bin build/bin/vtensor] [--policies vtensor,paged,...]
                          [--factors modern,2024] [--compute-calibration FILE] [--] [replay options...]

With --compute-calibration, one more group of rows, "measured": the step cost at the file's
measured rates and decode factors (`replay --compute-calibration`), prefill factors of `modern`.

Every replay option after the known ones goes to each `vtensor replay` unchanged (e.g.
--trace traces/data/mooncake_conversation_trace.jsonl --memory unlimited --time-scale 4).
Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

GIB = float(1 << 30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin/vtensor")
    ap.add_argument("--policies", default="vtensor,paged,radix,static,vattention")
    ap.add_argument("--factors", default="modern,2024")
    ap.add_argument("--compute-calibration", default=None)
    args, replay_args = ap.parse_known_args()
    if replay_args and replay_args[0] == "--":
        replay_args = replay_args[1:]
    print("| factors | policy | hit rate | used | internal | reserved idle | external | cached | free "
          "| preemptions | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | throughput (tok/s) "
          "| VMM critical (ms) | wall (s) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        groups = [(f, []) for f in args.factors.split(",")]
        if args.compute_calibration:
            groups.append(("measured", ["--compute-calibration", args.compute_calibration]))
        for factors, extra in groups:
            for policy in args.policies.split(","):
                out = os.path.join(tmp, f"{policy}-{factors}.json")
                kf = "modern" if extra else factors
                cmd = [args.bin, "replay", "--policy", policy, "--kernel-factors", kf, *extra, "--json", out,
                       *replay_args]
                start = time.monotonic()
                done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                wall = time.monotonic() - start
                if done.returncode != 0:
                    print(f"policy-table: {' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}",
                          file=sys.stderr)
                    return 1
                with open(out) as f:
                    j = json.load(f)
                b = j["memory_breakdown"]["mean_bytes"]
                gib = lambda k: f"{b[k] / GIB:.1f}"
                print(f"| {factors} | {policy} | {j['prefix_hit_rate']:.4f} | {gib('used')} | {gib('internal')} "
                      f"| {gib('reserved_idle')} | {gib('external')} | {gib('cached')} | {gib('free')} "
                      f"| {j['preemptions']} | {j['ttft_ms']['p50']:.0f} / {j['ttft_ms']['p99']:.0f} "
                      f"| {j['tpot_ms']['p50']:.1f} / {j['tpot_ms']['p99']:.1f} "
                      f"| {j['throughput_tokens_per_s']:.0f} | {j['vmm_critical_time_us'] / 1e3:.1f} | {wall:.2f} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
