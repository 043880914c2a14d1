"""How much a load may build: a node count bounded by a documented limit and by the machine.

The gzip ratio guard bounds bytes, not what they turn into: an empty node is one byte on the
wire and ~130 B in columns, so 10 MB of zero bytes would build 1.4 GB. A load is refused, with
one line saying which limit and how to raise it, *before* a block of nodes is decoded when

- the nodes so far would need more than half the memory the process can still get
  (``MemAvailable``, and the address-space limit ``RLIMIT_AS`` where one is set) -- or more
  than ``Limits.max_nodes`` / ``CHAKRA_TRACE_MAX_NODES`` when given; or
- past ``BUILD_GRACE`` bytes, they would need more than ``Limits.max_build_ratio`` (64) times
  the file's size on disk. Real traces build 2-5 B per file byte (~40 B/node gzipped,
  ~150-800 B/node plain); streams of empty nodes build 130-200.
"""

from __future__ import annotations

import os
import resource

from ..errors import ChakraError, TraceFormatError

NODE_BYTES = 160  # columns of a node with no extras (~130 B) plus the load's temporaries
BUILD_GRACE = 64 << 20  # below this estimate no ratio check: small files never trip it
DEFAULT_MAX_BUILD_RATIO = 64.0
ENV_MAX_NODES = "CHAKRA_TRACE_MAX_NODES"


def available_bytes() -> int:
    """Memory this process can still get: MemAvailable, capped by RLIMIT_AS headroom."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    if avail is None:  # not Linux: physical memory
        try:
            avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            avail = 1 << 40
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        avail = min(avail, max(0, soft - (vm_size() or 0)))
    return int(avail)


def vm_size() -> int | None:
    """Bytes of address space this process maps now (VmSize); None where that is not known."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def env_int(name: str, what: str = "a positive integer") -> int | None:
    """A positive integer from the environment (``1e6`` and ``1_000_000`` accepted), or None when
    unset: every limit a user overrides by environment reads it here. ``what`` names the unit."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    bad = ChakraError(f"{name}={raw[:40]!r}: expected {what}")
    try:
        v = float(raw.replace("_", "")) if any(c in raw for c in ".eE") else int(raw.replace("_", ""))
    except ValueError:
        raise bad from None
    if v != v or v < 1 or v > 1 << 62 or int(v) != v:
        raise bad
    return int(v)


def node_limit(max_nodes: int | None) -> tuple[int, str]:
    """The node limit in force and what sets it (for the error message)."""
    if max_nodes is not None:
        return int(max_nodes), "Limits.max_nodes"
    env = env_int(ENV_MAX_NODES)
    if env is not None:
        return env, ENV_MAX_NODES
    avail = available_bytes()
    return max(1, avail // 2 // NODE_BYTES), f"half the {_gb(avail)} of memory available"


def check_nodes(path: str, nodes: int, file_bytes: int, max_nodes: int | None, max_build_ratio: float) -> None:
    """Refuse, before decoding, a load that would build `nodes` nodes beyond the limits."""
    est = nodes * NODE_BYTES
    if est > BUILD_GRACE and est > max_build_ratio * max(file_bytes, 1):
        raise TraceFormatError(
            path,
            f"{nodes:,} nodes in {file_bytes:,} bytes would take about {_gb(est)} in memory, "
            f"over {max_build_ratio:g} times the file's size (nearly empty nodes: this looks like a memory "
            "bomb; raise Limits.max_build_ratio to read it anyway)",
        )

    limit, source = node_limit(max_nodes)
    if nodes > limit:
        raise TraceFormatError(
            path,
            f"more than {limit:,} nodes (about {_gb(est)} in memory), over the limit of {source}; "
            f"set {ENV_MAX_NODES} or Limits.max_nodes to read it anyway",
        )


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
