#!/usr/bin/env bash
# A real single-node Slurm cluster on this Debian machine, from Debian packages (run as root):
#   munge       authentication between the Slurm daemons and commands
#   MariaDB     the accounting database
#   slurmdbd    job accounting: `sacct`, which snakemake-executor-plugin-slurm uses to see a job
#               finish, reads from it (without it jobs run but Snakemake never sees them end)
#   slurmctld   the controller, slurmd the compute daemon, on this host
# plus, in sacctmgr, the cluster, an account and its users. slurm.conf gets this machine's hostname
# and the CPUs and memory `slurmd -C` measures. No systemd and no cgroups needed (the daemons are
# started directly; proctrack/linuxproc, task/none), so it also works in a container.
#
#   workflow/cluster/slurm-single-node.sh          # install (apt) if needed, configure, start, check
#   workflow/cluster/slurm-single-node.sh stop     # stop slurmd, slurmctld, slurmdbd (pid files)
#
# Idempotent: a second run installs nothing, rewrites a configuration file only when its content
# changes (restarting that daemon), starts what is not running and submits the check job again.
# It refuses to overwrite a slurm.conf or slurmdbd.conf it did not write (a real cluster's).
# Settings (environment):
#   FEDBAYES_SLURM_CLUSTER    cluster name            (default: fedbayes)
#   FEDBAYES_SLURM_PARTITION  the one partition       (default: local)
#   FEDBAYES_SLURM_ACCOUNT    account for the users   (default: fedbayes)
#   FEDBAYES_SLURM_USERS      users of that account   (default: root and $SUDO_USER)
# Known good: Debian 12, Slurm 22.05.8, munge 0.5.15, MariaDB 10.11.
set -euo pipefail

CLUSTER=${FEDBAYES_SLURM_CLUSTER:-fedbayes}
PARTITION=${FEDBAYES_SLURM_PARTITION:-local}
ACCOUNT=${FEDBAYES_SLURM_ACCOUNT:-fedbayes}
read -r -a USERS <<< "${FEDBAYES_SLURM_USERS:-root ${SUDO_USER:-}}"
PACKAGES=(munge mariadb-server slurmdbd slurmctld slurmd slurm-client)

ETC=/etc/slurm
RUN=/run/slurm
STATE=/var/lib/slurm
LOGS=/var/log/slurm

say() { echo "[slurm-single-node] $*"; }
die() { echo "[slurm-single-node] ERROR: $*" >&2; exit 1; }

# pid of a daemon we started, from its pid file, if that process is alive and is that daemon
running() {  # running NAME PIDFILE
    local pid
    [ -s "$2" ] || return 1
    pid=$(cat "$2")
    [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$1" ] && echo "$pid"
}

stop_daemon() {  # stop_daemon NAME PIDFILE
    local pid _
    pid=$(running "$1" "$2") || return 0
    say "stopping $1 (pid $pid)"
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
    die "$1 (pid $pid) did not stop"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local secs=$1 what=$2 _
    shift 2
    for _ in $(seq "$secs"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
    die "$what not ready after ${secs}s"
}

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts system daemons)"

if [ "${1:-}" = stop ]; then
    stop_daemon slurmd "$RUN/slurmd.pid"
    stop_daemon slurmctld "$RUN/slurmctld.pid"
    stop_daemon slurmdbd "$RUN/slurmdbd.pid"
    say "stopped the Slurm daemons (munge and MariaDB left running)"
    exit 0
fi
[ $# -eq 0 ] || die "usage: $0 [stop]"

# --- 1. packages --------------------------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || die "apt-get not found; install ${missing[*]} by hand"
    say "installing ${missing[*]} (apt)"
    # Keep the packages' maintainer scripts from starting daemons (unconfigured here, and there may be
    # no init system): the standard policy-rc.d switch, removed again afterwards.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e $policy ]; then
        printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    rm -f $policy && trap - EXIT
else
    say "packages already installed: ${PACKAGES[*]}"
fi
say "versions: slurm $(dpkg-query -W -f='${Version}' slurmctld), munge $(dpkg-query -W -f='${Version}' munge)," \
    "mariadb $(dpkg-query -W -f='${Version}' mariadb-server)"

id slurm >/dev/null 2>&1 || { say "creating system user slurm"; useradd --system --no-create-home --shell /usr/sbin/nologin slurm; }
install -d -o slurm -g slurm -m 755 "$RUN" "$LOGS" "$STATE" "$STATE/slurmctld"
install -d -o root -g root -m 755 "$STATE/slurmd" "$ETC"

# --- 2. munge -----------------------------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    mungekey --create --force --keyfile /etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
install -d -o munge -g munge -m 755 /run/munge
install -d -o munge -g munge -m 700 /var/lib/munge /var/log/munge
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "munged already running"
else
    say "starting munged"
    runuser -u munge -- /usr/sbin/munged
    wait_for 30 munged sh -c 'munge -n | unmunge'
fi

# --- 3. MariaDB: the accounting database and its user -------------------------------------------
if mariadb-admin ping >/dev/null 2>&1; then
    say "MariaDB already running"
else
    say "starting MariaDB"
    install -d -o mysql -g mysql -m 755 /run/mysqld
    # mariadbd-safe restarts the server if it dies; detached from this shell
    setsid mariadbd-safe --user=mysql >/dev/null 2>&1 < /dev/null &
    wait_for 60 MariaDB mariadb-admin ping
fi
DBD_CONF=$ETC/slurmdbd.conf
DB_PASS=$(sed -n 's/^StoragePass=//p' "$DBD_CONF" 2>/dev/null || true)
[ -n "$DB_PASS" ] || DB_PASS=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
mariadb <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
SQL
say "database slurm_acct_db and its user slurm@localhost ready"

# --- 4. configuration ---------------------------------------------------------------------------
# install_conf FILE MODE OWNER < content: writes FILE only when the content differs; returns 0 when it
# changed (the daemon reading it must restart), 1 when it is unchanged
install_conf() {
    local tmp
    if [ -f "$1" ] && ! grep -q "^# Written by workflow/cluster/slurm-single-node.sh" "$1"; then
        die "$1 exists and was not written by this script (a real cluster's?); not overwriting it"
    fi
    tmp=$(mktemp)
    cat > "$tmp"
    if [ -f "$1" ] && cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 1; fi
    install -m "$2" -o "$3" -g "$3" "$tmp" "$1" && rm -f "$tmp"
    say "wrote $1"
}

HOST=$(hostname -s)
# The node as slurmd measures it: CPUs, sockets/cores/threads and RealMemory (MB)
NODE=$(slurmd -C | head -n1)
case $NODE in NodeName=*) ;; *) die "slurmd -C gave no node line: $NODE" ;; esac
NODE_HW=${NODE#NodeName=* }   # "CPUs=2 Boards=1 ... RealMemory=24105"
CPUS=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<< "$NODE_HW")
MEM=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<< "$NODE_HW")
say "this node: $HOST, $CPUS CPUs, ${MEM} MB ($NODE_HW)"

dbd_changed=0 ctl_changed=0
install_conf "$DBD_CONF" 600 slurm <<EOF && dbd_changed=1
# Written by workflow/cluster/slurm-single-node.sh
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
LogFile=$LOGS/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF

install_conf "$ETC/slurm.conf" 644 root <<EOF && ctl_changed=1
# Written by workflow/cluster/slurm-single-node.sh
# One node ($HOST) that is also the controller.
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
MailProg=/bin/true
# no cgroups (containers): processes are tracked by parent pid, tasks are not bound to CPUs
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmdSpoolDir=$STATE/slurmd
StateSaveLocation=$STATE/slurmctld
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$(( MEM / CPUS ))
# accounting through slurmdbd: sacct sees running and finished jobs; only users with an
# association (account) may submit
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=associations
# keep the comment sbatch gets (the plugin puts the rule and wildcards there): sacct -o JobName,Comment,State
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
MinJobAge=300
NodeName=$HOST NodeAddr=127.0.0.1 $NODE_HW State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF

# --- 5. slurmdbd, then the cluster, account and users in sacctmgr -------------------------------
if [ $dbd_changed = 1 ]; then stop_daemon slurmdbd "$RUN/slurmdbd.pid"; fi
if pid=$(running slurmdbd "$RUN/slurmdbd.pid"); then
    say "slurmdbd already running (pid $pid)"
else
    say "starting slurmdbd"
    /usr/sbin/slurmdbd
fi
wait_for 60 slurmdbd sacctmgr -n list cluster

if [ -z "$(sacctmgr -n -P list cluster "$CLUSTER" format=cluster)" ]; then
    say "sacctmgr: adding cluster $CLUSTER"
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi
if [ -z "$(sacctmgr -n -P list account "$ACCOUNT" format=account)" ]; then
    say "sacctmgr: adding account $ACCOUNT"
    sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description="fedbayes workflow" Organization=fedbayes >/dev/null
fi
for u in "${USERS[@]}"; do
    if [ -z "$(sacctmgr -n -P list assoc cluster="$CLUSTER" account="$ACCOUNT" user="$u" format=user)" ]; then
        say "sacctmgr: adding user $u to account $ACCOUNT"
        sacctmgr -i add user "$u" Account="$ACCOUNT" Cluster="$CLUSTER" >/dev/null
    fi
    sacctmgr -i modify user where name="$u" set DefaultAccount="$ACCOUNT" >/dev/null || true
done

# --- 6. slurmctld and slurmd --------------------------------------------------------------------
if [ $ctl_changed = 1 ]; then
    stop_daemon slurmd "$RUN/slurmd.pid"
    stop_daemon slurmctld "$RUN/slurmctld.pid"
fi
if pid=$(running slurmctld "$RUN/slurmctld.pid"); then
    say "slurmctld already running (pid $pid)"
else
    say "starting slurmctld"
    /usr/sbin/slurmctld
fi
wait_for 60 slurmctld sh -c 'scontrol ping | grep -q UP'
if pid=$(running slurmd "$RUN/slurmd.pid"); then
    say "slurmd already running (pid $pid)"
else
    say "starting slurmd"
    /usr/sbin/slurmd
fi
node_state() { sinfo -h -n "$HOST" -o %t 2>/dev/null | head -n1; }
for _ in $(seq 60); do
    case $(node_state) in
        idle*|mix*|alloc*|comp*) break ;;
        down*|drain*|drng*|fail*)
            say "node $HOST is $(node_state) ($(sinfo -h -n "$HOST" -o %E)); resuming it"
            scontrol update NodeName="$HOST" State=RESUME || true ;;
    esac
    sleep 1
done
case $(node_state) in idle*|mix*|alloc*|comp*) ;; *) die "node $HOST is '$(node_state)', not up" ;; esac

# --- 7. check: a job runs and sacct (slurmdbd) reports it COMPLETED ------------------------------
job=$(sbatch --parsable -J slurm-single-node-check -A "$ACCOUNT" -p "$PARTITION" -n 1 -c 1 --mem 100 \
      -t 5 -o /dev/null --wrap true)
job=${job%%;*}
for _ in $(seq 120); do
    state=$(sacct -n -X -P -j "$job" -o State 2>/dev/null | head -n1)
    [ "$state" = COMPLETED ] && break
    case $state in FAILED*|CANCELLED*|TIMEOUT*|NODE_FAIL*|OUT_OF_MEMORY*) die "check job $job: $state" ;; esac
    sleep 1
done
[ "$state" = COMPLETED ] || die "check job $job: sacct says '${state:-nothing}' after 120 s"
say "check job $job COMPLETED (seen by sacct)"

sinfo -N -o "%N %P %t %c %m" | sed 's/^/[slurm-single-node]   /'
sacctmgr -n -P list assoc cluster="$CLUSTER" account="$ACCOUNT" format=cluster,account,user \
    | sed 's/^/[slurm-single-node]   association /'
say "ready: cluster $CLUSTER, partition $PARTITION, account $ACCOUNT (users: ${USERS[*]})"
