"""The package's shape: subpackages along the data path, imports one way.

catalogue -> targets -> probe -> (doctor) -> decode -> analysis -> output ->
sessions -> commands: a module may import its own subpackage and those before
it, never one after it (cudaprobe.errors and the package itself, which every
layer uses, sit below them all); and only the subpackages its own
`__init__.py` says it may import. Read from the source with ast, so that an
import against the direction fails here before it lands."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "cudaprobe"
# doctor, the machine checks, is a side room: it reads what targets and probe need,
# and output shows its report
LAYERS = ("catalogue", "targets", "probe", "doctor", "decode", "analysis", "output", "sessions",
          "commands")
MAX_TOP_MODULES = 8


def _imports(source: str, module: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every `cudaprobe.*` import in `source`, the
    text of module `module`: relative imports resolved, imports inside functions
    included, and `from cudaprobe.probe import tracer` read as cudaprobe.probe.tracer."""
    package = module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
    return [(line, m) for line, m in found if m == "cudaprobe" or m.startswith("cudaprobe.")]


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def _against(source: str, module: str) -> list[str]:
    """The imports of `module` that run against the data path."""
    own = _layer(module)
    bad = []
    for line, target in _imports(source, module):
        later = _layer(target)
        if later is None:
            continue
        # cli.py may import anything; errors and the package's __init__ nothing
        if (own is None and module in ("cudaprobe.errors", "cudaprobe")) or (
                own is not None and later > own):
            bad.append(f"{module}:{line} imports {target}")
    return bad


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_subpackage_says_what_it_owns_and_may_import():
    for layer in LAYERS:
        init = PACKAGE / layer / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, f"{init} has no docstring"
        assert "import" in doc, f"{init}'s docstring does not say what it may import"


def _may_import(layer: str) -> set[str]:
    """The subpackages that `layer`'s __init__.py says it may import (`May import:
    a, b.` or `every other subpackage`); the bottom imports none."""
    doc = ast.get_docstring(ast.parse((PACKAGE / layer / "__init__.py").read_text())) or ""
    said = re.search(r"May import:(.*?)(?:\.\s|\.$|$)", doc, re.S)
    if said is None:
        return set()
    if "every other subpackage" in said.group(1):
        return set(LAYERS) - {layer}
    return set(re.findall(r"\b[a-z]+\b", said.group(1))) & set(LAYERS)


def test_what_each_subpackage_may_import_runs_one_way():
    for layer in LAYERS:
        later = _may_import(layer) - set(LAYERS[:LAYERS.index(layer)])
        assert not later, f"{layer} says it may import {sorted(later)}, after it"
    assert _may_import("output") == {"analysis", "decode", "doctor", "probe", "targets",
                                     "catalogue"}
    assert _may_import("catalogue") == set()


def _beyond(source: str, module: str) -> list[str]:
    """The imports of `module` (in a subpackage) of subpackages its __init__.py
    does not name."""
    layer = module.split(".")[1]
    allowed = _may_import(layer) | {layer}
    return [f"{module}:{line} imports {target}"
            for line, target in _imports(source, module)
            if _layer(target) is not None and target.split(".")[1] not in allowed]


def test_each_subpackage_imports_only_what_it_says():
    beyond = []
    for layer in LAYERS:
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            beyond += _beyond(path.read_text(), _module_name(path))
    assert not beyond, "imports beyond what __init__.py says:\n" + "\n".join(beyond)


def test_an_import_beyond_the_declaration_is_found():
    # decode comes after doctor, yet does not say it may import it
    assert _beyond("from cudaprobe.doctor.checks import OK\n", "cudaprobe.decode.calls")
    assert not _beyond("from cudaprobe.doctor.checks import OK\n", "cudaprobe.output.x")
    assert not _beyond("from cudaprobe.decode import calls\n", "cudaprobe.decode.records")


def test_few_modules_at_the_top():
    top = {p.name for p in PACKAGE.glob("*.py")}
    assert len(top) <= MAX_TOP_MODULES, sorted(top)


def test_imports_run_one_way_along_the_data_path():
    against = []
    for path in sorted(PACKAGE.rglob("*.py")):
        against += _against(path.read_text(), _module_name(path))
    assert not against, "imports against the data path:\n" + "\n".join(against)


def test_an_import_against_the_direction_is_found():
    # each form of import, from probe/ to sessions/, relative and absolute
    for text in ("from cudaprobe.sessions.trace import TraceSession\n",
                 "from ..sessions import trace\n",
                 "def f():\n    import cudaprobe.sessions.run\n"):
        assert _against(text, "cudaprobe.probe.tracer"), text
    assert not _against("from cudaprobe.catalogue import functions\n", "cudaprobe.probe.tracer")
    assert _against("from cudaprobe.probe import tracer\n", "cudaprobe.errors")
