"""Evaluations: sets of prompts with what a good answer must be, run against one version of a model.

models.py     eval sets, their items, runs and per-item results
scoring.py    the scorers: exact, contains, JSON schema, regular expression, a judge model's verdict
services.py   what staff do: import a set, start a run; and the run itself, item by item
tasks.py      the run as a Celery job
"""
