"""Write the test pairs of tests/data/shifted/: host and Kineto traces that no id joins.

1. shifted.{et,kineto}.json.gz (recorded): a tiny MLP trained on the CPU with a one-rank
   gloo all-reduce of the loss every step. The execution trace is recorded in steps 2-3 by
   one profiler session, the Kineto trace in steps 6-7 by another: same code, other
   iterations, so neither "Record function id" nor "External id" names the host ops (the
   External ids of each session restart at 1, so some coincide by chance).
2. offset.kineto.json.gz (synthesized, not recorded): the shared mlp pair's Kineto trace
   with "Record function id" removed and every CPU op's "External id" set to the host node
   id of its op + 1, the constant offset a public trace shows for most ops. Its host trace
   is tests/data/mlp_rank0.et.json.gz.

Plain PyTorch, 127.0.0.1 only. Usage: python tests/workloads/shifted_window.py [OUT_DIR]
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")


def _gzip(src: str, dst: str) -> None:
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)


def record_shifted(out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

    torch.set_num_threads(1)
    torch.manual_seed(0)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            dist.all_reduce(loss.detach())

        et_json = os.path.join(tmp, "shifted.et.json")
        kin_json = os.path.join(tmp, "shifted.kineto.json")
        for _ in range(1):  # step 0: warm-up
            step()
        et = ExecutionTraceObserver().register_callback(et_json)
        # session 1, steps 1-3: the execution trace of steps 2-3 (its Kineto output is discarded)
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
            execution_trace_observer=et,
        ) as prof:
            for _ in range(3):
                step()
                prof.step()
        step()  # steps 4-5: not recorded
        step()
        # session 2, steps 6-7 (after a warm-up step): the Kineto trace
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
            record_shapes=True,
            on_trace_ready=lambda p: p.export_chrome_trace(kin_json),
        ) as prof:
            for _ in range(3):
                step()
                prof.step()
        dist.destroy_process_group()
        _gzip(et_json, os.path.join(out, "shifted.et.json.gz"))
        _gzip(kin_json, os.path.join(out, "shifted.kineto.json.gz"))


def synthesize_offset(out: str, offset: int = 1) -> None:
    """The mlp pair's Kineto trace with its ids rewritten: External id = host node id + offset."""
    with gzip.open(os.path.join(DATA, "mlp_rank0.et.json.gz"), "rt") as f:
        et = json.load(f)
    rf_to_id = {}
    for n in et["nodes"]:
        for a in n.get("attrs", []):
            if a["name"] == "rf_id":
                rf_to_id[a["value"]] = n["id"]
    with gzip.open(os.path.join(DATA, "kineto", "mlp_rank0.kineto.json.gz"), "rt") as f:
        kin = json.load(f)
    for e in kin["traceEvents"]:
        args = e.get("args")
        if not args or "Record function id" not in args:
            continue
        rf = args.pop("Record function id")
        if e.get("cat") in ("cpu_op", "user_annotation") and rf in rf_to_id:
            args["External id"] = rf_to_id[rf] + offset
    with gzip.open(os.path.join(out, "offset.kineto.json.gz"), "wt", compresslevel=9) as f:
        json.dump(kin, f)


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(DATA, "shifted")
    os.makedirs(out, exist_ok=True)
    record_shifted(out)
    synthesize_offset(out)
    print(f"wrote {sorted(os.listdir(out))} to {out}")


if __name__ == "__main__":
    main()
