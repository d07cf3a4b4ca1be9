"""Pre-flight: what would break HCCL, caught before the server loads its weights.

Two stages, both under `--preflight strict|warn|off` (`policy`):

- at the rendezvous, every member publishes its devices' link, net health and TLS switch,
  and its node-wide facts — who holds its NPUs, HCCL's host ports, the HCCL settings and
  CANN/driver versions — (`gather`), and node 0 judges them with the membership (`judge`,
  `agree`, pure);
- in `boot`, after the table, every node pings a bounded sample of peer devices over
  RoCE (`reach`), node 0 gathers every node's results into one verdict, and an
  unreachable pair ends every node with 5.
"""
