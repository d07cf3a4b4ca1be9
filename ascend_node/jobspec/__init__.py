"""The Volcano Jobs ascend-node renders, once, for `manifest` and `launch` alike (pure).

`manifest` prints a Job; `launch` submits the same Job (issue 39): one renderer, so a Job a
user reviewed with `manifest` is the Job `launch` creates. What each module holds:

- `request`: every `manifest` option as one value (`JobRequest`), checked across options, and
  `render` → the objects in apply order (`Rendered`) with their YAML or JSON text;
- `skeleton`: what every Job kind shares (the Job's metadata and spec head, the pod's head:
  restart policy, user, node selector, anti-affinity);
- `job`: a plain job (`mindie`, `training`): `ManifestParams`, its checks, its tasks, the YAML
  emitter;
- `pd_job`: a PD-disaggregated MindIE service (`mindie-pd`) and its ConfigMap;
- `mounts`: the node's vendor tools a pod mounts, and paths no option may mount over;
- `launcher_rbac`: the launcher's own ServiceAccount, Role and RoleBinding.
"""
