#!/usr/bin/env bash
# An emulated cluster on one Linux machine: K network namespaces as hosts h1..hK, each with
# one link (a veth pair) to a switch (a bridge in its own namespace), every link's rate shaped
# with tc tbf in both directions. mpiexec runs inside h1 and starts its daemons on the other
# hosts through a launch agent that enters their namespaces (instead of ssh); MPI talks TCP
# between hosts (no shared memory), so `mpiexec --hostfile` runs across real network stacks.
#
#   scripts/cluster-emulate.sh up K [--rate 1gbit] [--segment 64KiB] [--burst 128KiB] [--slots S]
#                                   [--name NAME] [--subnet 10.213.0] [--no-probe] [--check]
#                                   # --check: only check the options; --slots: ranks per host
#   scripts/cluster-emulate.sh run [--name NAME] [-n N] -- PROGRAM [ARGS...]
#   scripts/cluster-emulate.sh probe [--name NAME]     # the link checks `up` prints
#   scripts/cluster-emulate.sh reshape [--name NAME] [--segment SIZE] [--burst SIZE|default]
#                                   # every link's segments and bucket, the rate unchanged
#   scripts/cluster-emulate.sh status [--name NAME]
#   scripts/cluster-emulate.sh down [--name NAME]
#
# Needs root, iproute2 (ip, tc), util-linux (unshare) and Open MPI; python3 for the probes.
# Nothing is added to the machine's own network namespace: the bridge lives in a namespace
# NAME-sw, the hosts in NAME-h1..NAME-hK, the subnet exists only inside them. Host names
# h1..hK resolve inside the cluster through /etc/netns/NAME-hI/hosts (ip netns exec mounts
# it over /etc/hosts), and each host has its own UTS namespace, so ranks see `hostname` hI.
# State (hostfile, agent, settings) is kept in /run/dcgan-cluster/NAME. `down` removes
# all of it, and ends what still runs inside the namespaces; it is safe to call twice and
# after a failed `up` or `run`.
#
# Links: tc tbf sets the rate, with a token bucket of --burst bytes (default: two segments, or
# 250 us at the rate where that is more); the stack hands each link segments of at most
# --segment bytes (default 64 KiB, what TSO and GRO hand a real NIC's driver and stack). See
# SEGMENT_DEFAULT and burst_bytes for the trade-off between the two. This kind of machine's
# kernel has no netem, so no delay is added and a link keeps the veth's own latency (tens of
# microseconds through the TCP stack).
# Without --rate the links are unshaped (as fast as the kernel copies).
# --slots S (default 1) gives each host S ranks, like a machine with S GPUs: ranks of one host
# talk through Open MPI's shared memory (vader), ranks of different hosts through the links.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
NAME="${DCGAN_CLUSTER_NAME:-dcg}"
STATE_ROOT=/run/dcgan-cluster

die() { echo "cluster-emulate: $*" >&2; exit 1; }
say() { echo "cluster-emulate: $*" >&2; }

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

need_tools() {
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces and tc): run it as root, e.g. sudo $0 $ORIG_ARGS"
    command -v ip >/dev/null || die "ip not found: install iproute2 (apt-get install iproute2)"
    command -v tc >/dev/null || die "tc not found: install iproute2 (apt-get install iproute2)"
    command -v unshare >/dev/null || die "unshare not found: install util-linux"
}

state() { echo "$STATE_ROOT/$NAME"; }
ns_host() { echo "$NAME-h$1"; }
ns_switch() { echo "$NAME-sw"; }

# br_netfilter's switches (BRIDGE_NF-iptables, -ip6tables, -arptables): where they exist, bridged
# frames go through the firewall's hooks. They are per network namespace since Linux 5.3.
BRIDGE_NF=/proc/sys/net/bridge/bridge-nf-call
bridge_nf_loaded() { [ -e "$BRIDGE_NF-iptables" ]; }

# kernel_at_least MAJOR MINOR: is the running kernel that version or newer?
kernel_at_least() {
    local v; v="$(uname -r)"
    local major="${v%%.*}" rest="${v#*.}"
    local minor="${rest%%[!0-9]*}"
    [ "$major" -gt "$1" ] || { [ "$major" -eq "$1" ] && [ "${minor:-0}" -ge "$2" ]; }
}

load_state() {
    local s; s="$(state)"
    [ -f "$s/settings" ] || die "no emulated cluster named '$NAME' is up: start one with $0 up K"
    # shellcheck disable=SC1091
    . "$s/settings"
}

# Segments (GSO) of at most this many bytes on shaped links, the default of --segment. Each
# segment costs the machine running the emulation a pass through both hosts' TCP stacks and the
# switch, and usually a tbf timer at each of its two hops: in a VM guest, an interrupt taken
# from whichever rank computes on that core. 64 KiB, what TSO and GRO hand a real host's stack,
# takes a quarter of the segments of 16 KiB and so fewer interrupts from training
# (docs/emulated-cluster.md). The price is the bucket below.
SEGMENT_DEFAULT=65536
SEGMENT_MAX=65536   # the largest segment a veth takes (without BIG TCP)
SEGMENT_BEFORE=16384   # what clusters brought up before --segment existed use

# tbf burst in bytes (the default of --burst): two segments, or 250 us at the rate where that
# is more. The bucket fills while a direction idles and then lets that much through at memory
# speed, which no real link does: an algorithm whose directions take turns (the binomial tree)
# runs faster than the cost model on a large bucket, while rd, vhd and ring keep both
# directions busy and stay on it. So bench-scaling times allreduces on 16 KiB segments in a
# 24 KiB bucket. One segment is not enough: the bucket is also what keeps the rate when tbf's
# timer fires late on a busy machine.
burst_bytes() { # bit/s segment-bytes
    local bits="$1" seg="$2" b
    b=$((bits / 8 / 4000))
    [ "$b" -ge $((2 * seg)) ] || b=$((2 * seg))
    echo "$b"
}

# A number with a unit -> the number times the unit's multiplier:
#   with_unit VALUE OPTION NOUN EXAMPLES UNIT=MULTIPLIER...   ("" is the unit of a bare number)
with_unit() {
    local v="$1" opt="$2" noun="$3" examples="$4" n unit pair
    shift 4
    n="${v%%[A-Za-z]*}"; unit="${v#"$n"}"
    [[ "$n" =~ ^[0-9]+$ ]] || die "$opt '$v' is not a $noun: write e.g. $examples"
    for pair in "$@"; do
        # 10#: a leading zero must not make the number octal.
        [ "${pair%%=*}" = "$unit" ] && { echo $((10#$n * ${pair#*=})); return; }
    done
    die "$opt '$v': unknown unit '$unit': write e.g. $examples"
}

# "1gbit", "500mbit", "100kbit", "1000000" (bit/s) -> bit/s
rate_bits() {
    with_unit "${1,,}" --rate rate "1gbit, 500mbit or 10gbit" =1 bit=1 kbit=1000 mbit=1000000 gbit=1000000000
}

# "32KiB", "1MiB", "20000" (bytes) -> bytes
size_bytes() { # VALUE OPTION
    with_unit "$1" "$2" size "16KiB, 32KiB or 65536" =1 B=1 KiB=1024 MiB=1048576
}

# --burst's size in bytes, or the reason it cannot be a bucket for segments of SEGMENT bytes.
burst_arg() { # value segment-bytes
    local b; b="$(size_bytes "$1" --burst)" || exit 1
    # A bucket smaller than one full-size packet could never send it.
    [ "$b" -ge 2048 ] || die "--burst $1 is smaller than one packet: use at least 2KiB"
    # tbf would cut every larger segment into MTU-size packets in software.
    [ "$b" -ge "$2" ] || die "--burst $1 is smaller than a segment ($2 bytes): tbf would cut every segment in software; add --segment $1 (or less), or give a larger --burst"
    echo "$b"
}

# --segment's size in bytes, or the reason the stack cannot hand a link segments of it.
segment_arg() {
    local b; b="$(size_bytes "$1" --segment)" || exit 1
    [ "$b" -ge 2048 ] && [ "$b" -le "$SEGMENT_MAX" ] \
        || die "--segment $1: give 2KiB to 64KiB (the largest segment a veth takes)"
    echo "$b"
}

# Segments of at most SEGMENT bytes on one end of a link (a veth would otherwise take 64 KiB).
segment_link() { # namespace device segment-bytes
    ip -n "$1" link set "$2" gso_max_size "$3"
}

shape() { # namespace device bit/s burst-bytes
    local bits="$3"
    # latency: the queue a link may build (a switch port's buffer), 5 ms at the rate.
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "${bits}bit" \
        burst "$4" latency 5ms
}

cmd_up() {
    local k="" rate="" burst="" segment="" subnet="10.213.0" probe=1 check=0 slots=1
    while [ $# -gt 0 ]; do
        case "$1" in
            --rate) rate="${2:?--rate needs a value, e.g. 1gbit}"; shift 2 ;;
            --burst) burst="${2:?--burst needs a size, e.g. 32KiB}"; shift 2 ;;
            --burst=*) burst="${1#--burst=}"; shift ;;
            --segment) segment="${2:?--segment needs a size, e.g. 64KiB}"; shift 2 ;;
            --segment=*) segment="${1#--segment=}"; shift ;;
            --rate=*) rate="${1#--rate=}"; shift ;;
            --subnet) subnet="${2:?--subnet needs the first three octets, e.g. 10.213.0}"; shift 2 ;;
            --slots) slots="${2:?--slots needs a rank count per host, e.g. 2}"; shift 2 ;;
            --slots=*) slots="${1#--slots=}"; shift ;;
            --no-probe) probe=0; shift ;;
            --check) check=1; shift ;;
            -*) die "up: unknown option '$1' (see $0 --help)" ;;
            *) [ -z "$k" ] || die "up: one host count, got '$k' and '$1'"; k="$1"; shift ;;
        esac
    done
    [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le 200 ] \
        || die "up: give the number of hosts, 1 to 200: $0 up 4 [--rate 1gbit]"
    [[ "$slots" =~ ^[1-9][0-9]*$ ]] && [ "$slots" -le 64 ] \
        || die "--slots '$slots': give the ranks per host, 1 to 64, e.g. --slots 2"
    [[ "$subnet" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--subnet '$subnet': give three octets, e.g. 10.213.0"
    local bits=""
    [ -z "$rate" ] || bits="$(rate_bits "$rate")"
    local burst_b="" segment_b=""
    if [ -n "$segment" ]; then
        [ -n "$rate" ] || die "--segment $segment shapes nothing without --rate: add e.g. --rate 1gbit"
        segment_b="$(segment_arg "$segment")"
    elif [ -n "$bits" ]; then
        segment_b="$SEGMENT_DEFAULT"
    fi
    if [ -n "$burst" ]; then
        [ -n "$rate" ] || die "--burst $burst shapes nothing without --rate: add e.g. --rate 1gbit"
        burst_b="$(burst_arg "$burst" "$segment_b")"
    elif [ -n "$bits" ]; then
        burst_b="$(burst_bytes "$bits" "$segment_b")"
    fi
    [ "$check" = 0 ] || return 0
    need_tools
    local s; s="$(state)"
    [ ! -e "$s" ] || die "a cluster named '$NAME' is already up ($s): take it down first with $0 down${NAME:+ --name $NAME}"
    ip netns add "$NAME-probe-$$" 2>/dev/null \
        || die "cannot create network namespaces here (ip netns add failed): needs root and a kernel/container that allows them"
    ip netns del "$NAME-probe-$$"

    mkdir -p "$s"
    # From here on, a failure takes down whatever was made.
    trap 'say "up failed: removing what was made"; cmd_down >/dev/null 2>&1 || true' ERR
    local sw; sw="$(ns_switch)"
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    # A switch forwards frames without anyone's firewall. Where br_netfilter is loaded, every
    # bridged packet would also go through iptables' hooks, which cost the comm thread CPU.
    # Only on kernels where the setting is per namespace: only ours changes.
    if bridge_nf_loaded && kernel_at_least 5 3; then
        ip netns exec "$sw" sh -c 'set -e; for t in iptables ip6tables arptables; do
            echo 0 >"$0-$t"; done' "$BRIDGE_NF" 2>/dev/null \
            || say "note: could not turn off iptables on the switch (bridge-nf-call-*); the links cost more CPU"
    fi
    local hosts=""
    for i in $(seq 1 "$k"); do hosts+="$subnet.$i h$i"$'\n'; done
    for i in $(seq 1 "$k"); do
        local ns; ns="$(ns_host "$i")"
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        # The host end is created in the host, the other end moved to the switch.
        ip -n "$ns" link add eth0 type veth peer name "p$i" netns "$sw"
        ip -n "$ns" addr add "$subnet.$i/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$sw" link set "p$i" master br0
        ip -n "$sw" link set "p$i" up
        if [ -n "$bits" ]; then
            segment_link "$ns" eth0 "$segment_b"
            segment_link "$sw" "p$i" "$segment_b"
            shape "$ns" eth0 "$bits" "$burst_b"       # host -> switch
            shape "$sw" "p$i" "$bits" "$burst_b"      # switch -> host
        fi
        mkdir -p "/etc/netns/$ns"
        printf '127.0.0.1 localhost\n%s' "$hosts" >"/etc/netns/$ns/hosts"
    done

    # The hostfile (Open MPI format): the first K hosts of hostfiles/emulated, --slots ranks each.
    grep -v '^[[:space:]]*\(#\|$\)' "$REPO/hostfiles/emulated" 2>/dev/null | head -n "$k" \
        | sed "s/slots=[0-9]*/slots=$slots/" >"$s/hostfile" || true
    for i in $(seq $(($(wc -l <"$s/hostfile") + 1)) "$k"); do echo "h$i slots=$slots" >>"$s/hostfile"; done
    cat >"$s/agent" <<EOF
#!/bin/sh
# Launch agent for Open MPI (--mca plm_rsh_agent): called as "agent HOST COMMAND..." where ssh
# would be; runs COMMAND through a shell (as sshd would) inside HOST's namespaces.
host="\$1"; shift
case "\$host" in
    h[0-9]*) ;;
    *) echo "emulated cluster '$NAME': unknown host '\$host' (hosts are h1..h$k)" >&2; exit 1 ;;
esac
[ -e "/run/netns/$NAME-\$host" ] || { echo "emulated cluster '$NAME' has no host \$host (hosts are h1..h$k)" >&2; exit 1; }
exec ip netns exec "$NAME-\$host" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$host" "\$*"
EOF
    chmod +x "$s/agent"
    cat >"$s/settings" <<EOF
K=$k
SLOTS=$slots
SUBNET=$subnet
RATE=${rate:-unshaped}
RATE_BITS=${bits:-0}
BURST_BYTES=${burst_b:-0}
SEGMENT_BYTES=${segment_b:-0}
EOF
    trap - ERR
    say "up: $k host(s) h1..h$k ($slots rank(s) each) on $subnet.0/24, links ${rate:-unshaped}${burst_b:+ (segments of $segment_b bytes, token bucket $burst_b bytes)}; hostfile $s/hostfile"
    if [ "$probe" = 1 ]; then cmd_probe; fi
}

# The mpiexec command line (as words, one per line) for this cluster. TCP only (pml ob1: no
# UCX, whose shared-memory transports would bypass the links). btl_tcp_flags send: Open MPI's
# emulated RDMA "put" over TCP serializes the two directions of an exchange; plain sends keep
# the links full duplex. Eager sends up to 4 MiB (the default is 64 KiB): a larger message
# first sends a request and waits for the receiver's answer, and with more than two ranks that
# answer queues behind the receiver's own bulk traffic to its next peer (up to the links'
# buffer) at every step of an algorithm. --bind-to none: every emulated host believes it owns
# all cores and would bind its rank to core 0.
mpiexec_words() {
    local s; s="$(state)"
    printf '%s\n' mpiexec --hostfile "$s/hostfile" \
        --mca plm_rsh_agent "$s/agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca pml ob1 --mca btl "$(btls)" --mca btl_tcp_flags send \
        --mca btl_tcp_eager_limit 4194304 --mca btl_tcp_max_send_size 4194304 \
        --mca btl_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_if_include "$SUBNET.0/24" \
        --bind-to none
}

# TCP between hosts; with several ranks per host, shared memory (vader) between them, as on a
# real machine (Open MPI uses vader only between ranks its launcher placed on the same host).
btls() { if [ "${SLOTS:-1}" -gt 1 ]; then echo tcp,vader,self; else echo tcp,self; fi; }

# Run "$@" inside h1 (its network and its own host name), with Open MPI's root permissions.
in_h1() {
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        ip netns exec "$(ns_host 1)" unshare --uts sh -c 'hostname h1 && exec "$@"' sh "$@"
}

cmd_run() {
    local n=""
    while [ $# -gt 0 ]; do
        case "$1" in
            -n) n="${2:?-n needs a rank count}"; shift 2 ;;
            --) shift; break ;;
            *) die "run: unknown option '$1': write $0 run [-n N] -- PROGRAM [ARGS...]" ;;
        esac
    done
    [ $# -gt 0 ] || die "run: nothing to run: write $0 run [-n N] -- PROGRAM [ARGS...]"
    need_tools
    load_state
    local total=$((K * ${SLOTS:-1}))
    n="${n:-$total}"
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] || die "run: -n '$n' is not a rank count"
    [ "$n" -le "$total" ] || die "run: -n $n asks for more ranks than the $K emulated hosts have slots ($total): use -n $total or bring up more hosts (or --slots)"
    local words=()
    mapfile -t words < <(mpiexec_words)
    # A relative program path means the caller's directory, also inside the namespaces.
    local prog="$1"; shift
    case "$prog" in
        */*) [ "${prog:0:1}" = / ] || prog="$PWD/$prog" ;;
    esac
    in_h1 "${words[@]}" -n "$n" "$prog" "$@"
}

cmd_probe() {
    load_state
    local s; s="$(state)"
    local port=$((20000 + RANDOM % 20000))
    [ "$K" -ge 2 ] || { say "probe: one host, no links to measure"; return 0; }
    command -v python3 >/dev/null || { say "probe: python3 not found, skipping the TCP measurements"; return 0; }
    local probe="$HERE/lib/net-probe.py" h2; h2="$(ns_host 2)"
    ip netns exec "$h2" python3 "$probe" serve "$port" &
    local srv=$!
    local rtt; rtt="$(ip netns exec "$(ns_host 1)" python3 "$probe" rtt "$SUBNET.2" "$port" 2000)"
    wait "$srv" || true
    ip netns exec "$h2" python3 "$probe" serve "$port" &
    srv=$!
    local bw; bw="$(ip netns exec "$(ns_host 1)" python3 "$probe" bw "$SUBNET.2" "$port" 200)"
    wait "$srv" || true
    local rtt_us gbit
    rtt_us="$(python3 -c 'import json,sys; print("%.1f" % json.loads(sys.argv[1])["rtt_us_median"])' "$rtt")"
    gbit="$(python3 -c 'import json,sys; print("%.3f" % json.loads(sys.argv[1])["gbit_per_s"])' "$bw")"
    echo "probe: raw TCP round trip h1<->h2 (1 byte, median of 2000): $rtt_us us"
    if [ "$RATE_BITS" != 0 ]; then
        local verdict
        verdict="$(python3 -c 'import sys; m,s=float(sys.argv[1]),float(sys.argv[2])/1e9; print("within 10% of the setting" if abs(m-s)<=0.1*s else "NOT within 10%% of the setting (%.3f Gbit/s)" % s)' "$gbit" "$RATE_BITS")"
        echo "probe: TCP bandwidth h1->h2 (200 MB): $gbit Gbit/s, link set to $RATE: $verdict"
    else
        echo "probe: TCP bandwidth h1->h2 (200 MB): $gbit Gbit/s (unshaped)"
    fi
    local bin="${DCGAN_TRAIN:-$REPO/target/release/dcgan-train}"
    if [ ! -x "$bin" ]; then
        say "probe: $bin not built (cargo build --release, or set DCGAN_TRAIN): skipping the MPI_Allreduce time"
        return 0
    fi
    local words=() out us
    mapfile -t words < <(mpiexec_words)
    # One rank on each of h1 and h2 (--map-by node), also when hosts have several slots.
    out="$(in_h1 "${words[@]}" -n 2 --map-by node "$bin" bench-allreduce --algos mpi --sizes 8B --iters 2000 2>&1)" \
        || { echo "$out" >&2; die "probe: the 8-byte MPI_Allreduce across h1 and h2 failed (output above)"; }
    us="$(echo "$out" | awk '$1 == 8 && $2 == "mpi" { print $5 }')"
    [ -n "$us" ] || { echo "$out" >&2; die "probe: could not read the MPI_Allreduce time from bench-allreduce (output above)"; }
    local ratio; ratio="$(python3 -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$us" "$rtt_us")"
    echo "probe: MPI_Allreduce of 8 bytes on h1+h2 (median of 2000): $us us = ${ratio}x the TCP round trip"
    if [ "$RATE_BITS" = 0 ] && python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 3 else 1)' "$ratio"; then
        say "probe: WARNING: an 8-byte allreduce should take within 3x a TCP round trip on unshaped links; is --bind-to none in effect, or the machine busy?"
    fi
}

# New segments or a new token bucket on every link of a cluster that is up, the rate unchanged:
# settings can be compared taking turns on one cluster, in one sitting of a noisy machine. A
# new --segment without --burst takes its default bucket (two segments).
cmd_reshape() {
    local burst="" segment=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --burst) burst="${2:?--burst needs a size, e.g. 16KiB, or default}"; shift 2 ;;
            --burst=*) burst="${1#--burst=}"; shift ;;
            --segment) segment="${2:?--segment needs a size, e.g. 16KiB}"; shift 2 ;;
            --segment=*) segment="${1#--segment=}"; shift ;;
            *) die "reshape: unknown option '$1': write $0 reshape [--segment SIZE] [--burst SIZE|default]" ;;
        esac
    done
    [ -n "$burst$segment" ] || die "reshape: give new segments or a new bucket: $0 reshape --segment 16KiB (or --burst 32KiB, or --burst default)"
    need_tools
    load_state
    [ "$RATE_BITS" != 0 ] || die "reshape: the links of '$NAME' are unshaped: bring it up with --rate to give them a bucket"
    local segment_b="${SEGMENT_BYTES:-$SEGMENT_BEFORE}" burst_b
    [ -z "$segment" ] || segment_b="$(segment_arg "$segment")"
    if [ -z "$burst" ] || [ "$burst" = default ]; then
        burst_b="$(burst_bytes "$RATE_BITS" "$segment_b")"
    else
        burst_b="$(burst_arg "$burst" "$segment_b")"
    fi
    for i in $(seq 1 "$K"); do
        segment_link "$(ns_host "$i")" eth0 "$segment_b"
        segment_link "$(ns_switch)" "p$i" "$segment_b"
        shape "$(ns_host "$i")" eth0 "$RATE_BITS" "$burst_b"
        shape "$(ns_switch)" "p$i" "$RATE_BITS" "$burst_b"
    done
    local settings; settings="$(state)/settings"
    sed -i "s/^BURST_BYTES=.*/BURST_BYTES=$burst_b/" "$settings"
    if grep -q '^SEGMENT_BYTES=' "$settings"; then
        sed -i "s/^SEGMENT_BYTES=.*/SEGMENT_BYTES=$segment_b/" "$settings"
    else
        echo "SEGMENT_BYTES=$segment_b" >>"$settings"
    fi
    say "reshape: links of '$NAME' at $RATE with segments of $segment_b bytes and a token bucket of $burst_b bytes"
}

cmd_status() {
    load_state
    local bucket=""
    [ "${BURST_BYTES:-0}" = 0 ] || bucket=" (segments of ${SEGMENT_BYTES:-$SEGMENT_BEFORE} bytes, token bucket $BURST_BYTES bytes)"
    echo "cluster '$NAME': $K host(s) with ${SLOTS:-1} slot(s) each, links $RATE$bucket, subnet $SUBNET.0/24, state $(state)"
    if bridge_nf_loaded; then
        if kernel_at_least 5 3; then
            echo "switch: bridge-nf-call-iptables $(ip netns exec "$(ns_switch)" cat "$BRIDGE_NF-iptables") (0: bridged frames skip iptables)"
        else
            echo "switch: bridge-nf-call-iptables left as the host's (before Linux 5.3 it is not per namespace)"
        fi
    fi
    for i in $(seq 1 "$K"); do
        local ns; ns="$(ns_host "$i")"
        printf 'h%s  %s  segments %s  %s\n' "$i" "$(ip -n "$ns" -br addr show eth0 | awk '{print $3}')" \
            "$(link_segment "$ns" eth0)" "$(ip netns exec "$ns" tc qdisc show dev eth0 | head -1)"
        # The switch's end of the same link, which shapes the direction towards the host.
        printf '  p%s (switch -> h%s)  segments %s  %s\n' "$i" "$i" "$(link_segment "$(ns_switch)" "p$i")" \
            "$(ip netns exec "$(ns_switch)" tc qdisc show dev "p$i" | head -1)"
    done
}

# The largest segment the stack hands one end of a link (its gso_max_size), in bytes.
link_segment() { # namespace device
    ip -n "$1" -d link show "$2" | grep -o 'gso_max_size [0-9]*' | awk '{print $2}'
}

cmd_down() {
    need_tools
    local s; s="$(state)"
    local found=0
    for ns in $(ip netns list | awk '{print $1}'); do
        case "$ns" in
            "$NAME-sw"|"$NAME"-h[0-9]*) ;;
            *) continue ;;
        esac
        found=1
        # End what still runs inside (a failed run's ranks or daemons), then the namespace.
        local pids; pids="$(ip netns pids "$ns" 2>/dev/null || true)"
        if [ -n "$pids" ]; then
            # shellcheck disable=SC2086
            kill -TERM $pids 2>/dev/null || true
            sleep 0.5
            pids="$(ip netns pids "$ns" 2>/dev/null || true)"
            # shellcheck disable=SC2086
            [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
        fi
        ip netns del "$ns" 2>/dev/null || true
        rm -rf "/etc/netns/$ns"
    done
    [ -e "$s" ] && found=1
    rm -rf "$s"
    if [ "$found" = 1 ]; then say "down: removed the emulated cluster '$NAME'"; else say "down: no cluster named '$NAME' (nothing to do)"; fi
}

ORIG_ARGS=""
main() {
    [ $# -gt 0 ] || { usage >&2; exit 2; }
    ORIG_ARGS="$*"
    local cmd="$1"; shift
    # --name may come anywhere after the command.
    local args=()
    while [ $# -gt 0 ]; do
        case "$1" in
            --name) NAME="${2:?--name needs a value}"; shift 2 ;;
            --name=*) NAME="${1#--name=}"; shift ;;
            --) args+=("$@"); break ;;
            *) args+=("$1"); shift ;;
        esac
    done
    [[ "$NAME" =~ ^[A-Za-z][A-Za-z0-9_]{0,15}$ ]] \
        || die "--name '$NAME': use a letter then up to 15 letters, digits or _"
    case "$cmd" in
        up) cmd_up "${args[@]}" ;;
        run) cmd_run "${args[@]}" ;;
        probe) need_tools; cmd_probe ;;
        reshape) cmd_reshape "${args[@]}" ;;
        status) cmd_status ;;
        down) cmd_down ;;
        -h|--help|help) usage ;;
        *) die "unknown command '$cmd': use up, run, probe, reshape, status or down (see $0 --help)" ;;
    esac
}

main "$@"
