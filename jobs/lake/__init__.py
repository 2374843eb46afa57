"""The lake: the data contract, all Delta I/O, the session helpers, the GPU plan collector."""
