"""Renderers: one module per output format (text, json, html), each taking analysis results.

Rendering never recomputes metrics; figures for notebooks are in :mod:`cgprof.report.figures`.
"""
