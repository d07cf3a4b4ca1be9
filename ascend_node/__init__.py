"""ascend-node: the container-side bootstrap agent for multi-node Ascend NPU jobs."""

__version__ = "0.1.0"
