"""Plotly.js comes from the installed plotly package through the frontend's static finder:
no CDN, no vendored copy, the same version as the Python package."""

from pathlib import Path

import plotly
from django.contrib.staticfiles import finders
from django.core.management import call_command

from frontend.staticfinders import STATIC_PATH

PACKAGE_FILE = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


def test_the_finder_serves_the_packages_plotly_bundle():
    assert finders.find(STATIC_PATH) == str(PACKAGE_FILE)
    assert finders.find("frontend/vendor/other.js") is None


def test_collectstatic_copies_the_bundle_byte_for_byte(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", interactive=False, verbosity=0)
    assert (tmp_path / STATIC_PATH).read_bytes() == PACKAGE_FILE.read_bytes()


def test_pages_load_plotly_from_static_not_a_cdn():
    base = Path(__file__).resolve().parents[2] / "frontend" / "templates" / "frontend" / "base.html"
    html = base.read_text()
    assert "{% static 'frontend/vendor/plotly.min.js' %}" in html
    assert "cdn" not in html.lower() and "https://" not in html
