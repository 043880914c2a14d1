"""Real machines as `nccl.Cluster`s, so "this job on Selene" is one word (`presets` makes each a
system preset: the cluster's network costed as NCCL does, its GPU's roofline for compute).

Each is sized to the job (its rank count / GPUs per node, `Cluster.sized`). Datasheet figures,
with their sources (docs/clusters.md lists them too):

- selene: NVIDIA DGX SuperPOD of DGX A100 (Selene; Megatron-LM's published runs). DGX A100
  datasheet: 8 A100-SXM4-80GB on 6 NVSwitches, NVLink 3 at 600 GB/s bidirectional per GPU
  (12 links), 8 single-port ConnectX-6 HDR 200 Gb/s InfiniBand for compute, 2 AMD EPYC 7742
  CPUs; the SuperPOD reference architecture: a rail-optimized full fat tree of HDR switches.
- dgx-h100: DGX H100 datasheet: 8 H100 SXM5, NVLink 4 at 900 GB/s bidirectional per GPU (18
  links) on 4 NVSwitches, 8 single-port ConnectX-7 at 400 Gb/s (NDR), 2 Intel Xeon Platinum
  8480C; DGX SuperPOD H100 reference architecture: a rail-optimized 3-level NDR fat tree.
- h100-roce: as dgx-h100 with 400 Gb/s RoCE NICs (Llama 3's clusters: Meta's Grand Teton
  nodes, 8 H100 and 8 x 400 Gb/s RoCE NICs per node, "The Llama 3 Herd of Models" §3.3.1).
  NCCL's tuner has no RoCE constants of its own: it costs as dgx-h100.
- dgx-b200: DGX B200 datasheet: 8 B200, NVLink 5 at 1.8 TB/s bidirectional per GPU (18 links)
  on 2 NVSwitch chips, 8 single-port ConnectX-7 at 400 Gb/s, 2 Intel Xeon Platinum 8570.
"""

from __future__ import annotations

from dataclasses import replace

from .nccl import Cluster

__all__ = ["CLUSTERS"]

_DGX_H100 = Cluster(
    "dgx-h100",
    "hopper",
    gpus_per_node=8,
    nvlinks=18,
    nic_gbps=400,
    nics_per_node=8,
    cpu="intel",
    device="h100",
    fabric="DGX H100 SuperPOD: 8 H100 SXM5 per node on NVSwitch (NVLink 4, 18 links, 450 GB/s per "
    "direction), 8 x NDR 400 Gb/s InfiniBand per node, one per GPU, rail-optimized 3-level fat tree",
)

CLUSTERS: dict[str, Cluster] = {
    c.name: c
    for c in (
        Cluster(
            "selene",
            "ampere",
            gpus_per_node=8,
            nvlinks=12,
            nic_gbps=200,
            nics_per_node=8,
            cpu="amd",
            device="a100",
            fabric="DGX A100 SuperPOD (Selene): 8 A100-SXM4-80GB per node on NVSwitch (NVLink 3, 12 links, "
            "300 GB/s per direction), 8 x HDR 200 Gb/s InfiniBand per node, one per GPU, rail-optimized fat tree",
        ),
        _DGX_H100,
        replace(
            _DGX_H100,
            name="h100-roce",
            fabric="H100 nodes as dgx-h100 on 400 Gb/s RoCE, one NIC per GPU (Llama 3's clusters)",
        ),
        Cluster(
            "dgx-b200",
            "blackwell",
            gpus_per_node=8,
            nvlinks=18,
            nic_gbps=400,
            nics_per_node=8,
            cpu="intel",
            device="b200",
            fabric="DGX B200: 8 B200 per node on NVSwitch (NVLink 5, 18 links, 900 GB/s per direction), "
            "8 x 400 Gb/s ConnectX-7 per node, one per GPU, rail-optimized fat tree",
        ),
    )
}
