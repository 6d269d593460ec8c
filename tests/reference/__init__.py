"""Independent NumPy transcriptions of issue 25's definitions ("Beyond the anchors").

Plain NumPy in float64, no jaxsel and no JAX: what jaxsel's implementation is tested
against. Each module is one topic; its docstring states the exact rule, with every choice
made where the issue's definition was open.

  linreg    a tiny linear-regression problem (per-replica data, full-batch gradients)
  trees     lists of tensors per replica: copies, zeros, the replica mean
  optim     optax's sgd (trace, Nesterov), adam and adamw, transcribed
  codecs    top-k and 1-bit sign payloads with error feedback; the parameter-averaging
            payload rule (the change since the last synchronized parameters)
  robust    Krum, Multi-Krum and Bulyan, matching Flower's aggregate_krum / aggregate_bulyan
  outer     DiLoCo's outer step with nesterov / sgd / adam / adamw outer optimizers
  triggers  SelSync's significance rule with max_local=K; Accordion's adaptive period
  desloc    separate averaging periods for parameters and optimizer state (DES-LOC)
  demo      DeMo (Peng et al. 2024): chunked DCT, top-k, sign of the aggregate

Tests import it as `from reference import codecs` (tests/ is on sys.path under pytest).
"""
