# The README's two commands. Both do all set-up (scripts/bootstrap.sh) on a fresh machine.
SHELL := /bin/bash
PYTEST_ARGS ?=

# The Zeus power-limit fits have local minima that OpenBLAS's per-CPU kernels choose between
# differently (docs/perf_models.md): the shipped catalog is what the Haswell kernels give.
ifeq ($(shell uname -m),x86_64)
export OPENBLAS_CORETYPE ?= Haswell
endif

.PHONY: run test bootstrap

bootstrap:
	bash scripts/bootstrap.sh

## make run: set up, load the demo data (prints logins), collect static files (so pages work
## with DJANGO_DEBUG=false too), start web + worker + beat (+ agents). WATTFLOW_DEMO_SLURM=1:
## the same on a local Slurm (scripts/demo_slurm.sh: needs root, stops that Slurm at the end)
run: bootstrap
	mkdir -p "$${WATTFLOW_VAR_DIR:-var}"
	.venv/bin/python manage.py seed_demo
	.venv/bin/python manage.py collectstatic --no-input -v 0
	if [ "$${WATTFLOW_DEMO_SLURM:-0}" = 1 ]; then exec bash scripts/demo_slurm.sh run; \
	else exec .venv/bin/honcho -f Procfile.dev start; fi

## make test: set up (incl. chromium for browser tests), then run pytest; PYTEST_ARGS passes on
test:
	bash scripts/bootstrap.sh --test
	@set +e; .venv/bin/pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "wattflow: pytest collected no tests"; exit 0; fi; \
	exit $$rc
