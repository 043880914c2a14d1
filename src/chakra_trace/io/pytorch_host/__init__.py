"""PyTorch host execution traces (the ``ExecutionTraceObserver`` JSON), read into columns.

``read_host_trace(path)`` reads a plain or gzipped ET JSON of any schema from ``1.0.1`` (flat:
``parent``, ``input_shapes``, attributes as plain keys) through ``1.1.1`` (nested ``inputs`` /
``outputs`` dicts, ``attrs`` list, ``strides``) and later ones with a recognizable layout, into
a `HostTrace`. Unknown node keys and attributes are kept, and ``HostTrace.node(i)`` rebuilds
node ``i`` as the exact dict ``json.load`` would give (the tests check that for every node of
every sample).

The modules, in the order the data flows:

* ``reader``: streams the JSON text and cuts it into nodes (optional C kernel ``_host``);
* ``templates``: compiles each node shape once, so later nodes of that shape are numbers only;
* ``columns``: gathers the numbers into the columns of a `HostTrace`;
* ``model``: `HostTrace` and `HostTensors`, what the rest of the package uses.
"""

from .model import FLAT, INT_COLUMNS, NESTED, PROCESS_GROUP_INIT, HostTensors, HostTrace
from .reader import TruncatedTraceWarning, read_host_trace

__all__ = [
    "HostTensors",
    "HostTrace",
    "TruncatedTraceWarning",
    "read_host_trace",
    "INT_COLUMNS",
    "PROCESS_GROUP_INIT",
    "NESTED",
    "FLAT",
]
