"""Serve Plotly.js from the installed ``plotly`` Python package, not from a CDN.

The ``plotly`` wheel ships the matching ``plotly.min.js`` in its package data; this finder
exposes it as the static file ``frontend/vendor/plotly.min.js``. ``runserver``/whitenoise
(with finders, in DEBUG) serve it directly and ``collectstatic`` copies it into
``STATIC_ROOT`` for production, so the repository vendors no 4 MB bundle and the JS always
matches the Python package's version.
"""

from __future__ import annotations

from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

STATIC_PATH = "frontend/vendor/plotly.min.js"
PACKAGE_DATA = Path(plotly.__file__).resolve().parent / "package_data"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(PACKAGE_DATA))

    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        if path != STATIC_PATH:
            # Like Django's own finders: an empty list (not None) when nothing matches, which
            # django.contrib.staticfiles.finders.find skips.
            return []
        match = str(PACKAGE_DATA / "plotly.min.js")
        return [match] if find_all else match

    def list(self, ignore_patterns):
        # collectstatic: (path inside STATIC_ROOT, storage that opens the source by that path).
        yield STATIC_PATH, _RenamedStorage(self.storage)


class _RenamedStorage(FileSystemStorage):
    """Opens ``frontend/vendor/plotly.min.js`` as the package's ``plotly.min.js``."""

    def __init__(self, inner: FileSystemStorage):
        super().__init__(location=inner.location)

    def path(self, name):
        return super().path("plotly.min.js" if name == STATIC_PATH else name)

    def open(self, name, mode="rb"):
        return super().open("plotly.min.js" if name == STATIC_PATH else name, mode)
