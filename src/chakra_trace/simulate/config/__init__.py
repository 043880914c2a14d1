"""The simulator's inputs, parsed and checked: ASTRA-sim's network YAML (`topology`), system
JSON and remote-memory JSON (`system`).

The files are read the way ASTRA-sim (2.x, analytical backends) reads them, with its
defaults, but every value is checked up front (`values`): a wrong type, an unknown name or an
out-of-range number raises :class:`~chakra_trace.errors.ChakraError` with a one-line message
that names the file (and line where known), the key, and what was expected -- where
ASTRA-sim would exit, assert, or run on with a garbage value.

Units are kept as written: bandwidths in the network file are "GB/s" (ASTRA-sim's analytical
network reads them as GiB/s: bytes per ns = bw * 2**30 / 1e9; that conversion belongs to the
network model), latencies in ns, ``local-mem-bw`` in decimal GB/s (= bytes per ns),
``peak-perf`` in TFLOPS.

Keys that ASTRA-sim reads but that have no effect here (``boost-mode``, ``replay-only``, ...),
and keys it does not know at all, are kept in ``ignored`` so reports can list them;
:meth:`SystemConfig.unknown_keys` separates likely typos from known-but-ignored keys.

The network file is YAML, read by PyYAML's safe loader (`io.documents`), which also takes exponents
without a dot (``1e2``) as numbers, as ASTRA-sim's yaml-cpp does; a syntax error, several
documents or a key given twice name the file and line.
"""

from .system import (
    ALGORITHMS,
    ASTRA_IGNORED_MEMORY_KEYS,
    ASTRA_IGNORED_SYSTEM_KEYS,
    COLLECTIVE_OPTIMIZATIONS,
    MEMORY_TYPES,
    SCHEDULING_POLICIES,
    MemoryConfig,
    SystemConfig,
    parse_algorithm,
)
from .topology import MIN_NPUS_PER_DIM, TOPOLOGIES, Dimension, Network, parse_yaml

__all__ = [
    "TOPOLOGIES",
    "MIN_NPUS_PER_DIM",
    "ALGORITHMS",
    "SCHEDULING_POLICIES",
    "COLLECTIVE_OPTIMIZATIONS",
    "MEMORY_TYPES",
    "ASTRA_IGNORED_SYSTEM_KEYS",
    "ASTRA_IGNORED_MEMORY_KEYS",
    "Dimension",
    "Network",
    "SystemConfig",
    "MemoryConfig",
    "parse_algorithm",
    "parse_yaml",
]
