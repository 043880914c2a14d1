"""`chakra parallelize`: a captured master trace as the per-rank traces of a TP x CP x PP x DP plan."""

from __future__ import annotations

import time

import click

from ..io.et import read_trace
from ..synthesize.parallel import CP_COMM, RECOMPUTE, SCHEDULES, ParallelizeError, Plan, parallelize_detailed
from ..synthesize.parallel.plan import GRAD_ACCUM
from ..table import Column, Table
from .common import console, counts, json_option, print_json, progress, show


@click.command()
@click.argument("master", type=click.Path(exists=True, dir_okay=False))
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel ranks.")
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True, help="Pipeline stages.")
@click.option("--dp", type=click.IntRange(min=1), default=1, show_default=True, help="Data-parallel replicas.")
@click.option(
    "--ep",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Expert-parallel ranks (a divisor of --dp): a mixture's experts split over them, tokens exchanged by all-to-all.",
)
@click.option(
    "--cp",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Context-parallel ranks: each holds seq / cp tokens of every sequence (seq a multiple of 2 x cp); "
    "attention exchanges K and V among them.",
)
@click.option(
    "--cp-comm",
    type=click.Choice(CP_COMM),
    default="p2p",
    show_default=True,
    help="How CP ranks exchange K and V: p2p, Transformer Engine's ring of sends (overlapping attention's steps); "
    "all-gather, Llama 3's all-gather of K and V (reduce-scatter of their gradients).",
)
@click.option("--sp", is_flag=True, help="Sequence parallelism: TP all-reduces become reduce-scatter + all-gather.")
@click.option("--schedule", type=click.Choice(SCHEDULES), default="1f1b", show_default=True)
@click.option(
    "--micro-batches",
    type=click.IntRange(min=1),
    default=None,
    help="Micro-batches the master trace's batch (one replica's) is split into [default: pp].",
)
@click.option(
    "--zero",
    type=click.Choice(["0", "1", "2", "3"]),
    default="0",
    show_default=True,
    help="0: DDP; 1, 2: ZeRO stages (the optimizer sharded, parameters all-gathered; 2: gradients "
    "reduce-scattered); 3: FSDP.",
)
@click.option(
    "--virtual-stages",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Chunks of layers per pipeline stage: Megatron's interleaved 1F1B schedule (micro-batches a multiple of --pp).",
)
@click.option(
    "--recompute",
    type=click.Choice(RECOMPUTE),
    default="none",
    show_default=True,
    help="full: every layer's forward runs again before its micro-batch's backward (activation recomputation); "
    "selective: only its core attention (a module named core_attention; nothing for fused SDPA attention, whose "
    "backward recomputes its scores already).",
)
@click.option("--bucket-mb", type=float, default=25.0, show_default=True, help="DDP gradient bucket cap (MiB).")
@click.option(
    "--overlap-param-gather",
    is_flag=True,
    help="With --zero 1/2: each bucket's parameter all-gather before its modules' first forward, overlapping the "
    "forward (Megatron-Core's --overlap-param-gather, in its steady state), not after the optimizer.",
)
@click.option(
    "--p2p-blocking",
    is_flag=True,
    help="Each schedule step waits for its pipeline sends (Megatron-LM until 2023) instead of overlapping them.",
)
@click.option(
    "--scatter-gather",
    is_flag=True,
    help="With TP and no SP: pipeline messages sent as 1/tp per TP rank and all-gathered by the receivers "
    "(Megatron-LM's scatter/gather optimization).",
)
@click.option(
    "--grad-accum",
    type=click.Choice(GRAD_ACCUM),
    default="fused",
    show_default=True,
    help="How micro-batches' gradients add up: fused, inside the weight-gradient GEMM (Megatron-Core's gradient "
    "accumulation fusion); add, an elementwise add per parameter chunk from the second micro-batch on (PyTorch "
    "autograd, Megatron-LM before the fusion).",
)
@click.option(
    "--fp8",
    is_flag=True,
    help="The linear layers' matmuls in FP8 (Transformer Engine): a device costs them at its FP8 rate.",
)
@click.option("-o", "--output", "prefix", default=None, help="Write PREFIX.<rank>.et and PREFIX.comm_groups.json.")
@json_option
def parallelize(
    master,
    tp,
    pp,
    dp,
    ep,
    cp,
    cp_comm,
    sp,
    schedule,
    micro_batches,
    zero,
    virtual_stages,
    recompute,
    bucket_mb,
    overlap_param_gather,
    p2p_blocking,
    scatter_gather,
    grad_accum,
    fp8,
    prefix,
    as_json,
) -> None:
    """Make the per-rank traces of a parallelism plan from a master trace (`chakra capture`):
    Megatron-style tensor parallelism (column/row-parallel linears, vocab-parallel embedding, LM head
    and loss), pipeline stages with GPipe or 1F1B micro-batches and send/receive between them, and
    data parallelism with DDP's gradient buckets, ZeRO or FSDP, and expert parallelism for a
    mixture of experts (all-to-all token dispatch and combine). FLOPs and bytes divide as the plan
    divides the work; durations are left to the simulator's device model.

    \b
      chakra parallelize gpt70b.master.et --tp 8 --pp 8 --dp 16 -o out/gpt70b
      chakra simulate out/gpt70b --system dgx-8x128 --device h100

    Ranks are ordered TP, CP, PP, DP (innermost first, Llama 3's order): rank = t + tp * (c + cp * (p
    + pp * d)); an expert group is ep consecutive replicas d.
    """
    t0 = time.perf_counter()
    plan = Plan(
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        cp=cp,
        cp_comm=cp_comm,
        sp=sp,
        schedule=schedule,
        micro_batches=micro_batches,
        zero=int(zero),
        recompute=recompute,
        virtual_stages=virtual_stages,
        bucket_mb=bucket_mb,
        fp8=fp8,
        overlap_param_gather=overlap_param_gather,
        p2p_blocking=p2p_blocking,
        scatter_gather=scatter_gather,
        grad_accum=grad_accum,
    )
    with progress("reading the master trace", master) as cb:
        trace = read_trace(master, progress=cb)
    with counts(f"parallelizing ({plan.describe()})", "stages + ranks") as tick:
        try:
            result = parallelize_detailed(trace, plan, progress=tick)
        except ParallelizeError as e:  # (about the master trace's content: say which file)
            raise ParallelizeError(f"{master}: {e}") from None
    d = result.to_dict()
    if prefix:
        with counts(f"writing {plan.ranks} traces", "ranks") as tick:
            result.workload.save(prefix, groups=result.workload.groups, progress=tick)
        d["output"] = prefix
    d["wall_s"] = round(time.perf_counter() - t0, 3)
    if as_json:
        print_json(d)
        return
    con = console()
    con.print(f"{plan.describe()}: {plan.ranks:,} ranks, {d['groups']} groups" + (f" -> {prefix}.*" if prefix else ""))
    stages = d["stages"]
    g4 = Column(format=".4g")
    t = Table(
        {
            "stage": [s["stage"] for s in stages],
            "nodes": [s["nodes"] for s in stages],
            "FLOPs": [s["flops"] for s in stages],
            "bytes": [s["bytes"] for s in stages],
            "collectives": [
                ", ".join(f"{k} {v['count']} ({v['bytes']:.3g} B)" for k, v in s["collectives"].items()) or "-"
                for s in stages
            ],
            "send/recv": [
                f"{s['p2p'].get('sends', 0)}/{s['p2p'].get('recvs', 0)}"
                + (
                    f", CP ring {s['p2p']['cp_sends']} ({s['p2p']['cp_send_bytes']:.3g} B)"
                    if "cp_sends" in s["p2p"]
                    else ""
                )
                for s in stages
            ],
        },
        title="per rank, by pipeline stage",
        spec={"FLOPs": g4, "bytes": g4, "send/recv": Column(align="right")},
    )
    show(t)
    con.print(
        f"FLOPs over all ranks {d['total_flops']:.4g} = dp x master {d['master_flops']:.4g} (optimizer per replica "
        f"or sharded) + redundant {d['redundant_flops']:.4g} (replicated norms/residuals under TP, shared ops per stage)"
        + (f" + recomputed {d['recompute_flops']:.4g}" if d["recompute_flops"] else "")
    )
