"""A training run: its configuration, assembly, loop, checkpoints, logs and processes.

Built on the device core, the strategies, the models, the data pipeline and the cost
model (which projects each logged step's time). Imports nothing from `analysis` or `cli`
(tests/test_layers.py). Nothing is imported here: `jaxsel.training.early_stop` must load
without JAX.
"""
