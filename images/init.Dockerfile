# syntax=docker/dockerfile:1
# Init-container image: runs `ascend-node ranktable` and exits 0 once this node holds the
# final rank table. The files land in --state-dir (ASCEND_NODE_STATE_DIR), which the pod
# mounts as an emptyDir shared with the server container; the server then sources
# $ASCEND_NODE_STATE_DIR/source_mul_env.sh before it starts.
#
# Small on purpose: it needs Python and, at run time, the host's hccn_tool (mounted from
# /usr/local/Ascend/driver) - not CANN or MindIE. BASE_IMAGE must be glibc-based and its
# CPython version and CPU architecture must match the wheelhouse.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG PYTHON=python3

USER root
COPY wheelhouse/ /tmp/wheelhouse/
RUN set -eu; \
    PIP_BREAK_SYSTEM_PACKAGES=1 "$PYTHON" -m pip install --no-cache-dir --no-index \
      --find-links /tmp/wheelhouse ascend-node; \
    scripts="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"; \
    if ! command -v ascend-node >/dev/null 2>&1; then \
      ln -s "$scripts/ascend-node" /usr/local/bin/ascend-node; \
    fi; \
    ascend-node --help >/dev/null; \
    rm -rf /tmp/wheelhouse

# Mount an emptyDir here and the same emptyDir in the server container.
ENV ASCEND_NODE_STATE_DIR=/run/ascend-node
# No tini: the agent is a short-lived PID 1 that handles SIGTERM itself (exit 143) and
# waits for every tool it runs, so there is nothing to forward or reap.
ENTRYPOINT ["ascend-node", "ranktable"]
CMD []
