.PHONY: test lint bench
test:
	python3 -m pytest -q -n auto
lint:
	ruff check cgprof tests scripts && mypy cgprof
bench:
	python3 scripts/bench_analyze.py
