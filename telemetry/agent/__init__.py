"""The Wattflow node agent: NVML (or simulated) telemetry and job execution over HTTP.

It talks to the server only through the agent API (``telemetry/api``); it imports no Django,
so a GPU node needs just ``requests`` and ``nvidia-ml-py``. See ``__main__.py`` for the
command line, ``jobs.py`` for the checkpoint convention and ``spool.py`` for delivery.
"""
