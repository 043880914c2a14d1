"""Random ASTRA-sim cases for differential testing: a network, a system, a remote memory, a
workload description, communicator groups and a backend, all plain JSON values.

A case is rebuilt from its JSON alone (`workload_of`), so a recorded case needs no `.et` files:
the sweep (`sweep.py`) writes them with chakra-trace's writer for the binary, and the recorded
fixtures (`tests/test_astra_differential.py`) rebuild the same traces for our simulator.
Nothing here runs a simulator.
"""

from __future__ import annotations

import math
import random

TOPOLOGIES = ("Ring", "Switch", "FullyConnected")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
IMPL_KEYS = {
    "all_reduce": "all-reduce-implementation",
    "all_gather": "all-gather-implementation",
    "reduce_scatter": "reduce-scatter-implementation",
    "all_to_all": "all-to-all-implementation",
}
#: The names ASTRA-sim's CollectiveImplLookup accepts ("direct"/"oneDirect" may end in a window).
ALGORITHMS = ("ring", "direct", "halvingDoubling", "doubleBinaryTree", "oneRing", "oneDirect", "oneHalvingDoubling")
_ALGO_WEIGHTS = (6, 4, 3, 1, 1, 1, 1)
BANDWIDTHS = (12.5, 25, 50, 100, 150, 200, 400, 37.5, 3.2)
LATENCIES = (0, 1, 10, 100, 500, 700, 1000, 2.5)
SIZES = (1, 2, 3, 7, 16, 100, 1000, 4096, 4100, 65536, 99999, 262144, 393216, 1000003, 1048576, 4194304, 16777216)
# keys ASTRA-sim 2.x reads no more; written now and then to check they change nothing
IGNORED = {
    "intra-dimension-scheduling": ("FIFO", "RG", "smallestFirst", "lessRemainingPhaseFirst"),
    "inter-dimension-scheduling": ("baseline", "themis", "enforceOrder"),
}


# ----------------------------------------------------------------------------- generation


def _network(rng: random.Random, aware: bool) -> dict:
    # the congestion-aware backend builds 1-D networks only (a few others record its refusal)
    ndims = 1 if aware and rng.random() < 0.95 else rng.choices((1, 2, 3, 4), (35, 35, 20, 10))[0]
    cap = 256 if rng.random() < 0.05 else 64
    while True:
        sizes = [rng.choice((2, 2, 3, 4, 4, 5, 6, 8, 8, 12, 16)) for _ in range(ndims)]
        if math.prod(sizes) <= cap:
            break
    return {
        "topology": [rng.choice(TOPOLOGIES) for _ in sizes],
        "npus_count": sizes,
        "bandwidth": [rng.choice(BANDWIDTHS) for _ in sizes],
        "latency": [rng.choice(LATENCIES) for _ in sizes],
    }


def _algorithm(rng: random.Random) -> str:
    a = rng.choices(ALGORITHMS, _ALGO_WEIGHTS)[0]
    if a in ("direct", "oneDirect") and rng.random() < 0.25:
        a += str(rng.choice((1, 2, 4, 8)))
    return a


def _fit(rng: random.Random, algos: list[str], coll: str, sizes: list[int]) -> list[str]:
    """Mostly steer clear of what ASTRA-sim cannot run (a few stay, to record its failures):
    halving-doubling has no all-to-all and deadlocks on NPU counts that are not powers of two."""
    out = []
    for a, n in zip(algos, sizes):
        hd = a in ("halvingDoubling", "oneHalvingDoubling")
        total = math.prod(sizes) if a.startswith("one") else n
        if hd and (coll == "all_to_all" or total & (total - 1)) and rng.random() < 0.9:
            a = "direct" if a == "halvingDoubling" else "oneDirect"
        out.append(a)
    return out


def _system(rng: random.Random, sizes: list[int], roofline: bool) -> dict:
    ndims = len(sizes)
    s: dict = {
        "scheduling-policy": rng.choice(("LIFO", "FIFO")),
        # (0 trips an assertion in ASTRA-sim's event queue: an event at the current time)
        "endpoint-delay": 0 if rng.random() < 0.03 else rng.choice((1, 10, 10, 50, 100)),
        "active-chunks-per-dimension": rng.choice((1, 1, 2, 3, 4)),
        "preferred-dataset-splits": rng.choice((1, 2, 3, 4, 4, 5, 8)),
        "collective-optimization": rng.choice(("baseline", "localBWAware")),
        "local-mem-bw": rng.choice((50, 1600, 3200)),
    }
    same = rng.random() < 0.5  # one algorithm for every collective, or each its own
    first = [_algorithm(rng) for _ in range(ndims)]
    for coll in COLLECTIVES:
        s[IMPL_KEYS[coll]] = _fit(rng, first if same else [_algorithm(rng) for _ in range(ndims)], coll, sizes)
    if roofline:
        s["roofline-enabled"] = 1
        s["peak-perf"] = rng.choice((100, 900, 1979))
    for key, values in IGNORED.items():
        if rng.random() < 0.15:
            s[key] = rng.choice(values)
    return s


def _groups(rng: random.Random, npus: int) -> dict | None:
    """Communicator groups that partition the NPUs: contiguous blocks or strided sets."""
    divisors = [d for d in range(2, npus) if npus % d == 0]
    if not divisors:
        return None
    size = rng.choice(divisors)  # members per group
    count = npus // size
    if rng.random() < 0.5:
        members = [list(range(g * size, (g + 1) * size)) for g in range(count)]
    else:
        members = [list(range(g, npus, count)) for g in range(count)]
    return {str(g + 1): m for g, m in enumerate(members)}


def _coll(rng: random.Random) -> dict:
    return {"op": "coll", "type": rng.choice(COLLECTIVES), "size": rng.choice(SIZES)}


def _workload(rng: random.Random, npus: int, roofline: bool) -> dict:
    # (with the roofline on, ASTRA-sim needs num_ops on every GPU compute node: no `train`)
    kind = rng.choices(
        ("coll", "train", "overlap", "p2p", "mem", "roof"), (50, 0 if roofline else 12, 18, 8, 6, 12 if roofline else 0)
    )[0]
    if kind == "coll":
        c = _coll(rng)
        return {"spec": f"coll:{c['type']}:{c['size']}"}
    if kind == "train":
        return {
            "spec": f"train:layers={rng.randint(1, 6)}:comp_us={rng.choice((1, 5, 20, 100))}"
            f":size={rng.choice((4096, 65536, 1048576, 4194304))}"
        }
    if kind == "p2p":
        return {"spec": f"p2p:size={rng.choice((1, 1000, 65536, 1048576))}"}
    if kind == "roof":
        ops = "/".join(rng.choice(("1e9", "1e10", "5e11", "1e12")) for _ in range(rng.randint(1, 4)))
        return {"spec": f"roof:ops={ops}:bytes={rng.choice(('1e6', '1e8', '1e9'))}"}
    # a node list, the same on every NPU: collectives in flight together, compute between
    nodes: list[dict] = []
    for i in range(rng.randint(2, 4)):
        r = rng.random()
        if kind == "mem" and r < 0.4:
            node = {"op": rng.choice(("load", "store")), "size": rng.choice((1024, 1048576, 16777216))}
        elif r < 0.3:
            node = {"op": "comp", "us": rng.choice((1, 3, 10, 50))}
            if roofline:
                node.update(ops=rng.choice((1e9, 1e11)), bytes=rng.choice((1e6, 1e8)), cpu=rng.random() < 0.3)
        else:
            node = _coll(rng)
        if i and rng.random() < 0.5:
            node["deps"] = [rng.randrange(i)]
        nodes.append(node)
    return {"nodes": nodes}


def _memory(rng: random.Random, npus: int) -> dict:
    mtype = rng.choice(("PER_NPU_MEMORY_EXPANSION", "MEMORY_POOL", "PER_NODE_MEMORY_EXPANSION"))
    m = {
        "memory-type": mtype,
        "remote-mem-latency": rng.choice((0, 100, 1000)),
        "remote-mem-bw": rng.choice((10, 50, 128)),
    }
    if mtype == "PER_NODE_MEMORY_EXPANSION":
        per = rng.choice([d for d in (1, 2, 4, 8) if npus % d == 0])
        m.update({"num-nodes": npus // per, "num-npus-per-node": per})
    return m


def random_case(seed: int, index: int) -> dict:
    """Case number `index` of the sweep with `seed` (the same every time)."""
    rng = random.Random(f"{seed}:{index}")
    backend = rng.choice(("unaware", "aware"))
    net = _network(rng, backend == "aware")
    npus = math.prod(net["npus_count"])
    roofline = rng.random() < 0.12
    case = {
        "id": f"s{seed}-{index}",
        "backend": backend,
        "network": net,
        "system": _system(rng, net["npus_count"], roofline),
        "workload": _workload(rng, npus, roofline),
        "comm_groups": None,
        "memory": None,
    }
    nodes = case["workload"].get("nodes", [])
    if any(n["op"] in ("load", "store") for n in nodes):
        case["memory"] = _memory(rng, npus)
    colls = [n for n in nodes if n["op"] == "coll"] or (
        [True] if case["workload"].get("spec", "").startswith("coll:") else []
    )
    if colls and rng.random() < 0.15:
        groups = _groups(rng, npus)
        if groups:
            case["comm_groups"] = groups
            if nodes:
                for n in nodes:
                    if n["op"] == "coll" and rng.random() < 0.7:
                        n["group"] = True
            else:  # a single collective in the group of each NPU
                t, size = case["workload"]["spec"].split(":")[1:]
                case["workload"] = {"nodes": [{"op": "coll", "type": t, "size": int(size), "group": True}]}
    return case


# ----------------------------------------------------------------------------- rebuilding


def npus_of(case: dict) -> int:
    return math.prod(case["network"]["npus_count"])


def network_yaml(net: dict) -> str:
    """ASTRA-sim's analytical network YAML."""

    def row(v):
        return "[ " + ", ".join(str(x) for x in v) + " ]"

    return "".join(f"{k}: {row(net[k])}\n" for k in ("topology", "npus_count", "bandwidth", "latency"))


def group_of(groups: dict | None) -> dict[int, str]:
    """Rank -> the id of the group holding it."""
    return {r: g for g, members in (groups or {}).items() for r in members}


def workload_of(case: dict):
    """The case's workload (a chakra_trace `Workload`), one trace per NPU."""
    from chakra_trace.io.workload import Workload
    from chakra_trace.schema.builder import TraceBuilder
    from chakra_trace.synthesize import from_spec

    npus, w = npus_of(case), case["workload"]
    if "spec" in w:
        return from_spec(w["spec"], npus)
    member = group_of(case.get("comm_groups"))
    traces, shared = {}, None
    grouped = any(n.get("group") for n in w["nodes"])
    for r in range(npus):
        if shared is not None:
            traces[r] = shared
            continue
        b = TraceBuilder()
        ids: list[int] = []
        for n in w["nodes"]:
            deps = [ids[d] for d in n.get("deps", ())]
            op = n["op"]
            if op == "coll":
                ids.append(b.collective(n["type"], n["size"], deps=deps, pg_name=member[r] if n.get("group") else None))
            elif op == "comp":
                ids.append(
                    b.comp(
                        "comp",
                        n["us"],
                        deps=deps,
                        num_ops=n.get("ops"),
                        tensor_size=None if n.get("bytes") is None else int(n["bytes"]),
                        is_cpu_op=bool(n.get("cpu")),
                    )
                )
            else:
                node_type = "MEM_LOAD_NODE" if op == "load" else "MEM_STORE_NODE"
                ids.append(b.add(op, node_type, data_deps=deps, tensor_size=int(n["size"])))
        trace = b.build()
        traces[r] = trace
        if not grouped:
            shared = trace  # the same trace object for every NPU
    return Workload(traces)


# ----------------------------------------------------------------------------- classes


def _ops(case: dict) -> list[dict]:
    w = case["workload"]
    if "nodes" in w:
        return w["nodes"]
    kind, _, rest = w["spec"].partition(":")
    if kind == "coll":
        t, size = rest.split(":")
        return [{"op": "coll", "type": t, "size": int(size)}]
    return [{"op": kind}]


def workload_kind(case: dict) -> str:
    w = case["workload"]
    if "spec" in w:
        return w["spec"].split(":")[0]
    ops = {n["op"] for n in w["nodes"]}
    if ops & {"load", "store"}:
        return "mem"
    return "multi" if sum(n["op"] == "coll" for n in w["nodes"]) > 1 else "coll+comp"


def case_class(case: dict) -> str:
    """dims x topology mix / collectives / algorithms / backend / options."""
    net, s = case["network"], case["system"]
    colls = sorted({n["type"] for n in _ops(case) if n["op"] == "coll"})
    kind = workload_kind(case)
    algos = set()
    for c in colls:
        algos.update(a.rstrip("0123456789") for a in s[IMPL_KEYS[c]])
    if kind == "train":
        algos.update(a.rstrip("0123456789") for a in s[IMPL_KEYS["all_reduce"]])
    topo = "".join(t[0] for t in net["topology"])  # R / S / F per dimension
    opts = [s["collective-optimization"]]
    if case.get("comm_groups"):
        opts.append("groups")
    return (
        f"{len(net['npus_count'])}D:{topo}|{kind}:{'+'.join(colls) or '-'}|{'+'.join(sorted(algos)) or '-'}"
        f"|{case['backend']}|{','.join(opts)}"
    )


def features(case: dict) -> list[str]:
    """Named features of a case, for finding those that differing cases share."""
    net, s = case["network"], case["system"]
    f = [f"dims={len(net['npus_count'])}", f"backend={case['backend']}", f"workload={workload_kind(case)}"]
    f += [f"topo={t}" for t in set(net["topology"])]
    ops = _ops(case)
    for n in ops:
        if n["op"] == "coll":
            f.append(f"coll={n['type']}")
            splits = s["preferred-dataset-splits"]
            if n["size"] % splits:
                f.append("size%splits!=0")
            if n["size"] // splits < npus_of(case):
                f.append("chunk<npus")
            for a in s[IMPL_KEYS[n["type"]]]:
                f.append(f"algo={a.rstrip('0123456789')}")
                if a[-1].isdigit():
                    f.append("direct-window")
    f.append(f"opt={s['collective-optimization']}")
    f.append(f"policy={s['scheduling-policy']}")
    f.append(f"active_chunks={s['active-chunks-per-dimension']}")
    f.append(f"splits={s['preferred-dataset-splits']}")
    if s.get("roofline-enabled"):
        f.append("roofline")
    if any(n.get("cpu") for n in ops):
        f.append("cpu_op")
    if case.get("comm_groups"):
        strided = any(m != list(range(m[0], m[0] + len(m))) for m in case["comm_groups"].values())
        f.append("groups=strided" if strided else "groups=contiguous")
    if any(d.get("deps") for d in ops) or workload_kind(case) == "train":
        f.append("deps")
    if any(x != int(x) for x in net["bandwidth"]):
        f.append("fractional_bw")
    if math.prod(net["npus_count"]) > 64:
        f.append("npus>64")
    return sorted(set(f))


def astra_known_failure(case: dict) -> str | None:
    """Why ASTRA-sim itself is expected to fail on this case (differences-found.md class 10)."""
    net, s = case["network"], case["system"]
    if case["backend"] == "aware" and any(t == "Ring" and n == 2 for t, n in zip(net["topology"], net["npus_count"])):
        return "congestion-aware backend cannot build a 2-NPU ring"
    for n in _ops(case):
        if n["op"] == "coll" and n["type"] == "all_gather" and n["size"] < s["preferred-dataset-splits"]:
            return "all-gather smaller than preferred-dataset-splits: chunk size 0 loops forever"
    for t in {n["type"] for n in _ops(case) if n["op"] == "coll"} | (
        {"all_reduce"} if workload_kind(case) == "train" else set()
    ):
        for a, n in zip(s[IMPL_KEYS[t]], net["npus_count"]):
            if a not in ("halvingDoubling", "oneHalvingDoubling"):
                continue
            if t == "all_to_all":
                return "halvingDoubling has no all-to-all (ASTRA-sim exits)"
            total = math.prod(net["npus_count"]) if a.startswith("one") else n
            if total & (total - 1):
                return "halvingDoubling on an NPU count that is not a power of two: deadlock (unreleased nodes)"
    if s["endpoint-delay"] == 0:
        return "endpoint-delay 0: an event at the current time trips the event queue's assertion"
    if case["backend"] == "aware" and len(net["npus_count"]) > 1:
        return "congestion-aware backend builds 1-D networks only"
    return None


# ----------------------------------------------------------------------------- known causes

#: Causes of the differences the sweep of 2026-11-26 found (`cause_of` names them; their text is
#: the xfail reason of the recorded fixtures, tests/data/astra-sim/sweep_causes.json).
CAUSES = {
    "memory-slot": "remote memory: accesses that reach a shared pool port at the same nanosecond are served in "
    "ASTRA-sim's event order (after a ring collective, NPU order rotated by its step count), ours in NPU order",
    "groups": "sub-cluster communicator groups on the congestion-aware backend: messages of several groups' chunks "
    "reaching a link at the same nanosecond, taken in ASTRA-sim's event order",
    "one-algorithm-multidim": "oneRing/oneDirect/oneHalvingDoubling on a multi-dimensional network (fixed: "
    "GeneralComplexTopology makes that dimension one ring of all NPUs and drops the ones after it)",
    "double-binary-tree": "doubleBinaryTree: per-NPU trees and slots (RootMax/RootMin in turn); what remains are "
    "trees that do not fit the NPU count and ASTRA-sim's own undefined cases",
    "halving-doubling": "halvingDoubling (and oneHalvingDoubling): per-step sizes and partners where ours still "
    "differs from ASTRA-sim's HalvingDoubling",
    "direct-window": "direct/oneDirect with a window (directN) on the congestion-aware backend (fixed: "
    "`window.WindowRun` runs ASTRA-sim's AllToAll packet by packet on the event loop)",
    "aware-chunks": "congestion-aware backend with more than one chunk in flight (fixed by event-ordered "
    "pricing: whatever is left is listed here)",
    "cpu-op-roofline": "roofline on and an is_cpu_op compute node (fixed: ASTRA-sim replays its recorded time)",
    "aware-direct": "direct/oneDirect on the congestion-aware backend (fixed: every direct phase runs as "
    "ASTRA-sim's AllToAll, `window.WindowRun`; before, a full window on a ring of odd size differed)",
    "tiny-all-gather": "all-gather with size // preferred-dataset-splits below the NPU count (fixed: "
    "ceil(size / chunk) chunks)",
    "multidim": "multi-dimensional collective on ring/direct only (fixed: whole-byte shares, ASTRA-sim's "
    "bandwidth rounding)",
    "other": "not yet classified",
}


def used_algorithms(case: dict) -> set[str]:
    """Algorithms (window stripped) of every dimension of the collectives the workload runs."""
    s = case["system"]
    types = {n["type"] for n in _ops(case) if n["op"] == "coll"}
    if workload_kind(case) == "train":
        types.add("all_reduce")
    return {a.rstrip("0123456789") for t in types for a in s[IMPL_KEYS[t]]}


def cause_of(case: dict) -> str:
    """The likeliest known cause of a difference on this case (the first rule that applies)."""
    s, ops = case["system"], _ops(case)
    algos = used_algorithms(case)
    windows = {
        a
        for t in {n["type"] for n in ops if n["op"] == "coll"}
        | ({"all_reduce"} if workload_kind(case) == "train" else set())
        for a in s[IMPL_KEYS[t]]
        if a[-1].isdigit()
    }
    multidim = sum(n > 1 for n in case["network"]["npus_count"]) > 1
    if any(n["op"] in ("load", "store") for n in ops):
        return "memory-slot"
    if s.get("roofline-enabled") and any(n.get("cpu") for n in ops):
        return "cpu-op-roofline"
    if case.get("comm_groups") and any(n.get("group") for n in ops):
        return "groups"
    if multidim and algos & {"oneRing", "oneDirect", "oneHalvingDoubling"}:
        return "one-algorithm-multidim"
    if "doubleBinaryTree" in algos:
        return "double-binary-tree"
    if algos & {"halvingDoubling", "oneHalvingDoubling"}:
        return "halving-doubling"
    if windows:
        return "direct-window"
    if case["backend"] == "aware" and s["active-chunks-per-dimension"] > 1 and s["preferred-dataset-splits"] > 1:
        return "aware-chunks"
    if case["backend"] == "aware" and algos & {"direct", "oneDirect"}:
        return "aware-direct"
    if any(
        n["op"] == "coll" and n["type"] == "all_gather" and n["size"] // s["preferred-dataset-splits"] < npus_of(case)
        for n in ops
    ):
        return "tiny-all-gather"
    if multidim:
        return "multidim"
    return "other"


def simulate_case(case: dict):
    """`--compat astra` on a case (its workload rebuilt), warnings silenced: the SimResult."""
    import warnings

    from chakra_trace.simulate import simulate
    from chakra_trace.simulate.config import MemoryConfig, Network, SystemConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate(
            workload_of(case),
            Network.from_dict(case["network"]),
            SystemConfig.from_dict(case["system"]),
            memory=MemoryConfig.from_dict(case["memory"]) if case.get("memory") else None,
            comm_groups=case.get("comm_groups"),
            compat=True,
            aware=case["backend"] == "aware",
        )
