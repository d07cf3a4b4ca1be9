# syntax=docker/dockerfile:1
# MindIE server image with ascend-node as its entrypoint.
#
# The agent runs first in every pod of the job (identity, NPUs, rendezvous, rank table,
# env, atb_llm, config.json), then execs the MindIE daemon (or the command given as the
# container's args) under tini. Nothing is downloaded: the agent and its dependencies come
# from a wheelhouse in the build context (scripts/wheelhouse), tini from the context too.
# See images/README.md for the build context layout and the tini options.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

# The interpreter MindIE itself uses in the base image (the wheelhouse must match its
# CPython version and CPU architecture).
ARG PYTHON=python3
# Where tini comes from:
#   context - a static tini binary in the build context, at TINI_PATH (default ./tini)
#   apt     - `apt-get install tini` from the image's configured (e.g. mirror) sources
#   base    - the base image already has tini on PATH
ARG TINI_FROM=context
ARG TINI_PATH=tini

USER root
# The wildcard after TINI_PATH lets the COPY succeed when no tini file is in the context
# (TINI_FROM=apt|base): a COPY with at least one matching source does not fail.
COPY wheelhouse/ ${TINI_PATH}* /tmp/wheelhouse/
RUN set -eu; \
    tini_file="/tmp/wheelhouse/$(basename "$TINI_PATH")"; \
    case "$TINI_FROM" in \
      context) \
        if [ ! -f "$tini_file" ]; then \
          echo "TINI_FROM=context but '$TINI_PATH' is not in the build context" >&2; exit 1; \
        fi; \
        install -m 0755 "$tini_file" /usr/local/bin/tini ;; \
      apt) \
        apt-get update; \
        apt-get install -y --no-install-recommends tini; \
        rm -rf /var/lib/apt/lists/* ;; \
      base) ;; \
      *) echo "TINI_FROM must be context, apt or base, not '$TINI_FROM'" >&2; exit 1 ;; \
    esac; \
    tini --version; \
    PIP_BREAK_SYSTEM_PACKAGES=1 "$PYTHON" -m pip install --no-cache-dir --no-index \
      --find-links /tmp/wheelhouse ascend-node; \
    scripts="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"; \
    if ! command -v ascend-node >/dev/null 2>&1; then \
      ln -s "$scripts/ascend-node" /usr/local/bin/ascend-node; \
    fi; \
    ascend-node --help >/dev/null; \
    rm -rf /tmp/wheelhouse

# tini is PID 1: it forwards signals and reaps zombies for the server; ascend-node is the
# pre-start hook that execs the server, so the server's exit code is the container's.
ENTRYPOINT ["tini", "--", "ascend-node", "boot", "--"]
# No command: `boot` then execs the MindIE daemon. An inherited CMD (e.g. bash) would be
# passed to `boot` as the program to run instead, so reset it.
CMD []
