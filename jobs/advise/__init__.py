"""The advisor (``scripts/advise``): which profile and executor layout to run an input with, and how long each stage
will take, from a calibration the project measures (conf/calibration.json, ``advise --calibrate``).

Runs on the launching machine before any Spark application exists: it starts no Spark and reads the input only
through a small sample. ``sizing`` measures the input, ``layout`` does the executor arithmetic, ``calibration``
fits per-stage costs from measured runs, ``advisor`` puts them together.
"""
