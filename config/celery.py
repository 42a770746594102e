"""The Celery application: broker and result backend are ``REDIS_URL`` (see settings)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("wattflow")
# All CELERY_* settings live in config/settings.py (beat schedule included, as code).
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
