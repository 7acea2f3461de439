"""The documentation site builds with `mkdocs build --strict`: every page is in the nav,
every link and anchor resolves (mkdocs.yml's `validation` makes each of these a warning,
and --strict makes a warning fail the build). A planted broken link, broken anchor and
page left out of the nav must each fail the same build, so the check cannot pass by
checking nothing. The README and CONTRIBUTING.md are
not pages of the site; their relative links are checked here too."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")

pytest.importorskip("mkdocs")
pytest.importorskip("material")


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner, not a finding
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          check=False, cwd=root, env=env, capture_output=True, text=True, timeout=240)


def test_the_site_builds_strictly(tmp_path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("planted, named", [
    ("See [a page that is not there](no-such-page.md).", "no-such-page.md"),
    ("See [an anchor that is not there](index.md#no-such-anchor).", "no-such-anchor"),
    (None, "orphan.md"),                       # a page that the nav leaves out
])
def test_a_broken_link_fails_the_build(tmp_path, planted, named):
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    if planted is None:
        (copy / "docs" / named).write_text("# Not in the nav\n")
    else:
        home = copy / "docs" / "index.md"
        home.write_text(home.read_text() + f"\n{planted}\n")
    done = build(copy, tmp_path / "site")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert named in output, output


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md"])
def test_the_relative_links_of_a_top_level_file_resolve(name):
    text = (ROOT / name).read_text()
    missing = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (ROOT / path).exists():
            missing.append(target)
    assert not missing, f"{name} links to files that do not exist: {missing}"
