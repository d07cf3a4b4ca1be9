"""`ascend-node launch`: what a pipeline step needs to run one Volcano Job to its end.

The seed's platform (cube-studio) runs a launcher in one pipeline task's pod: it reads the
platform's `KFJ_*` environment, deletes an earlier run's Jobs, creates the Job, follows it
and exits with its outcome (github.com/tencentmusic/cube-studio at 852a7bd2,
job-template/job/volcano/launcher.py; docs/launch.md). Each decision is a
pure function here — the environment read (`platform_env`), the earlier run (`earlier_run`),
the verdict (`verdict`), the log bookkeeping (`log_follow`) — so each is tested by a table;
the command that wires them to the API client stays thin.
"""
