"""Export a replay as a standalone Python benchmark that needs torch and nothing else.

The script carries the replay plan (compressed) and the replay runtime's source verbatim
(`_standalone.py`), so it runs exactly what `chakra replay` runs. One plan per rank: run it
with `python bench.py` (one rank) or `torchrun --nproc-per-node N bench.py`. It prints a
JSON measurement (raw samples and their median) that `chakra bench compare` reads.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import zlib
from pathlib import Path

from ..io.et import atomic_output
from . import _standalone

_MAIN = """

# ---------------------------------------------------------------------------- benchmark driver
import argparse as _argparse
import sys
import base64 as _base64
import json as _json
import os as _os
import statistics as _statistics
import zlib as _zlib

PLANS = _json.loads(_zlib.decompress(_base64.b64decode(_PLANS)))


def main():
    ap = _argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warmup", type=int, default=3, help="passes after the timed warm-up")
    ap.add_argument("--warmup-s", type=float, default=1.0, help="warm up for about this long first")
    ap.add_argument("--repeats", type=int, default=30, help="timed passes (each all recorded steps)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: the device it was exported for)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", dest="json_out", help="also write the measurement to this file")
    ap.add_argument("--no-host-gaps", action="store_true", help="leave out the calibrated host time the ops lack")
    args = ap.parse_args()
    torch = _torch()
    torch.set_num_threads(args.threads)
    world = int(_os.environ.get("WORLD_SIZE", "1"))
    rank = int(_os.environ.get("RANK", "0"))
    plan = PLANS[rank % len(PLANS)]
    device = args.device or plan["device"]
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(int(_os.environ.get("LOCAL_RANK", "0")))
        device = "cuda:%d" % torch.cuda.current_device()
    dist = None
    if world > 1 or any(op["kind"] == "collective" for op in plan["ops"]):
        import torch.distributed as dist

        _os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        _os.environ.setdefault("MASTER_PORT", "29512")
        _os.environ.setdefault("RANK", "0")
        _os.environ.setdefault("WORLD_SIZE", "1")
        dist.init_process_group("nccl" if cuda else "gloo")
    storages = make_storages(plan, device, plan.get("seed", 0))
    every_gap = None if args.no_host_gaps else host_gaps(plan)
    calls, gaps = [], []
    for k, op in enumerate(plan["ops"]):  # (the plan may have been edited: what a replay refuses, so does this)
        try:
            calls.append(build_call(op, storages, device))
        except Refused as e:
            print("refused, not run: %s" % e, file=sys.stderr)
            continue
        gaps.append(every_gap[k] if every_gap else 0.0)
    gaps = gaps if every_gap else None

    def sync():
        if cuda:
            torch.cuda.synchronize()
        if dist is not None:
            dist.barrier()

    warm_up(lambda: run(calls, cuda, gaps=gaps), args.warmup_s, dist, cuda)
    for _ in range(args.warmup):
        run(calls, cuda, gaps=gaps)
    samples = []
    for _ in range(args.repeats):
        sync()
        t0 = time.perf_counter()
        run(calls, cuda, gaps=gaps)
        sync()
        samples.append((time.perf_counter() - t0) / STEPS_PER_RUN)
    out = {"name": NAME, "samples": samples, "warmup": args.warmup, "stop_reason": "max_repeats",
           "extra": {"rank": rank, "world_size": world, "device": device, "unit": "seconds per recorded step"}}
    if rank == 0:
        print("median %.6f ms per step over %d passes" % (_statistics.median(samples) * 1e3, len(samples)))
        if args.json_out:
            with open(args.json_out, "w") as f:
                _json.dump(out, f)
    if dist is not None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def export_script(plans: list[dict], path: str | os.PathLike, *, name: str, source: str, steps_per_run: int) -> Path:
    """Write the benchmark script for `plans` (one per rank, from `HostReplay.plan`)."""

    packed = base64.b64encode(zlib.compress(json.dumps(plans, separators=(",", ":")).encode(), 9)).decode()
    ops = sum(len(p["ops"]) for p in plans)
    src, me = _docstring_text(Path(source).name), _docstring_text(Path(path).name)
    header = (
        f'"""Standalone benchmark exported by chakra-trace from {src}: {ops} ops on '
        f"{len(plans)} rank(s), {steps_per_run} recorded step(s) per pass. Needs torch only.\n\n"
        f"    python {me} [--repeats N] [--json out.json]\n"
        f'    torchrun --nproc-per-node {len(plans)} {me}   (several ranks)\n"""\n'
    )
    runtime = inspect.getsource(_standalone).split('"""', 2)[2]  # the runtime without its docstring
    body = (
        header
        + runtime
        + f"\nNAME = {json.dumps(name)}\nSTEPS_PER_RUN = {int(steps_per_run)}\n"
        + "_PLANS = (\n"
        + "\n".join(f'    "{packed[i : i + 96]}"' for i in range(0, len(packed), 96))
        + "\n)\n"
        + _MAIN
    )
    path = Path(path)
    with atomic_output(path) as f:
        f.write(body.encode())
    os.chmod(path, 0o755)
    return path


def _docstring_text(s: str) -> str:
    """A file name as text inside the script's docstring: a name is data (a collection folder from
    someone else), and one holding three double quotes would otherwise end the docstring and put
    code in the script."""
    return s.replace("\\", "\\\\").replace('"', '\\"')
