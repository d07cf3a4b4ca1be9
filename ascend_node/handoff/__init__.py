"""Steps 5-8 of the chain: what the agent hands the server once the table is final.

Outputs on disk (`outputs`), the wheel (`install`), the vendor environment (`setenv`),
MindIE's `config.json` (`mindie_config`, checked by `mindie_startup`), the launcher's plan
(`launchers`, `hostnic`) and the `exec` itself (`exec`).
"""
