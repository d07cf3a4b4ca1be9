"""Pre-flight: what would break HCCL, caught before the server loads its weights.

Two stages, both under `--preflight strict|warn|off` (`policy`):

- at the rendezvous, every member publishes its devices' link, net health and TLS switch
  (`gather`), and node 0 judges them with the membership (`judge`, pure);
- in `boot`, after the table, every node pings a bounded sample of peer devices over
  RoCE (`reach`), node 0 gathers every node's results into one verdict, and an
  unreachable pair ends every node with 5.
"""
