"""A learned trace generator: fit a model on a corpus of jobs, sample new jobs like them.

The model is a hierarchical grammar per rank program (`grammar`: lanes -> repeated blocks ->
ops; `program`), with each op's duration distribution pooled over its instances and ranks, its
sizes, and its dependencies as relations between grammar coordinates (`relations`), so that a
job sampled with more layers keeps the shape of its graph. `fit` learns it (`fit`), `sample`
makes jobs like a training job with other layers, batch or ranks (`sample`), `evaluate` reports
how close samples come to held-out jobs against trivial baselines (`fidelity`). The model file
is versioned JSON (`model`).

    model = fit({"ddp": job_a, "fsdp": job_b})
    write_model(model, "gen.json")
    job = sample(read_model("gen.json"), like="ddp", layers_scale=2, ranks=8, seed=1)
"""

from .fidelity import GENERATORS, SYSTEMS, Condition, FidelityReport, FidelityRow, condition_for, evaluate
from .fit import fit
from .model import FORMAT, VERSION, GeneratorModel, ModelFormatError, read_model, write_model
from .sample import BASELINES, SampleInfo, sample, sample_baseline, sample_detailed
from .steps import split_steps, step_count

__all__ = [
    "BASELINES",
    "FORMAT",
    "GENERATORS",
    "SYSTEMS",
    "VERSION",
    "Condition",
    "FidelityReport",
    "FidelityRow",
    "GeneratorModel",
    "ModelFormatError",
    "SampleInfo",
    "condition_for",
    "evaluate",
    "fit",
    "read_model",
    "sample",
    "sample_baseline",
    "sample_detailed",
    "split_steps",
    "step_count",
    "write_model",
]
