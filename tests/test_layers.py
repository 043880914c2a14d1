"""The package is a one-way house: every import goes down the layer map (CONTRIBUTING.md), no two
modules import each other (directly or round a loop), and imports sit at module top unless they
defer an optional heavy dependency. Run as a script to list every offence at once."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "src" / "chakra_trace"
PACKAGE = "chakra_trace"

#: Lowest first. A module may import from its own package and from packages in lower layers;
#: packages that share a layer are peers and may not import each other. The top-level package
#: (`chakra_trace/__init__.py`, the public facade) may import anything.
LAYERS: list[set[str]] = [
    {"errors", "_native", "intervals", "table"},  # foundations: no first-party imports
    {"schema"},  # the model: enums, wire encoding, Trace, dependency graph, groups
    {"io"},  # files: .et streams, JSON, opening a job
    {"document"},  # the reports' one document model (sections of blocks) and its self-contained HTML renderer
    {"timeline"},  # the timed view of a job: device activity, one clock, which ops of different ranks meet
    {"validate"},  # checks and repairs (the simulator, converters and CLI use them)
    {"convert", "collect"},  # PyTorch/Kineto/text ingestion; recording
    {"capture"},  # model steps captured on fake tensors (master traces)
    {"synthesize"},  # traces made rather than recorded: patterns, plans and what-ifs over captures
    {"simulate", "analyze"},  # predictions; analyses of recorded or simulated times
    {"sweep", "catalog"},  # at scale: many simulations (design-space sweeps), many jobs (a fleet database)
    {"visualize", "replay"},  # views over analyses; benchmarks on real hardware
    {"calibrate"},  # this machine measured once (replay's harness), jobs predicted on it (the simulator)
    {"suite"},  # the benchmark suite: fixed workloads, run rules, scores, verifiable results
    {"cli"},  # the `chakra` command
]
LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer}

#: Third-party modules that may be imported inside a function: optional or heavy dependencies
#: whose import is deferred until a feature needs them.
DEFERRED = {"torch", "pandas", "matplotlib", "ray", "duckdb", "scipy", "pyarrow", "yaml", "pynvml"}

#: Files that may defer any import, and why.
DEFER_ANYTHING = {
    "collect/_sitecustomize/sitecustomize.py": "runs at the start of every Python process of a recorded job, "
    "so it imports only what the recording needs, when it needs it",
}


@dataclass(frozen=True)
class Edge:
    src: str  # importing module, e.g. chakra_trace.io.et
    dst: str  # imported module
    path: Path
    line: int
    text: str
    in_function: bool
    type_only: bool  # under `if TYPE_CHECKING:`


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(target: str, names: list[str], known: dict[str, Path]) -> list[str]:
    """Modules an import statement loads: `from pkg import mod` names a submodule when one exists."""
    out = []
    for n in names:
        sub = f"{target}.{n}"
        out.append(sub if sub in known else target)
    return out or [target]


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in ast.walk(node):
                ids.add(id(sub))
    return ids


def imports() -> list[Edge]:
    known = _modules()
    edges = []
    for mod, path in known.items():
        src = path.read_text()
        tree = ast.parse(src)
        lines = src.splitlines()
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        in_func = {
            id(sub)
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for sub in ast.walk(node)
        }
        typed = _type_checking_blocks(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                dsts = _resolve(target, [a.name for a in node.names], known)
            elif isinstance(node, ast.Import):
                dsts = [a.name for a in node.names]
            else:
                continue
            for dst in dsts:
                edges.append(
                    Edge(
                        mod,
                        dst,
                        path,
                        node.lineno,
                        lines[node.lineno - 1].strip(),
                        id(node) in in_func,
                        id(node) in typed,
                    )
                )
    return edges


def _unit(module: str) -> str:
    """The layer unit of a first-party module: its top-level package or module under chakra_trace."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _where(e: Edge) -> str:
    return f"{e.path.relative_to(ROOT.parents[1])}:{e.line}: {e.text}"


def layer_violations(edges: list[Edge]) -> list[str]:
    out = []
    for e in edges:
        if not e.dst.startswith(PACKAGE):
            continue
        a, b = _unit(e.src), _unit(e.dst)
        if a == "" or a == b:  # the facade, or within one package
            continue
        if a not in LAYER_OF or b not in LAYER_OF:
            out.append(f"{_where(e)}  ({a or b!r} is not in the layer map: add it to LAYERS and CONTRIBUTING.md)")
        elif LAYER_OF[b] > LAYER_OF[a]:
            out.append(f"{_where(e)}  (upward: {a} is in layer {LAYER_OF[a]}, {b} in layer {LAYER_OF[b]})")
        elif LAYER_OF[b] == LAYER_OF[a]:
            out.append(f"{_where(e)}  (peers: {a} and {b} share layer {LAYER_OF[a]})")
    return out


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Module-level import cycles (Tarjan's SCCs of size > 1, or a module importing itself).
    Imports under TYPE_CHECKING are annotations only and do not count."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.dst.startswith(PACKAGE) and not e.type_only and e.dst != e.src:
            graph.setdefault(e.src, set()).add(e.dst)
            graph.setdefault(e.dst, set())
    # a package's __init__ is imported before its submodules: a submodule importing its own
    # package's __init__ while that __init__ imports it is a cycle too, and shows up here
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def cycle_report(comp: list[str], edges: list[Edge]) -> str:
    members = set(comp)
    inside = [e for e in edges if e.src in members and e.dst in members and not e.type_only and e.src != e.dst]
    return "import cycle among " + ", ".join(comp) + ":\n" + "\n".join("    " + _where(e) for e in inside)


def deferred_violations(edges: list[Edge]) -> list[str]:
    out = []
    for e in edges:
        rel = e.path.relative_to(ROOT).as_posix()
        if e.in_function and e.dst.split(".")[0] not in DEFERRED and rel not in DEFER_ANYTHING:
            out.append(f"{_where(e)}  (inside a function: move it to the top of the module)")
    return out


def _dedup(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return imports()


def test_every_package_is_in_the_layer_map():
    units = {_unit(m) for m in _modules()} - {""}
    assert units <= set(LAYER_OF), f"not in LAYERS: {sorted(units - set(LAYER_OF))}"


def test_imports_go_down_the_layers(edges):
    bad = _dedup(layer_violations(edges))
    assert not bad, "imports against the layer map:\n" + "\n".join(bad)


def test_no_import_cycles(edges):
    found = cycles(edges)
    assert not found, "\n".join(cycle_report(c, edges) for c in found)


def test_imports_at_module_top(edges):
    bad = _dedup(deferred_violations(edges))
    assert not bad, "imports inside functions (only optional heavy dependencies may be deferred):\n" + "\n".join(bad)


def test_the_checks_catch_what_they_should():
    """The checker itself: an upward import, a cycle and a deferred stdlib import are found."""
    p = ROOT / "schema" / "x.py"
    fake = [
        Edge("chakra_trace.schema.x", "chakra_trace.cli.common", p, 1, "from ..cli.common import x", False, False),
        Edge("chakra_trace.io.a", "chakra_trace.io.b", p, 1, "from .b import y", False, False),
        Edge("chakra_trace.io.b", "chakra_trace.io.a", p, 2, "from .a import z", True, False),
        Edge("chakra_trace.convert.k", "chakra_trace.collect.r", p, 3, "from ..collect import r", False, False),
    ]
    assert len(layer_violations(fake)) == 2  # upward, and peers
    assert cycles(fake) == [["chakra_trace.io.a", "chakra_trace.io.b"]]
    assert len(deferred_violations(fake)) == 1
    assert not cycles([Edge("a.b", "a.c", p, 1, "", False, True), Edge("a.c", "a.b", p, 1, "", False, False)])


if __name__ == "__main__":
    es = imports()
    problems = (
        _dedup(layer_violations(es)) + [cycle_report(c, es) for c in cycles(es)] + _dedup(deferred_violations(es))
    )
    print("\n".join(problems) or "clean")
    sys.exit(1 if problems else 0)
