"""A pod that fails before its discovery tells its peers through the Kubernetes API.

The volume's `chain.table.failures_told_to_peers` for `--rendezvous kube`: a failure found
before discovery (an output path that cannot be written, `handoff.placement`; a `boot`
option refused) is published as one found in discovery is (`chain.kube_table`): a failure
document in this pod's slot of node 0's attempt, or, at node 0, an attempt opened and
aborted with the cause. The peers then exit 5 within seconds naming this pod and its cause,
not 4 at their `--timeout` naming it missing (docs/rendezvous.md, "A pod that fails before
its discovery").

Imported only for `--rendezvous kube` (tests/pod_imports.json), like `chain.kube_table`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Optional

from ascend_node.chain.kube_table import api_client
from ascend_node.chain.table import table_source
from ascend_node.discover.hostinfo import identify
from ascend_node.discover.identity import NodeIdentity
from ascend_node.errors import AscendNodeError
from ascend_node.kube.client import Client
from ascend_node.rendezvous.kube_layout import JobIdentity, job_identity
from ascend_node.rendezvous.kube_participant import node0_failure, publish_failure
from ascend_node.settings import Settings

log = logging.getLogger("ascend_node")


@contextlib.contextmanager
def failures_told_to_peers(settings: Settings, environ: Mapping[str, str],
                           started: float) -> Iterator[None]:
    """Publish an `AscendNodeError` raised inside through the API; raised on unchanged."""
    try:
        yield
    except AscendNodeError as exc:
        tell_peers_of_failure(settings, environ, started, exc)
        raise


def tell_peers_of_failure(settings: Settings, environ: Mapping[str, str], started: float,
                          exc: AscendNodeError) -> Optional[str]:
    """Publish `exc` as this pod's failure when it can say who it is and where its peers
    meet: a pod whose identity, ServiceAccount or job variables are themselves the failure
    has no slot to publish into, and one whose table comes from MindCluster's file has no
    peers waiting. Never raises; bounded by the pod's deadline (`kube_participant`'s own
    bounds: up to 5 s for a follower, the abort grace at node 0). The attempt id, or None."""
    try:
        identity = identify(environ)
        if table_source(settings).source != "volume":
            return None
        client = api_client(environ)
        job = job_identity(environ, client.namespace)
    except AscendNodeError as why:
        log.debug("published no failure: %s", why.cause)
        return None
    try:
        return publish_local_failure(client, job, settings.run_id or job.name, identity,
                                     exc.cause, started + settings.timeout)
    finally:
        client.close()


def publish_local_failure(client: Client, job: JobIdentity, run_id: str,
                          identity: NodeIdentity, cause: str, deadline: float
                          ) -> Optional[str]:
    """Node 0 opens and aborts an attempt; a follower leaves a failure document in its slot
    (waiting up to 5 s for node 0's attempt). The attempt id used, or None."""
    if identity.global_index == 0:
        aid = node0_failure(client, job, run_id, identity, cause, deadline)
    else:
        aid = publish_failure(client, job, run_id, identity, cause,
                              max(0.0, min(5.0, deadline - time.monotonic())))
    if aid:
        log.info("published this node's failure into attempt %s", aid)
    return aid
