"""The learning rate of SelSync's authors' image classifiers, step by step, given which
steps synchronized: a transcription of `selsync_py3/selsync/selsync_imgclassifier.py`
(`start_training`, lines 178-265 of the one public commit), independent of jaxsel's code.

    processed_samples = 0; last_epoch = None; lr = base
    every step: the optimizer steps at the current lr (opt.step(), line 241), after
        processed_samples += b * N if the step synchronized else b   (lines 218, 232)
        epoch = processed_samples // dataset_size                    (line 243)
        if epoch != last_epoch and epoch is a milestone:             (lines 254-265)
            lr *= gamma; last_epoch = epoch
So the step whose samples reach a milestone epoch still runs at the old rate, and the
next one at the new.
"""
from __future__ import annotations

import numpy as np


def authors_learning_rates(synced, base: float, gamma: float, milestones, batch: int, replicas: int,
                           dataset_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(the learning rate each step ran at, the epoch after each step) for the steps'
    `synced` flags, in float64 as PyTorch keeps the rate."""
    processed, last_epoch, lr = 0, None, float(base)
    rates, epochs = [], []
    for s in synced:
        rates.append(lr)
        processed += batch * replicas if s else batch
        epoch = processed // dataset_size
        if epoch != last_epoch and epoch in set(milestones):
            lr *= gamma
            last_epoch = epoch
        epochs.append(epoch)
    return np.asarray(rates), np.asarray(epochs)
