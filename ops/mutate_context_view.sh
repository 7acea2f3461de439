#!/usr/bin/env bash
# Mutation score of view assembly (assemble_view and its helpers, app/domain/context/view.py).
# Runs outside `make test`: it takes ~15 minutes on two cores. The file is mutated in a
# scratch copy; it holds view assembly only, and the names below select its mutants.
# Usage: ops/mutate_context_view.sh [python]   (needs mutmut==3.8.1 in that python)
set -euo pipefail
PY="${1:-.venv/bin/python}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/tests"
cp -r "$ROOT/app" "$WORK/"
cp -r "$ROOT/tests/unit" "$ROOT/tests/data" "$ROOT/tests/__init__.py" "$ROOT/tests/conftest.py" "$WORK/tests/"
cat > "$WORK/setup.cfg" <<'CFG'
[mutmut]
source_paths = app
only_mutate = app/domain/context/view.py
pytest_add_cli_args_test_selection =
    tests/unit/test_context_view.py
    tests/unit/test_context_relevant_view.py
    tests/unit/test_context_domain.py
CFG
printf '[pytest]\nasyncio_mode = auto\n' > "$WORK/pytest.ini"
VIEW=(
  'app.domain.context.view.x_assemble_view__mutmut_*' 'app.domain.context.view.x__select_facts__mutmut_*'
  'app.domain.context.view.x_fact_priority__mutmut_*' 'app.domain.context.view.x__recency__mutmut_*'
  'app.domain.context.view.x__facts_block__mutmut_*' 'app.domain.context.view.x__summary_content__mutmut_*'
  'app.domain.context.view.x__chunk_content__mutmut_*' 'app.domain.context.view.xǁContextViewǁ*'
  'app.domain.context.view.x__pinned__mutmut_*' 'app.domain.context.view.x__relevant_view__mutmut_*'
  'app.domain.context.view.x__stamped__mutmut_*'
  'app.domain.context.view.xǁViewItemǁ*'
)
cd "$WORK"
"$PY" -m mutmut run --max-children 2 "${VIEW[@]}" > run.log 2>&1 || true
"$PY" -m mutmut results --all true 2>/dev/null \
  | grep -E 'assemble_view|select_facts|fact_priority|recency|facts_block|summary_content|chunk_content|ContextView|ViewItem|_pinned|relevant_view|_stamped' \
  > results.txt || true
killed=$(grep -c ': killed' results.txt || true)
total=$(wc -l < results.txt)
echo "view assembly: $killed of $total mutants killed"
grep -v ': killed' results.txt || true
