"""mbexp: ablation experiments for the parts of a modern decoder block."""

__version__ = "0.1.0"
