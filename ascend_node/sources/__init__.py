"""Steps 3-4 of the chain: where the rank table comes from.

`base` holds the shape every source has (`TableSource.build` returns a `TableResult`);
`volume` is the shared-volume rendezvous (over `ascend_node.rendezvous`), `mindcluster`
waits for MindCluster's `hccl.json` and `mindcluster_file` converts it (pure).
"""
