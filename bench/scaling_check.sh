#!/usr/bin/env bash
# The throughput model (`zero estimate --throughput`, docs/scaling.md) against measured CPU steps:
# worlds 2-4 under mpirun over shared memory (ZeRO.cpp's ShmCollectives) and over TCP (Open MPI's
# collectives, `--mca pml ob1 --mca btl tcp,self`), stages 0-3, overlap_comm off and on.
#
# The model's inputs are measured apart from the steps it predicts, two ways:
#   A (same world): compute = the median step of N independent world-1 runs side by side (no
#     collectives: N ranks' compute sharing the cores, as in the N-rank step); the sharded work
#     from N `zero bench adam` side by side: --optimizer_ms = Adam + the cast of the new weights
#     (8 B/param at the same run's STREAM triad rate, which moves 16 B/param), --gradient_ms = the
#     fp32 gradient accumulators (zeroed 4 B + accumulated 12 B per param: one triad); the shm /
#     tcp link = bandwidth and latency per collective kind, fitted by `zero estimate
#     --interconnect_sweep` to a collective sweep at world N (bench/comm_sweep_bench: no
#     compute); oversubscription 1.
#   B (the model's own scaling): compute and optimizer of one run alone, the link fitted at world
#     2, oversubscription = N ranks x 1 thread / cores (compute and CPU-bound comm slowed alike).
#   C (for a loaded machine): compute = the same run's stage-0 overlap-off step minus its measured
#     comm wait (that row calibrates; the other seven rows of the world and link are predicted).
# Rounds interleave everything, so a load swing on a shared machine hits inputs and measurements
# alike; the tables take medians over rounds.
# Usage: [ROUNDS=3] bench/scaling_check.sh [BUILD_DIR]  > bench/results/scaling_check.md
set -euo pipefail
build=${1:-build/release}
zero=$build/bin/zero
sweep=$build/bench/comm_sweep_bench
rounds=${ROUNDS:-3}
cores=$(nproc)
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=$work/model
mkdir -p "$model"
# A GPT-2 whose parameters are mostly embedding (4 layers x 256 wide, vocab 50257: 16.09M params,
# 61 MiB fp32 per pass), so a 64-token step computes little and communicates a lot.
cat >"$model/config.json" <<'EOF'
{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257,
 "n_positions": 256, "n_ctx": 256, "n_embd": 256, "n_layer": 4, "n_head": 4,
 "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05, "tie_word_embeddings": true}
EOF
"$py" - "$model" <<'EOF'
import json, struct, sys, numpy as np
out, V, T, C, L = sys.argv[1], 50257, 256, 256, 4
rng = np.random.default_rng(0)
shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C),
          "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
for i in range(L):
    p = f"transformer.h.{i}."
    shapes.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,), p + "attn.c_attn.weight": (C, 3 * C),
                   p + "attn.c_attn.bias": (3 * C,), p + "attn.c_proj.weight": (C, C),
                   p + "attn.c_proj.bias": (C,), p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                   p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                   p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
header, blobs, off = {}, [], 0
for name, shape in shapes.items():
    if ".ln_" in name and name.endswith("weight"):
        a = np.ones(shape)
    elif name.endswith("weight"):
        a = rng.normal(0, 0.02, shape)
    else:
        a = np.zeros(shape)
    b = a.astype("<f4").tobytes()
    header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(out + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)))
    f.write(h)
    for b in blobs:
        f.write(b)
EOF

export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
mpi=(mpirun --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS -x OMP_WAIT_POLICY)
tcp=(-x ZERO_SHM_COLLECTIVES=0 --mca pml ob1 --mca btl tcp,self)
# --warmup 1: stage 3 warms up 2 steps whatever it is given (runtime/step_benchmark.h); runs
# before that change timed its second step's extra gather (+12.5% wire bytes at stage 3).
step=(bench step --model "$model" --micro_batch 1 --block_size 64 --steps 4 --warmup 1)
# Raise our priority over the other jobs on a shared machine when allowed (root); else as is.
nice_cmd=(nice -n -5)
"${nice_cmd[@]}" true 2>/dev/null || nice_cmd=()
raw=$work/raw
load() { uptime | sed 's/.*load average: //; s/,.*//'; }
# N copies of a command side by side; their outputs concatenated.
side_by_side() {
  local n=$1
  shift
  for ((i = 0; i < n; ++i)); do "$@" >"$work/out.$i" & done
  wait
  for ((i = 0; i < n; ++i)); do cat "$work/out.$i"; done
}
start=$(date -u '+%F %H:%M')
# RAW_IN=FILE: analyse an earlier run's raw lines (RAW_OUT=FILE keeps them) instead of measuring.
[[ -n ${RAW_IN:-} ]] && { cp "$RAW_IN" "$raw"; rounds=0; start="(from $RAW_IN)"; }
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r/$rounds: load $(load)" >&2
  echo "round $r $(load) $(date -u +%H:%M)" >>"$raw"
  for n in 1 2 3 4; do
    side_by_side "$n" "${nice_cmd[@]}" "$zero" "${step[@]}" --stages 0 |
      awk -v n="$n" '$1 ~ /^[0-3]$/ {print "compute", n, $3}' >>"$raw"
    side_by_side "$n" "${nice_cmd[@]}" "$zero" bench adam --numel 16090880 --threads 1 --iters 5 \
      --no-torch --no-reference |
      awk -v n="$n" -F'|' '$2 ~ /^ adam_update_simd avx512 $/ {print "adam", n, $3}
        $2 ~ /^ STREAM triad/ {print "triad", n, $3}' >>"$raw"
    [[ $n == 1 ]] && continue
    "${nice_cmd[@]}" "${mpi[@]}" -np "$n" "$sweep" 5 256 1024 4096 16384 65536 |
      awk '$1 == "sweep" {print "sweep shm", $2, $3, $4, $5}' >>"$raw"
    "${nice_cmd[@]}" "${mpi[@]}" "${tcp[@]}" -np "$n" "$sweep" 5 256 1024 4096 16384 65536 |
      awk '$1 == "sweep" {print "sweep tcp", $2, $3, $4, $5}' >>"$raw"
    "${nice_cmd[@]}" "${mpi[@]}" -np "$n" "$zero" "${step[@]}" |
      awk -v n="$n" '$1 ~ /^[0-3]$/ {print "step", n, "shm", $1, $2, $3, $5, $8}' >>"$raw"
    "${nice_cmd[@]}" "${mpi[@]}" "${tcp[@]}" -np "$n" "$zero" "${step[@]}" |
      awk -v n="$n" '$1 ~ /^[0-3]$/ {print "step", n, "tcp", $1, $2, $3, $5, $8}' >>"$raw"
  done
done
[[ -z ${RAW_IN:-} ]] && echo "end $(load)" >>"$raw"
cp "$raw" "${RAW_OUT:-/dev/null}" 2>/dev/null || true

"$py" - "$raw" "$zero" "$model" "$cores" "$rounds" "$start" <<'EOF'
import json, os, re, statistics, subprocess, sys
raw, zero, model, cores, rounds, start = sys.argv[1:7]
work = os.path.dirname(raw)
cores = int(cores)
# Per round r: loads, compute[r][n], adam[r][n], sweeps[r][(link, n)], steps[r][(n, link, stage, overlap)].
rounds_seen, loads, end_load = [], {}, None
compute, adam, triad, sweeps, steps = {}, {}, {}, {}, {}
r = 0
for line in open(raw):
    f = line.split()
    if f[0] == "round":
        r = int(f[1])
        rounds_seen.append(r)
        loads[r] = (float(f[2]), f[3])
    elif f[0] == "end":
        end_load = float(f[1])
    elif f[0] == "sweep":
        sweeps.setdefault(r, {}).setdefault((f[1], int(f[3])), []).append((f[2], float(f[4]), float(f[5])))
    elif f[0] == "adam":
        adam.setdefault(r, {}).setdefault(int(f[1]), []).append(float(f[2]))
    elif f[0] == "triad":
        triad.setdefault(r, {}).setdefault(int(f[1]), []).append(float(f[2]))
    elif f[0] == "compute":
        compute.setdefault(r, {}).setdefault(int(f[1]), []).append(float(f[2]))
    elif f[0] == "step":
        steps.setdefault(r, {})[(int(f[1]), f[2], int(f[3]), f[4])] = (float(f[5]), float(f[6]), float(f[7]))
med = statistics.median

# Each round's sweep of one link at one world, as comm_sweep_bench printed it: `zero estimate
# --interconnect_sweep` fits its bandwidth and latency per collective kind (sharding/link_sweep.h).
sweep_files = {}
for r in sweeps:
    for (link, world), samples in sweeps[r].items():
        path = os.path.join(work, "sweep.%d.%s.%d" % (r, link, world))
        with open(path, "w") as f:
            for kind, b, ms in samples:
                f.write("sweep %s %d %s %s\n" % (kind, world, b, ms))
        sweep_files[(r, link, world)] = path

# The sharded per-parameter work besides Adam, at the STREAM triad's rate (which moves 16 B per
# parameter, 12 counted: `zero bench adam`'s triad over the same total bytes as Adam's 4 arrays):
# the cast of the new weights (8 B) and the gradient accumulators (4 B zeroed + 12 B accumulated).
# Raw files from before the triad was recorded: the triad taken as 0.96 x Adam (the quiet run of
# bench/results/adam_cpu.md on this machine: 13.20 ms triad, 13.74 ms Adam at 32M params).
TRIAD_PER_ADAM = 0.96
triad_estimated = not triad
def sharded_ms(r, n):
    a = med(adam[r][n])
    t = med(triad[r][n]) if not triad_estimated else TRIAD_PER_ADAM * a
    return a + t / 2, t  # --optimizer_ms, --gradient_ms

def predict(r, world, link, stage, overlap, way):
    n = 1 if way == "B" else world
    opt_ms, grad_ms = sharded_ms(r, n)
    if way == "C":  # compute from the same run's stage-0 overlap-off row, minus its comm wait
        ms, wait, _ = steps[r][(world, link, 0, "off")]
        step_ms, over, sweep = ms - wait, 1.0, sweep_files[(r, link, world)]
    elif way == "A":
        step_ms, over, sweep = med(compute[r][world]), 1.0, sweep_files[(r, link, world)]
    else:
        step_ms, over = med(compute[r][1]), max(1.0, world / cores)
        sweep = sweep_files[(r, link, 2)]
    scale = min(1.0, step_ms / (opt_ms + grad_ms))  # the parts cannot exceed the step
    args = [zero, "estimate", "--throughput", "--model", model, "--json", "--dtype", "fp32",
            "--micro_batch", "1", "--seq_len", "64", "--step_ms", "%.4f" % step_ms,
            "--optimizer_ms", "%.4f" % (opt_ms * scale), "--gradient_ms", "%.4f" % (grad_ms * scale),
            "--interconnect", link, "--interconnect_sweep", sweep,
            "--num_gpus_per_node", str(world), "--stage", str(stage),
            "--overlap_comm", "true" if overlap == "on" else "false",
            "--oversubscription", "%.4f" % over]
    out = json.loads(subprocess.check_output(args))
    row = out["rows"][0]
    row["interconnect"] = out["interconnect"]
    return row

# The per-kind fits as `zero estimate` printed them: {kind: (GB/s, us)}.
def fitted(r, link, world):
    text = predict(r, world, link, 0, "off", "A")["interconnect"]
    return {k: (float(g), float(u)) for k, g, u in
            re.findall(r"(all_reduce|reduce_scatter|all_gather) ([0-9.e+-]+) GB/s ([0-9.e+-]+) us", text)}
links = {r: {key: fitted(r, key[0], key[1]) for key in sweeps[r]} for r in sweeps}

# The fitted model's time for one sweep sample (throughput_model.cc's collective_terms: shm is
# staged, tcp a ring), to print beside the measured one.
MiB4 = 4 << 20
def terms(link, kind, b, p):
    share = (p - 1) / p
    if link == "shm":
        chunks = -(-b // MiB4)
        return {"all_reduce": (2 + 1.5 * share, 2 * chunks), "reduce_scatter": (2.5 * share, chunks),
                "all_gather": (1 + 1 / p, -(-(b // p) // MiB4))}[kind]
    return {"all_reduce": (2 * share, 2 * (p - 1)), "reduce_scatter": (share, p - 1),
            "all_gather": (share, p - 1)}[kind]
def model_ms(r, link, world, kind, b):
    gbs, us = links[r][(link, world)][kind]
    c, l = terms(link, kind, int(b), world)
    return c * b / (gbs * 1e9) * 1e3 + l * us * 1e-3

print("# The throughput model against measured CPU steps (issue 30 item 3)")
print()
print("Machine: %s, %d cores, other jobs on it show in the load below; %s UTC; "
      "%d rounds; `bench/scaling_check.sh` (`nice -n -5`, OMP_NUM_THREADS=1, "
      "OMP_WAIT_POLICY=passive). No GPU in this session: GPU ranks sharing one device are not "
      "measured." % (
          subprocess.check_output("lscpu | sed -n 's/^Model name: *//p'", shell=True, text=True).strip(),
          cores, start, len(rounds_seen)))
print()
print("1-minute load average when each round started: %s%s." % (
    ", ".join("%.2f (%s)" % loads[r] for r in rounds_seen),
    "; at the end %.2f" % end_load if end_load is not None else ""))
print()
print("Model: GPT-2, 4 layers x 256, vocab 50257, tied (16.09M params, fp32, 61 MiB per pass); "
      "micro 1 x T 64 per rank; `zero bench step --steps 4 --warmup 1` (mean step of the slowest "
      "rank). Each round measures the inputs and then the steps of each world, so every prediction "
      "uses inputs measured minutes before the step it predicts; the tables give medians over "
      "rounds, the errors are the median of the per-round errors.")
print()
print("## Inputs, measured apart from the predicted steps (per round)")
print()
print("Sharded work: --optimizer_ms = Adam + triad / 2 (the cast of the new weights, 8 B/param), "
      "--gradient_ms = triad (the fp32 gradient accumulators, 16 B/param), N `zero bench adam` side by "
      "side%s. Links: GB/s and us per collective kind (all_reduce / reduce_scatter / all_gather), "
      "fitted by `zero estimate --interconnect_sweep` to the sweep at that world." % (
          "; **this raw file has no triad lines: triad = %.2f x Adam** (bench/results/adam_cpu.md)"
          % TRIAD_PER_ADAM if triad_estimated else ""))
print()
print("| round | world | compute ms (N runs side by side) | Adam ms | triad ms | optimizer / gradient ms | shm fit AR / RS / AG | tcp fit AR / RS / AG |")
print("|---|---|---|---|---|---|---|---|")
for r in rounds_seen:
    for n in sorted(compute[r]):
        cells = []
        for link in ("shm", "tcp"):
            if (link, n) in links[r]:
                cells.append(" / ".join("%.3g GB/s %.0f us" % links[r][(link, n)][k]
                                        for k in ("all_reduce", "reduce_scatter", "all_gather")))
            else:
                cells.append("-")
        opt_ms, grad_ms = sharded_ms(r, n)
        print("| %d | %d | %.1f | %.2f | %s | %.2f / %.2f | %s | %s |" % (
            r, n, med(compute[r][n]), med(adam[r][n]),
            "%.2f" % med(triad[r][n]) if not triad_estimated else "(%.2f)" % (TRIAD_PER_ADAM * med(adam[r][n])),
            opt_ms, grad_ms, *cells))
print()
print("### Collective sweeps (fp32; measured ms / the per-kind fitted link model's ms; median over rounds)")
print()
print("| link | world | collective | 256 KiB | 1 MiB | 4 MiB | 16 MiB | 64 MiB |")
print("|---|---|---|---|---|---|---|---|")
for key in sorted(links[rounds_seen[0]]):
    link, world = key
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        cells = []
        for b in sorted({b for k, b, _ in sweeps[rounds_seen[0]][key] if k == kind}):
            ms = [tm for r in rounds_seen for k, bb, tm in sweeps[r][key] if k == kind and bb == b]
            fits = [model_ms(r, link, world, kind, b) for r in rounds_seen]
            cells.append("%.2f / %.2f" % (med(ms), med(fits)))
        print("| %s | %d | %s | %s |" % (link, world, kind, " | ".join(cells)))
print()
print("## Predicted vs measured step time")
print()
print("Three ways to feed the model, all with the link fitted per collective kind to a sweep and the "
      "sharded work (Adam, the weights' cast, the gradient accumulators) from `zero bench adam` "
      "(no step time used):")
print()
print("- **C** (for a loaded machine): compute = the same run's stage-0 overlap-off step minus its measured comm "
      "wait, sharded work from N `zero bench adam` side by side, link swept at N. The stage-0 overlap-off "
      "row is the calibration row (its error is the comm prediction alone); the other seven rows "
      "of each world and link are predictions: other collectives, the sharded update, overlap.")
print("- **A**: compute = N world-1 runs side by side (no collectives), link swept at N.")
print("- **B**: the model's own scaling: one world-1 run's compute and sharded work alone, the world-2 link, "
      "oversubscription N / %d cores for compute and CPU-bound comm." % cores)
print()
print("Errors: median over rounds of predicted / measured - 1, each round's prediction from that "
      "round's inputs. Comm wait: the measured time the compute thread blocked on collectives "
      "(slowest rank), beside C's predicted exposed comm. Wire: MiB per rank per step, measured "
      "(CommStats) / predicted.")
print()
print("| world | link | stage | overlap | measured ms (rounds) | C ms | C error | A error | B error | comm wait ms | C exposed ms | wire MiB meas / pred |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
errors = {"A": [], "B": [], "C": []}
comm_errors = []
for key in sorted(steps[rounds_seen[0]]):
    world, link, stage, overlap = key
    meas, pc, err, wait, exposed = [], [], {"A": [], "B": [], "C": []}, [], []
    for r in rounds_seen:
        if key not in steps.get(r, {}):
            continue
        ms, w, wire = steps[r][key]
        meas.append(ms)
        wait.append(w)
        for way in ("A", "B", "C"):
            p = predict(r, world, link, stage, overlap, way)
            err[way].append(p["step_ms"] / ms - 1)
            if way == "C":
                pc.append(p["step_ms"])
                exposed.append(p["exposed_comm_ms"])
                pred_wire = p["wire_bytes"] / (1 << 20)
    calibration = stage == 0 and overlap == "off"
    for way in ("A", "B", "C"):
        if not (way == "C" and calibration):
            errors[way].append((abs(med(err[way])), key))
    if overlap == "off":
        comm_errors.append((med(exposed) / med(wait) - 1, key))
    print("| %d | %s | %d | %s | %.1f (%s) | %.1f%s | %+.1f%% | %+.1f%% | %+.1f%% | %.1f | %.1f | %.2f / %.2f |" % (
        world, link, stage, overlap, med(meas), " ".join("%.0f" % m for m in meas), med(pc),
        " (calibration)" if calibration else "", 100 * med(err["C"]), 100 * med(err["A"]),
        100 * med(err["B"]), med(wait), med(exposed), wire, pred_wire))
print()
for way in ("C", "A", "B"):
    inside = sum(1 for e, _ in errors[way] if e <= 0.15)
    worst = max(errors[way])
    print("- %s: within 15%% in %d of %d configurations%s; largest error %.1f%% (world %d, %s, "
          "stage %d, overlap %s)." % (way, inside, len(errors[way]),
                                      " (calibration rows left out)" if way == "C" else "",
                                      100 * worst[0], *worst[1]))
inside = sum(1 for e, _ in comm_errors if abs(e) <= 0.15)
print("- Comm alone (overlap off, where the compute thread waits for every collective): C's "
      "predicted comm within 15%% of the measured comm wait in %d of %d configurations; "
      "errors %s." % (inside, len(comm_errors), ", ".join("%+.0f%%" % (100 * e) for e, _ in comm_errors)))
EOF
