# The two commands of the README: `make run` and `make test`. Both install what is missing.
.PHONY: setup run test bench schema clean

setup:
	@bash ops/setup.sh

run: setup
	.venv/bin/agentrm serve --host 127.0.0.1 --port 8000

test: setup
	.venv/bin/python -m pytest -q -p no:cacheprovider tests

bench: setup
	.venv/bin/agentrm bench all

schema: setup
	.venv/bin/agentrm schema > schema/agentrm.graphql

clean:
	rm -rf .venv .agentrm
