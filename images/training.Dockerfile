# syntax=docker/dockerfile:1
# Training image (MindSpore / MindFormers / torch_npu) with ascend-node as its entrypoint.
#
# The agent builds the rank table and the environment (RANK_TABLE_FILE, MASTER_IP,
# WORLD_SIZE, ...) and then execs the launcher given as the container's args, e.g.
#   args: ["bash", "-c", "exec msrun --worker_num=$WORLD_SIZE --master_addr=$MASTER_IP ..."]
# Nothing is downloaded: the agent comes from a wheelhouse in the build context
# (scripts/wheelhouse), tini from the context too. See images/README.md.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

# The interpreter of the training framework (the wheelhouse must match its CPython
# version and CPU architecture).
ARG PYTHON=python3
# Where tini comes from: context (static binary at TINI_PATH), apt, or base.
ARG TINI_FROM=context
ARG TINI_PATH=tini

USER root
# The wildcard after TINI_PATH lets the COPY succeed when no tini file is in the context.
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

ENTRYPOINT ["tini", "--", "ascend-node", "boot", "--"]
# The launcher is the pod's args; an inherited CMD would be exec'd instead, so reset it.
# Without args, `boot` execs the MindIE daemon, which a training image does not have
# (exit 127, naming the missing program).
CMD []
