"""The threat model (docs/operations/security.md) names, for every finding of the security
review, the test that proves its fix: each named test exists in tests/security/, and no
finding is without one."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "operations" / "security.md"
FINDINGS = 15


def _rows() -> dict[int, str]:
    text = PAGE.read_text()
    table = text.split("## Findings and their tests", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].isdigit():
            rows[int(cells[0])] = cells[-1]
    return rows


def _named_tests(cell: str) -> list[tuple[str, str]]:
    """(file, test) pairs; `::test` alone continues the file named before it."""
    named, current = [], None
    for ref in re.findall(r"`([^`]*::test_\w+)`", cell):
        path, test = ref.split("::")
        current = path or current
        assert current, f"a test named without its file: {ref}"
        named.append((current, test))
    return named


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")}


def test_every_finding_has_a_row_that_names_tests_that_exist():
    rows = _rows()
    assert sorted(rows) == list(range(1, FINDINGS + 1))
    for number, cell in rows.items():
        named = _named_tests(cell)
        assert named, f"finding {number} names no test"
        for file, test in named:
            path = ROOT / "tests" / "security" / file
            assert path.is_file(), f"finding {number}: no tests/security/{file}"
            assert test in _tests_in(path), f"finding {number}: no {test} in {file}"
