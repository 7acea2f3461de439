# The two commands of the README: `make run` and `make test`. Both install what is missing.
.PHONY: setup run test lint bench schema clean mutate docs docs-serve

setup:
	@bash ops/setup.sh

run: setup
	.venv/bin/agentrm serve --host 127.0.0.1 --port 8000

test: setup
	.venv/bin/python -m pytest -q -p no:cacheprovider

# The static checks alone (make test runs them too, as tests/unit/test_static_checks.py).
lint: setup
	.venv/bin/ruff check app bench clients tests
	.venv/bin/mypy

bench: setup
	.venv/bin/agentrm bench all

schema: setup
	.venv/bin/agentrm schema > schema/agentrm.graphql

# Mutation testing of the scheduling core, outside `make test` (docs/benchmarks/mutation-testing.md).
# What is mutated and which tests run against each mutant: [tool.mutmut] in pyproject.toml.
# The survivors are listed at the end; `.venv/bin/mutmut show NAME` prints one's diff.
mutate: setup
	.venv/bin/python -m pip install -q -e ".[test,mutation]"
	rm -rf mutants
	.venv/bin/mutmut run --max-children 2 > .agentrm/mutmut-run.log 2>&1 || (tail -c 2000 .agentrm/mutmut-run.log; exit 1)
	.venv/bin/mutmut export-cicd-stats > /dev/null
	@.venv/bin/python -c 'import json; s = json.load(open("mutants/mutmut-cicd-stats.json")); \
	  k = s["killed"] + s["timeout"]; \
	  print("mutation score: %d/%d killed (%.1f%%), %d survived, %d not covered" \
	        % (k, s["total"], 100.0 * k / s["total"], s["survived"], s["no_tests"]))'
	@.venv/bin/mutmut results
	@bash ops/mutate_context_view.sh .venv/bin/python

# The documentation site (mkdocs.yml): built into site/, or served with live reload.
docs: setup
	.venv/bin/python -m mkdocs build --strict -d site

docs-serve: setup
	.venv/bin/python -m mkdocs serve

clean:
	rm -rf .venv .agentrm mutants
