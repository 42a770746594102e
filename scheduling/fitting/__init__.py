"""Offline fitting of the performance catalog and the goodput curves to the measurements in
``data/perf/`` (scipy, matplotlib). Not part of the pure core: the core only predicts from
what these fits wrote (``scheduling/core/perf_catalog.json``, ``goodput_curves.json``);
an import contract in ``pyproject.toml`` keeps it that way."""
