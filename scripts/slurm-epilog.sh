#!/bin/sh
# Slurm job epilog for nodes that run the LLC stack (slurm.conf: Epilog=PATH/slurm-epilog.sh).
# A task killed with SIGKILL cannot remove its endpoints' live-statistics pages
# (/dev/shm/llc-stack/PID.N.stat); its sockets, XDP links and buffer pools go with the
# process, those pages stay until the next endpoint of the node opens. This removes them
# when the job ends. slurmd runs it as root on every node of the job, with a bare
# environment: LLC_STAT names the llc-stat binary when it is not in the PATH below.
PATH=/usr/local/bin:/usr/bin:/bin:$PATH
exec "${LLC_STAT:-llc-stat}" --remove-stale
