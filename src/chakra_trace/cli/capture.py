"""`chakra capture`: one training step of a PyTorch model as a master trace, without running its math."""

from __future__ import annotations

import json

import click

from ..capture import capture as run_capture
from ..capture import load_build
from ..errors import ChakraError
from ..io.et import write_trace
from ..table import Column, Table
from .common import console, counts, json_option, print_json, show


def _json_dict(text: str | None, what: str) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not JSON ({e})", param_hint=what) from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint=what)
    return value


@click.command()
@click.argument("model", metavar="FILE.py:FUNCTION|MODULE:FUNCTION")
@click.option("--config", default=None, help="Keyword arguments of the build function, as JSON: '{\"layers\": 80}'.")
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True, help="Sequences per step.")
@click.option("--seq", type=click.IntRange(min=1), default=128, show_default=True, help="Tokens per sequence.")
@click.option(
    "--optimizer",
    default="adamw",
    show_default=True,
    help="adamw, adam, sgd, adagrad, rmsprop (or any torch.optim class name), none, or an optimizer "
    "class as FILE.py:CLASS (e.g. examples/models/te_kernels.py:DistributedFusedAdam).",
)
@click.option("--optimizer-options", default=None, help="Its keyword arguments as JSON, e.g. '{\"foreach\": true}'.")
@click.option("--dtype", default=None, help="Default dtype while the model is built, e.g. bfloat16.")
@click.option("--fold-views", is_flag=True, help="Leave out the ops that only make views (no FLOPs, no bytes).")
@click.option(
    "--shape-rules",
    is_flag=True,
    help="Also record how each op's shapes follow the batch and seq (captures twice more), so that "
    "`chakra transform --batch/--seq` can rescale the trace.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write the master trace (.et).")
@json_option
def capture(
    model, config, batch, seq, optimizer, optimizer_options, dtype, fold_views, shape_rules, output, as_json
) -> None:
    """Capture one training step (forward and loss, backward, optimizer step) of a PyTorch model
    without running its math: tensors are fake (shapes and dtypes, no data), so a 70B-parameter
    model is captured in seconds on a CPU. The result is a master trace: one logical device, one
    COMP node per aten op with its FLOPs (num_ops), bytes (tensor_size), shapes, data
    dependencies, phase and module path, no durations (`chakra simulate --device h100` costs them).

    \b
      chakra capture examples/models/gpt.py:build --config '{"preset": "llama2-70b"}' \\
          --batch 8 --seq 4096 --dtype bfloat16 -o gpt70b.master.et

    MODEL names a function of the config's keys that returns (model, inputs, loss):
    inputs(batch, seq) -> (args, target) and loss(output, target) -> scalar tensor
    (see examples/models/gpt.py and `chakra_trace.capture`).
    """
    build = load_build(model)
    try:
        with counts(f"capturing {model}", "phases (step, shape-rule probes, trace)") as tick:
            result = run_capture(
                build,
                _json_dict(config, "--config"),
                batch=batch,
                seq=seq,
                optimizer=optimizer,
                optimizer_options=_json_dict(optimizer_options, "--optimizer-options"),
                dtype=dtype,
                fold_views=fold_views,
                shape_rules=shape_rules,
                progress=tick,
            )
    except (ValueError, AttributeError) as e:  # raised by the user's build function on a bad config
        raise ChakraError(f"{model}: {e}") from e
    if output:
        write_trace(result.trace, output)
    d = result.to_dict()
    if output:
        d["output"] = output
    if as_json:
        print_json(d)
        return
    con = console()
    con.print(
        f"captured {d['nodes']:,} nodes, {d['params']:,} parameters, batch {batch} × seq {seq} "
        f"in {d['wall_s']:.1f} s (peak memory {d['peak_rss_mib']:,.0f} MiB)" + (f" -> {output}" if output else "")
    )
    phases = list(d["flops_by_phase"])
    g4 = Column(format=".4g")
    t = Table(
        {
            "phase": [*phases, "total"],
            "nodes": [*(d["nodes_by_phase"].get(p, 0) for p in phases), d["nodes"]],
            "FLOPs": [*(d["flops_by_phase"][p] for p in phases), d["flops"]],
            "bytes": [*(d["bytes_by_phase"][p] for p in phases), sum(d["bytes_by_phase"].values())],
        },
        title="one step",
        spec={"FLOPs": g4, "bytes": g4},
    )
    show(t)
    if result.shape_rules is not None:
        con.print(
            f"shape rules: {result.shape_rules['ruled']:,} ops follow the batch/seq by a rule"
            + (f", {result.shape_rules['without_rule']:,} by none" if result.shape_rules["without_rule"] else "")
        )
    experts = result.expert_params
    con.print(
        f"6·N·tokens estimate: {d['flops_6nt']:.4g} FLOPs (captured / estimate = {d['flops'] / max(d['flops_6nt'], 1):.3f})"
        + (f"; N counts all {experts:,} expert parameters, of which a token uses its top-k" if experts else "")
    )
