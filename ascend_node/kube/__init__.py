"""A small client of the Kubernetes API: the door to the rendezvous without a shared volume.

Chosen by measurement over the official `kubernetes` client and `lightkube`
(docs/benchmarks.md, "The Kubernetes API client"): the standard library's `http.client` and
`ssl` with the ServiceAccount's token cost a pod a few milliseconds and no third-party
package, where the others cost hundreds of milliseconds of imports and thousands of modules.
The agent needs a handful of calls on two resources (get, list, create, replace, delete and
watch of ConfigMaps; get of its own Pod), so a general client buys nothing it uses.

- `config`: where the API server is and how to prove who we are: in the pod from the
  ServiceAccount's files, outside it from a kubeconfig.
- `errors`: one exception per outcome the callers decide on (403 names the Role rule that
  would grant the call; 409 Conflict apart from 409 AlreadyExists, for compare-and-set).
- `client`: requests with time-outs, JSON in and out, and watches as generators.
- `mirror`: the objects a selector matches, kept current by a list and then watches.

A pod imports this package only when `--rendezvous kube` is chosen (`chain/kube_table.py`): a
volume pod's imports are pinned in tests/pod_imports.json, an API pod's in
tests/test_kube_rendezvous.py.
"""
