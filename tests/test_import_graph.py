"""Dependencies run one way: no import cycle anywhere in slurmtopo/, and the
pure layers never import the ones with side effects.

The graph is read from the source with ast, so the imports inside
functions (the lazy ones that keep start-up fast) count exactly like those
at the top of a module: a cycle hidden in a function body is still a cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set

ROOT = Path(__file__).resolve().parents[1]

#: the wings of pure code, from the bottom up (docs/design.md): each imports
#: only the wings below it, and nothing outside them but BELOW_ALL and the
#: package's own ``__version__``
WINGS = ("files", "inventory", "job", "placement", "cost", "plan", "show")
#: below every layer: they import nothing of slurmtopo, anything may import them
BELOW_ALL = ("slurmtopo.errors", "slurmtopo.show.termsafe")
#: the top level of the package: the entry points (the command line, the use
#: cases) and the error type; a new module goes into the room of its concept
TOP_LEVEL = ("__init__", "__main__", "advisor", "api", "api_admin", "cli", "errors")

#: the pure layers (planning, rendering, schema) ...
PURE = tuple(f"slurmtopo.{w}" for w in WINGS) + (
    "slurmtopo.errors", "slurmtopo.sbatch", "slurmtopo.slurmfmt",
    # the Slurm hooks' pure parts: the directive, sbatch's options <-> the
    # plan, each task's variables, the installed files' text
    "slurmtopo.hooks.directive", "slurmtopo.hooks.submit", "slurmtopo.hooks.taskvars",
    "slurmtopo.hooks.install")
#: ... never import these (use cases, side effects, command line)
OUTER = ("slurmtopo.api", "slurmtopo.api_admin", "slurmtopo.slurm", "slurmtopo.agent",
         "slurmtopo.admin", "slurmtopo.daemon", "slurmtopo.binding", "slurmtopo.simulate",
         "slurmtopo.audit", "slurmtopo.commands", "slurmtopo.cli", "slurmtopo.hooks.taskprolog",
         "slurmtopo.hooks.taskbind", "slurmtopo.advisor")


def _modules() -> Dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "slurmtopo").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph() -> Dict[str, Set[str]]:
    """module -> the slurmtopo modules it imports (anywhere in its body).
    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module,
    else to ``a.b``."""
    mods = _modules()

    def known(name: str) -> Optional[str]:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: Dict[str, Set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: List[Optional[str]] = []
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against the package
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else known(base)
                           for a in node.names]
            graph[mod].update(t for t in targets if t and t != mod)
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph is ~150 modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _under(mod: str, prefixes) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def test_the_walker_sees_lazy_imports():
    graph = import_graph()
    # both are imported only inside function bodies (api.__getattr__,
    # commands.hooks._planning)
    assert "slurmtopo.api_admin" in graph["slurmtopo.api"]
    assert "slurmtopo.commands.hook_plan" in graph["slurmtopo.commands.hooks"]


def test_the_walker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_pure_layers_never_import_side_effects():
    bad = sorted(f"{m} -> {t}" for m, ts in import_graph().items() if _under(m, PURE)
                 for t in ts if _under(t, OUTER))
    assert bad == []


def test_placement_never_imports_the_cost_model():
    # groups -> placement -> cost -> choice: the planner compares link
    # speeds through an interface (placement.speeds) that
    # slurmtopo.plan.choice fills from the cost model; the choice among its
    # proposals lives there
    graph = import_graph()
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if _under(m, ("slurmtopo.placement",))
                 for t in ts if _under(t, ("slurmtopo.cost", "slurmtopo.plan.choice")))
    assert bad == []
    # and the layers above it do use it: the check would see an import
    assert "slurmtopo.cost" in graph["slurmtopo.plan.choice"]
    assert "slurmtopo.placement.planner" in graph["slurmtopo.plan.choice"]
    assert not any(_under(t, ("slurmtopo.plan.choice",)) for t in graph["slurmtopo.cost"])


def test_slurm_formats_sit_below_admin_agent_and_api():
    # slurm.conf, topology.conf/yaml, gres.conf and GRES strings have one
    # home (slurmtopo.slurmfmt, pure): admin/, agent/, slurm/ and the api
    # import it, and admin/ and agent/ never import each other for them
    graph = import_graph()
    assert "slurmtopo.slurmfmt.topology_files" in graph["slurmtopo.api"]
    assert "slurmtopo.slurmfmt.gres_strings" in graph["slurmtopo.slurm.parse"]
    assert "slurmtopo.slurmfmt.gres_strings" in graph["slurmtopo.binding.allocation"]
    assert "slurmtopo.slurmfmt.gres_lines" in graph["slurmtopo.agent.watch"]
    assert "slurmtopo.slurmfmt.slurm_conf" in graph["slurmtopo.admin.generate"]
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                 if (_under(m, ("slurmtopo.admin",)) and _under(t, ("slurmtopo.agent",)))
                 or (_under(m, ("slurmtopo.agent",)) and _under(t, ("slurmtopo.admin",))))
    assert bad == []


def test_the_daemon_never_climbs_up_to_the_api():
    # loading a cluster and pricing a step live below both (slurmtopo.plan.cluster)
    graph = import_graph()
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if _under(m, ("slurmtopo.daemon",))
                 for t in ts if _under(t, ("slurmtopo.api",)))
    assert bad == []
    assert "slurmtopo.plan.cluster" in graph["slurmtopo.daemon.loop"]
    assert "slurmtopo.plan.cluster" in graph["slurmtopo.api"]


def test_nothing_below_the_simulator_imports_it():
    # slurmtopo simulate is a use case beside the daemon and the api: only
    # the command line may import it
    graph = import_graph()
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if not _under(m, (
        "slurmtopo.simulate", "slurmtopo.audit", "slurmtopo.commands", "slurmtopo.cli"))
        for t in ts if _under(t, ("slurmtopo.simulate",)))
    assert bad == []
    # and it does use the real code paths (the check would see an import)
    assert "slurmtopo.daemon.scheduler" in graph["slurmtopo.simulate.policies"]
    assert "slurmtopo.simulate.runner" in graph["slurmtopo.commands.simulate"]


def test_the_audit_is_computation_apart_from_slurm():
    # slurmtopo audit: the command reads Slurm through the backend, the
    # audit package only computes; only the command line imports it, and it
    # reuses the simulator's stranded count, layout rule and sacct reader
    graph = import_graph()
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if _under(m, ("slurmtopo.audit",))
                 for t in ts if _under(t, ("slurmtopo.slurm", "slurmtopo.commands",
                                           "slurmtopo.daemon", "slurmtopo.cli")))
    assert bad == []
    users = sorted(m for m, ts in graph.items() if not _under(m, ("slurmtopo.audit",))
                   and any(_under(t, ("slurmtopo.audit",)) for t in ts))
    assert users == ["slurmtopo.commands.audit", "slurmtopo.commands.check",
                     "slurmtopo.commands.state"]
    assert "slurmtopo.simulate.freestate" in graph["slurmtopo.audit.stranded"]
    assert "slurmtopo.simulate.layouts" in graph["slurmtopo.audit.placements"]


def _imports_of(paths) -> Dict[str, Set[str]]:
    """module -> every module name it imports (anywhere in its body), for
    the files ``paths`` (relative to the repository root)."""
    out: Dict[str, Set[str]] = {}
    for path in paths:
        names: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
        out[".".join(path.relative_to(ROOT).with_suffix("").parts)] = names
    return out


def _bench_imports() -> Dict[str, Set[str]]:
    """bench module -> the bench/ and tests/ modules it imports (anywhere)."""
    return {m: {n for n in names if n.split(".")[0] in ("bench", "tests", "pytest")}
            for m, names in _imports_of(sorted((ROOT / "bench").glob("*.py"))).items()}


def test_bench_needs_neither_pytest_nor_a_test_module():
    # `pip install '.[bench]' && python3 -m bench.run --quick` has no pytest,
    # and bench never depends on the tests: the test doubles both use are
    # the package's (slurmtopo.testing)
    bad = sorted(f"{m} -> {t}" for m, ts in _bench_imports().items() for t in ts
                 if t.split(".")[0] in ("pytest", "tests"))
    assert bad == []
    used = _imports_of([ROOT / "bench" / "daemon_load.py"])["bench.daemon_load"]
    assert "slurmtopo.testing.slurm_backend" in used  # the check would see an import


def test_the_package_never_imports_the_tests_nor_its_test_doubles():
    # slurmtopo/testing holds the doubles tests and bench share; nothing
    # else in the package may lean on them, and nothing in it on tests/
    mods = _imports_of(sorted((ROOT / "slurmtopo").rglob("*.py")))
    bad = sorted(f"{m} -> {t}" for m, ts in mods.items() for t in ts
                 if t.split(".")[0] in ("tests", "pytest")
                 or (_under(t, ("slurmtopo.testing",))
                     and not _under(m, ("slurmtopo.testing",))))
    assert bad == []
    assert "slurmtopo.slurm.backend" in mods["slurmtopo.testing.slurm_backend"]


def test_bench_has_no_import_cycle():
    mods = _bench_imports()
    graph = {m: {t for t in ts if t in mods} for m, ts in mods.items()}
    assert cycles(graph) == []
    assert "bench.process" in graph["bench.launch"]  # the check would see an import


def test_ring_and_torus_rules_have_one_home():
    # Slurm's rules for rings and toruses and the trees they become are
    # ringtree's alone, below the formats and the inventory that both use
    # them; slurmfmt/ring_torus only reads topology.yaml's sections into it
    graph = import_graph()
    for user in ("slurmtopo.slurmfmt.ring_torus", "slurmtopo.slurmfmt.topology_conf",
                 "slurmtopo.slurmfmt.topology_yaml", "slurmtopo.inventory.schema"):
        assert "slurmtopo.inventory.ringtree" in graph[user], user
    assert not any(_under(t, ("slurmtopo.slurmfmt", "slurmtopo.inventory.schema"))
                   for t in graph["slurmtopo.inventory.ringtree"])
    readers = sorted(m for m, ts in graph.items() if "slurmtopo.slurmfmt.ring_torus" in ts)
    assert readers == ["slurmtopo.slurmfmt.topology_yaml"]


def _wing(mod: str) -> Optional[str]:
    """The wing ``mod`` is in (None outside the wings)."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in WINGS else None


def test_the_wings_import_only_the_wings_below_them():
    # files < inventory < job < placement < cost < plan < show, and nothing
    # outside the wings but errors, termsafe and the package's __version__
    graph = import_graph()
    rank = {w: i for i, w in enumerate(WINGS)}
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if _wing(m)
                 for t in ts if t not in BELOW_ALL + ("slurmtopo",)
                 and (_wing(t) is None or rank[_wing(t)] > rank[_wing(m)]))
    assert bad == []
    assert [graph[m] for m in BELOW_ALL] == [set(), set()]
    # the one import of the package itself is its version (the compiled
    # form's code fingerprint)
    assert sorted(m for m, ts in graph.items() if _wing(m) and "slurmtopo" in ts) == \
        ["slurmtopo.inventory.cache"]
    # and each wing leans on the one below: the check would see an import
    for user, used in (("slurmtopo.inventory.schema", "slurmtopo.files.yamlio"),
                       ("slurmtopo.job.request", "slurmtopo.inventory.hostlist"),
                       ("slurmtopo.placement.common", "slurmtopo.job.request"),
                       ("slurmtopo.cost.hardware", "slurmtopo.placement.intranode"),
                       ("slurmtopo.plan.choice", "slurmtopo.cost"),
                       ("slurmtopo.show.preview", "slurmtopo.cost.step"),
                       ("slurmtopo.plan.rankmap", "slurmtopo.show.termsafe")):
        assert used in graph[user], (user, used)


def test_the_preview_is_read_by_the_command_line_and_the_audit_only():
    # show/ is the top of the pure wings: what lays out a preview or a table
    # is imported by the command line and the audit's tables; termsafe, below
    # everything, by anyone
    graph = import_graph()
    users = sorted({m.split(".")[1] for m, ts in graph.items() if _wing(m) != "show"
                    for t in ts if _wing(t) == "show" and t not in BELOW_ALL})
    assert users == ["audit", "commands"]


def test_the_top_level_holds_only_the_entry_points():
    assert sorted(p.stem for p in (ROOT / "slurmtopo").glob("*.py")) == sorted(TOP_LEVEL)
    # the new wings' __init__ import nothing (a docstring each)
    graph = import_graph()
    for w in ("files", "inventory", "job", "plan", "show"):
        assert graph[f"slurmtopo.{w}"] == set(), w
