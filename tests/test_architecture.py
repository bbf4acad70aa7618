"""The codebase's shape, checked: module size, no import cycles, templates reached only through the
registry, knob records fully declared, no citations of documents outside the repository.

(The layering contracts themselves are import-linter's, in pyproject.toml, run by scripts/lint.sh.)
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
from pathlib import Path

import pytest

import tilec
from tilec.schedule import registry
from tilec.schedule.templates.base import Template

ROOT = Path(tilec.__file__).parent
MODULES = sorted(ROOT.rglob("*.py"))
MAX_LINES = 400


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules (one concept per module): {long}"


def test_no_import_cycles():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("tilec")
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(m: str) -> None:  # Tarjan's strongly connected components
        index[m] = low[m] = len(index)
        stack.append(m)
        for n in graph.find_modules_directly_imported_by(m):
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            component = []
            while True:
                n = stack.pop()
                component.append(n)
                if n == m:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert not cycles, f"modules that import each other: {cycles}"


def _template_name_comparisons(path: Path, names: set[str]) -> list[str]:
    """Comparisons (==, !=, in) with a template's name as a string literal, and dict literals keyed by one."""
    found = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        literals: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                literals += side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        elif isinstance(node, ast.Dict):
            literals += [k for k in node.keys if k is not None]
        for lit in literals:
            if isinstance(lit, ast.Constant) and isinstance(lit.value, str) and lit.value in names:
                found.append(f"{path.relative_to(ROOT)}:{lit.lineno}: {lit.value!r}")
    return found


# The tools on top name ops and benchmark cases ("attention") that share words with templates.
OUTSIDE_THE_COMPILER = ("bench", "cli", "cli.py", "demo.py", "ops", "nn.py")


def test_template_names_are_compared_only_in_the_registry():
    names = set(registry.TEMPLATES)
    compiler = [p for p in MODULES if p.relative_to(ROOT).parts[0] not in OUTSIDE_THE_COMPILER]
    found = [hit for p in compiler if p.name != "registry.py" for hit in _template_name_comparisons(p, names)]
    assert not found, "look templates up through tilec.schedule.registry instead: " + "; ".join(found)


@pytest.mark.parametrize("template", registry.TEMPLATES.values(), ids=lambda t: t.name)
def test_every_template_declares_itself(template: Template):
    assert template.name and template.kind in ("cpu", "gpu", "any")
    assert type(template).match is not Template.match and type(template).build is not Template.build
    if template.tunable:
        assert template.knob_type is not None and type(template).space is not Template.space
    if template.knob_type is not None:
        assert dataclasses.is_dataclass(template.knob_type)
        for f in dataclasses.fields(template.knob_type):
            assert "doc" in f.metadata, f"{template.name}.{f.name}: declare it with templates.knobs.knob()"
            if f.type in (int, "int"):
                assert f.metadata["lo"] is not None and f.metadata["hi"] is not None, f"{template.name}.{f.name}"
        template.knobs_of(())  # the defaults pass the record's own bounds


def test_no_file_cites_documents_outside_the_repository():
    pattern = re.compile(r"DESIGN\.md|STYLE\.md|\.\./shared")
    repo = ROOT.parent
    files = [*MODULES, *(repo / "tests").glob("*.py"), *(repo / "docs").glob("*.md"), *(repo / "examples").glob("*.py"),
             *(repo / "scripts").glob("*"), repo / "README.md", repo / "BENCHMARKS.md", repo / "pyproject.toml"]
    cited = [f"{p.relative_to(repo)}:{n}" for p in files if p.exists()
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line) and p != Path(__file__)]
    assert not cited, cited
