"""The resources the agent touches, and the URL path and RBAC words of each call on them.

A call is named the way RBAC names it (verb, API group, resource, namespace), because that is
what a user must grant when the API server answers 403: the message the agent prints and the
Role that `manifest` renders are built from the same `Call`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional
from urllib.parse import quote, urlencode


@dataclass(frozen=True)
class Resource:
    """A namespaced resource: ``group`` "" is the core group (``/api/v1``)."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str, name: Optional[str] = None,
             query: Optional[dict[str, str]] = None) -> str:
        """``/api/v1/namespaces/<ns>/configmaps[/<name>][?query]``, each segment quoted."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        out = f"{root}/namespaces/{quote(namespace, safe='')}/{self.plural}"
        if name is not None:
            out += "/" + quote(name, safe="")
        if query:
            out += "?" + urlencode(sorted(query.items()))
        return out


CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
PODS = Resource("", "v1", "pods", "Pod")
# A pod's log, a subresource: RBAC names it `pods/log` (read with the verb get).
PODS_LOG = Resource("", "v1", "pods/log", "Pod")


@dataclass(frozen=True)
class Call:
    """One request in RBAC's words: ``verb`` is get, list, watch, create, update, delete."""

    verb: str
    resource: Resource
    namespace: str
    name: Optional[str] = None

    def describe(self) -> str:
        """``create configmaps "x" in namespace "ns"``: what a message names."""
        target = f' "{self.name}"' if self.name else ""
        return f'{self.verb} {self.resource.plural}{target} in namespace "{self.namespace}"'

    def rule(self) -> str:
        """The Role rule that grants this call, as it is written in a Role's YAML."""
        return (f'apiGroups: ["{self.resource.group}"], resources: ["{self.resource.plural}"], '
                f'verbs: ["{self.verb}"]')
