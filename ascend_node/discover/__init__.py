"""Steps 1-2 of the chain: who this pod is and which NPUs (with which RoCE IPs) it holds.

Pure parsers and checks (`identity`, `devices`' parsers, `netcheck`, `superpod`) beside the
doors that ask the host (`hostinfo`, `devices.query_ips`, `hccn`, `mounts`).
"""
