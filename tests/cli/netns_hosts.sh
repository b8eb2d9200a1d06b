#!/usr/bin/env bash
# Several hosts on one machine: `zero launch --hostfile` across network namespaces. Each "host" is a
# network namespace on a bridge with its own address, its own hostname (a UTS namespace) and its
# own disk (a directory bind-mounted over DISK in a mount namespace of its own); names resolve
# through a hosts file bind-mounted over /etc/hosts for the launcher. mpirun reaches the hosts
# through a remote agent that enters the namespaces, as ssh would reach real machines.
#
# Usage: netns_hosts.sh ZERO TOKENS OUT CASE
#   train        2 hosts x 2 ranks, ZeRO-3: the curve equals one host's `mpirun -np 4`
#   env          what each rank sees on its host: variables, .deepspeed_env, --include/--num_nodes
#   checkpoint   a disk per host (checkpoint.use_node_local_storage): save, resume, same curve;
#                the hosts swapped: the missing rank files are named, exit non-zero
#   lost_host    every process of host 2 killed mid-run: the job ends in seconds, host and ranks named
#   dead_link    host 2's link cut mid-run: the collective timeout names the rank, the job ends
#   unreachable  a host that does not exist: refused before any rank starts, naming it
# Exits 77 (ctest's SKIP_RETURN_CODE) on a machine that cannot make namespaces (not root).
set -u
zero=$1 tokens=$2 out=$3 case=$4
here=$(cd "$(dirname "$0")" && pwd)
compare="/usr/bin/python3 $here/../../tools/compare_metrics.py"

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null && command -v unshare >/dev/null || skip "no ip / unshare"
command -v mpirun >/dev/null || skip "no mpirun"

rm -rf "$out" && mkdir -p "$out/disk"
# A /24 and names of our own: tests run in parallel, and interface names have 15 characters.
# Creating the bridge claims the id (atomic: a second test picking the same id gets "File exists").
RANDOM=$$
id=""
for _ in $(seq 1 50); do
  try=$(( (RANDOM % 200) + 20 ))
  if err=$(ip link add "zb$try" type bridge 2>&1); then
    id=$try
    break
  fi
  [[ $err == *"File exists"* ]] || skip "cannot create a bridge (no CAP_NET_ADMIN): $err"
done
[[ -n $id ]] || fail "no free bridge name"
net=10.213.$id
bridge=zb$id
hosts=(node1 node2)
cleanup() {
  for h in "${hosts[@]}"; do
    ip netns pids "zh$id-$h" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "zh$id-$h" 2>/dev/null
  done
  ip link del "$bridge" 2>/dev/null
  for v in 2 3; do ip link del "zv$id-$v" 2>/dev/null; done
  true
}
trap cleanup EXIT
ip addr add "$net.1/24" dev "$bridge" && ip link set "$bridge" up || fail "bridge address"
cp /etc/hosts "$out/hosts"
: >"$out/map"
i=2
for h in "${hosts[@]}"; do
  ns=zh$id-$h
  ip netns add "$ns" || skip "cannot create a network namespace"
  # A finished test's veth may outlive its namespace for a moment (the kernel frees it lazily);
  # the id is ours now (the bridge), so a leftover of that name is stale.
  ip link del "zv$id-$i" 2>/dev/null
  ip link add "zv$id-$i" type veth peer name eth0 netns "$ns" || fail "veth"
  ip link set "zv$id-$i" master "$bridge" up
  ip -n "$ns" addr add "$net.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  echo "$net.$i $h" >>"$out/hosts"
  echo "$h $ns" >>"$out/map"
  mkdir -p "$out/disk-$h"
  i=$((i + 1))
done
echo "$net.99 node3" >>"$out/hosts"  # named, but nothing answers there

# The remote agent: AGENT HOST COMMAND... runs COMMAND in HOST's namespaces, with HOST's disk.
cat >"$out/agent.sh" <<EOF
#!/bin/sh
host=\$1; shift
ns=\$(awk -v h="\$host" '\$1 == h {print \$2}' "$out/map")
[ -n "\$ns" ] || { echo "agent: ssh: connect to host \$host port 22: No route to host" >&2; exit 255; }
echo "\$host" >>"$out/agent.log"
exec ip netns exec "\$ns" unshare -u -m sh -c \
  'hostname "\$0" && mount --bind "$out/disk-\$0" "$out/disk" && exec sh -c "\$1"' "\$host" "\$*"
EOF
chmod +x "$out/agent.sh"

printf 'node1 slots=2\nnode2 slots=2\n' >"$out/hosts_2x2"
printf 'node2 slots=2\nnode1 slots=2\n' >"$out/hosts_2x2_swapped"
printf 'node1 slots=1\nnode2 slots=1\n' >"$out/hosts_2x1"
printf 'node1 slots=1\nnode2 slots=1\nnode3 slots=1\n' >"$out/hosts_3x1"
sed '/^\/\//d' "$here/../../examples/ds_config_zero3.json" >"$out/zero3.json"
sed '$ s/}$/, "checkpoint": {"use_node_local_storage": true}}/' \
  "$out/zero3.json" >"$out/zero3_local.json"

export OMP_NUM_THREADS=1
train_args=(--model preset:gpt2-tiny --train_file "$tokens" --block_size 16
            --per_device_train_batch_size 2 --quiet)
# launch HOSTFILE [launch flags] -- train args: zero launch in a mount namespace seeing our hosts.
launch() {
  local hostfile=$1; shift
  unshare -m sh -c 'mount --bind "$0/hosts" /etc/hosts && exec "$@"' "$out" \
    "$zero" launch --hostfile "$hostfile" \
    --launcher_args "--mca plm_rsh_agent $out/agent.sh --mca oob_tcp_if_include $net.0/24 --mca btl_tcp_if_include $net.0/24" \
    "$@"
}
# The job's pid (background) and a deadline: 0 when it ended within SECONDS.
wait_for() {
  local pid=$1 seconds=$2
  for _ in $(seq 1 $((seconds * 10))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}

case $case in
train)
  "$zero" launch --num_gpus 4 -- zero train "${train_args[@]}" --max_steps 8 \
    --deepspeed "$out/zero3.json" --output_dir "$out/local" >"$out/local.log" 2>&1 ||
    { cat "$out/local.log"; fail "the one-host run failed"; }
  launch "$out/hosts_2x2" -- zero train "${train_args[@]}" --max_steps 8 \
    --deepspeed "$out/zero3.json" --output_dir "$out/disk/run" >"$out/log" 2>&1 ||
    { cat "$out/log"; fail "the two-host run failed"; }
  sort -u "$out/agent.log" | tr '\n' ' ' | grep -qx "node1 node2 " || fail "agents: $(cat "$out/agent.log")"
  $compare "$out/disk-node1/run/metrics.jsonl" "$out/local/metrics.jsonl" 1e-6 ||
    fail "the two-host curve differs from the one-host curve"
  echo "PASS: 2 hosts x 2 ranks, ZeRO-3: the curve equals one host's"
  ;;
env)
  # What each rank sees on its host: hostname, rank, a forwarded ZERO_* variable, .deepspeed_env.
  cd "$out" && echo "FROM_DS_ENV=yes" >.deepspeed_env
  probe='echo "$(hostname) rank=$OMPI_COMM_WORLD_RANK probe=$ZERO_PROBE ds=$FROM_DS_ENV master=$MASTER_ADDR"'
  ZERO_PROBE=42 launch "$out/hosts_2x2" -- sh -c "$probe" >"$out/log" 2>&1 ||
    { cat "$out/log"; fail "the probe failed"; }
  got=$(grep "^node" "$out/log" | sort | tr '\n' ';')
  want="node1 rank=0 probe=42 ds=yes master=node1;node1 rank=1 probe=42 ds=yes master=node1;"
  want+="node2 rank=2 probe=42 ds=yes master=node1;node2 rank=3 probe=42 ds=yes master=node1;"
  [[ $got == "$want" ]] || { cat "$out/log"; fail "ranks saw: $got"; }
  # --include / --num_nodes pick hosts: ranks are numbered over what is left; one host (even
  # another machine) gets MASTER_ADDR 127.0.0.1, its own loopback.
  launch "$out/hosts_2x2" --include node2:0 -- sh -c "$probe" >"$out/log" 2>&1 ||
    { cat "$out/log"; fail "--include failed"; }
  [[ $(grep -c "^node" "$out/log") -eq 1 ]] && grep -q "^node2 rank=0 .* master=127.0.0.1" "$out/log" ||
    { cat "$out/log"; fail "--include node2:0"; }
  launch "$out/hosts_2x2" --num_nodes 1 -- sh -c "$probe" >"$out/log" 2>&1 ||
    { cat "$out/log"; fail "--num_nodes failed"; }
  [[ $(grep "^node" "$out/log" | sort | tr '\n' ';') == "node1 rank=0 probe= ds=yes master=127.0.0.1;node1 rank=1 probe= ds=yes master=127.0.0.1;" ]] ||
    { cat "$out/log"; fail "--num_nodes 1"; }
  echo "PASS: variables (forwarded, .deepspeed_env, MASTER_ADDR) reach every host; --include / --num_nodes pick hosts"
  ;;
checkpoint)
  launch "$out/hosts_2x2" -- zero train "${train_args[@]}" --max_steps 8 --save_steps 4 \
    --deepspeed "$out/zero3_local.json" --output_dir "$out/disk/run" >"$out/log" 2>&1 ||
    { cat "$out/log"; fail "the saving run failed"; }
  for f in node1/run/global_step4/rank_0 node1/run/global_step4/rank_1 \
           node2/run/global_step4/rank_2 node2/run/global_step4/rank_3; do
    [[ -f "$out/disk-$f.safetensors" ]] || fail "disk-$f.safetensors was not written"
  done
  [[ -f "$out/disk-node2/run/global_step4/manifest.json" ]] || fail "node2 has no manifest"
  [[ ! -e "$out/disk-node2/run/global_step4/rank_0.safetensors" ]] || fail "one shared disk?"
  launch "$out/hosts_2x2" -- zero train "${train_args[@]}" --max_steps 8 \
    --deepspeed "$out/zero3_local.json" --resume_from_checkpoint "$out/disk/run/global_step4" \
    --output_dir "$out/disk/resumed" >"$out/resume.log" 2>&1 ||
    { cat "$out/resume.log"; fail "the resumed run failed"; }
  $compare "$out/disk-node1/resumed/metrics.jsonl" "$out/disk-node1/run/metrics.jsonl" 0 ||
    fail "the resumed curve differs"
  # The same checkpoint with the hosts swapped: rank 0 runs on node2, whose disk has ranks 2-3.
  launch "$out/hosts_2x2_swapped" -- zero train "${train_args[@]}" --max_steps 8 \
    --deepspeed "$out/zero3_local.json" --resume_from_checkpoint "$out/disk/run/global_step4" \
    --output_dir "$out/disk/swapped" >"$out/swapped.log" 2>&1 && fail "the swapped resume succeeded"
  grep -q "global_step4/rank_[0-3].safetensors: missing" "$out/swapped.log" ||
    { cat "$out/swapped.log"; fail "no rank file named as missing"; }
  grep -q "zero launch: the job failed (exit status [0-9]*): rank [0-3] (on node[12]): " \
    "$out/swapped.log" || { cat "$out/swapped.log"; fail "no summary naming the rank and host"; }
  echo "PASS: a disk per host: saved, resumed (same curve); swapped hosts name the missing files"
  ;;
lost_host)
  launch "$out/hosts_2x1" -- zero train "${train_args[@]}" --max_steps 100000 \
    --output_dir "$out/disk/run" >"$out/log" 2>&1 &
  job=$!
  for _ in $(seq 1 300); do [[ -s "$out/disk-node1/run/metrics.jsonl" ]] && break; sleep 0.1; done
  [[ -s "$out/disk-node1/run/metrics.jsonl" ]] || { cat "$out/log"; fail "training did not start"; }
  start=$(date +%s)
  ip netns pids "zh$id-node2" | xargs -r kill -9
  wait_for $job 30 || { kill -9 $job; cat "$out/log"; fail "the job did not end within 30 s"; }
  wait $job && fail "exit status 0"
  elapsed=$(( $(date +%s) - start ))
  grep -q "zero launch: lost host node2 (ranks 1) after" "$out/log" ||
    { cat "$out/log"; fail "host node2 not named"; }
  grep -q "zero launch: the job failed (exit status [0-9]*): host node2 (ranks 1) was lost" \
    "$out/log" || { cat "$out/log"; fail "no summary"; }
  echo "PASS: host node2 killed: the job ended in ${elapsed}s naming node2 and rank 1"
  ;;
dead_link)
  ZERO_COMM_TIMEOUT_MS=3000 launch "$out/hosts_2x1" --abort_grace 5 -- zero train \
    "${train_args[@]}" --max_steps 100000 --output_dir "$out/disk/run" >"$out/log" 2>&1 &
  job=$!
  for _ in $(seq 1 300); do [[ -s "$out/disk-node1/run/metrics.jsonl" ]] && break; sleep 0.1; done
  [[ -s "$out/disk-node1/run/metrics.jsonl" ]] || { cat "$out/log"; fail "training did not start"; }
  start=$(date +%s)
  ip -n "zh$id-node2" link set eth0 down
  wait_for $job 40 || { kill -9 $job; cat "$out/log"; fail "the job hung (40 s)"; }
  wait $job && fail "exit status 0"
  elapsed=$(( $(date +%s) - start ))
  grep -q "rank(s) that did not reach it: 1" "$out/log" || { cat "$out/log"; fail "rank 1 not named"; }
  grep -q "zero launch: the job failed (exit status [0-9]*): rank(s) 1 (on node2) did not answer" \
    "$out/log" || { cat "$out/log"; fail "no summary naming node2"; }
  echo "PASS: node2's link cut: the job ended in ${elapsed}s naming rank 1 on node2"
  ;;
unreachable)
  launch "$out/hosts_3x1" -- zero train "${train_args[@]}" --max_steps 8 \
    --output_dir "$out/disk/run" >"$out/log" 2>&1
  rc=$?
  [[ $rc -eq 1 ]] || { cat "$out/log"; fail "exit status $rc, expected 1"; }
  grep -q "node3 (ranks 2): exit status 255: .*No route to host" "$out/log" ||
    { cat "$out/log"; fail "node3 not named"; }
  [[ ! -e "$out/disk-node1/run" ]] || fail "a rank started"
  echo "PASS: node3 unreachable: refused before any rank started, naming node3 and rank 2"
  ;;
*)
  fail "unknown case '$case'"
  ;;
esac
