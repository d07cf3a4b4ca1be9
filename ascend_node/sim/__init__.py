"""Simulation: the real agent as N local processes, with fake vendor tools.

Nothing here is on the production path: the agent never imports this package. It
exists for `ascend-node simulate`, the tests and the benchmarks, and fakes only what
cannot exist on a machine without NPUs (`hccn_tool`, `npu-smi`), printing the formats
captured from real devices (fixtures/hccn/).
"""
