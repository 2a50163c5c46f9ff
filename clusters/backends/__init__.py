"""Cluster backends: one protocol (base.py), three implementations (simulator, standalone,
kubernetes). Modules here import no Django, so they can be tested and run on their own."""
