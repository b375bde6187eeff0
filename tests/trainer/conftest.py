"""Trainer tests: every `tf.keras` is tf_keras, as in the trainer (set before TF loads)."""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
