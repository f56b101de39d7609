#!/usr/bin/env bash
# examples/resnet_cifar10 without --sync under mpirun -np 3: asynchronous
# training against one parameter server (rank 0) with two workers (ctest:
# distributed.resnet_cifar10_asynchronous_...):
#   1. --num-ps that leaves no worker is refused (exit 2, said once);
#   2. 1 server + 2 workers train: the chief (rank 1) logs, both workers push
#      updates, the server reports them, the loss falls, the chief writes
#      checkpoints and evaluates; with --startup-delay-steps 10 worker 1
#      starts at global step 10 and the chief at once;
#   3. a restart resumes from the chief's last checkpoint and trains on;
#   4. a worker that stops answering makes the server end the job with an
#      error naming its rank, after --collective-timeout. The job's start
#      (until every rank holds the chief's state) waits with its own, longer
#      deadline (StrategyOptions::startup_timeout): with 3 s there, a loaded
#      machine made the server's layout check time out while the workers
#      still built their data (3 of 6 runs of three copies at once); and the
#      worker is stopped only once the chief trains, never during the start.
# Usage: async_example_test.sh MPIEXEC RESNET_CIFAR10 WORKDIR
set -uo pipefail
MPIEXEC=$1 EXAMPLE=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }

timeout 120 "$MPIEXEC" -np 3 --oversubscribe "$EXAMPLE" --job-dir "$WORK/bad" --num-gpus 0 --num-layers 8 \
  --num-ps 3 --train-steps 1 >"$WORK/bad.log" 2>&1
rc=$?
cat "$WORK/bad.log"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "--num-ps 3 with -np 3 was not refused (exit $rc)"
grep -q "\-\-num-ps 3 with mpirun -np 3 leaves no worker" "$WORK/bad.log" || fail "no --num-ps message"
[ "$(grep -c 'leaves no worker' "$WORK/bad.log")" -eq 1 ] || fail "the message was printed by more than one rank"

JOB="$WORK/job"
BASE=(--num-gpus 0 --num-layers 8 --train-batch-size 16 --synthetic-examples 256 --data-format channels_last
  --save-checkpoints-steps 20 --save-checkpoints-secs 0 --num-ps 1 --learning-rate 0.05)
ARGS=(--job-dir "$JOB" "${BASE[@]}" --collective-timeout 60)
timeout 200 "$MPIEXEC" -np 3 --oversubscribe "$EXAMPLE" "${ARGS[@]}" --train-steps 200 \
  --startup-delay-steps 10 >"$WORK/one.log" 2>&1 || { cat "$WORK/one.log"; fail "the asynchronous run failed"; }
cat "$WORK/one.log"
# TF-Slim's startup_delay_steps: worker 1 starts at global step 10; the chief at once.
grep -q "^worker 1 (rank 2) started at global step 10 (--startup-delay-steps)" "$WORK/one.log" ||
  fail "worker 1 did not wait for global step 10"
grep -q "^worker 0 (rank 1) started at global step" "$WORK/one.log" && fail "the chief waited"
grep -q "asynchronous: 1 parameter server(s) and 2 workers of batch 16 each" "$WORK/one.log" ||
  fail "the run did not say it is asynchronous"
grep -q "^parameter server (rank 0): [0-9]* updates" "$WORK/one.log" || fail "no parameter server report"
for w in 0 1; do
  n=$(sed -n "s/^worker $w (rank [0-9]*): \([0-9]*\) updates.*/\1/p" "$WORK/one.log")
  [ -n "$n" ] && [ "$n" -gt 0 ] || fail "worker $w pushed no update"
done
# The chief's logged losses (LoggingHook: its first step, then the first
# step at or past each multiple of 100): the last below the first. 200 steps,
# so the chief crosses step 100 whatever the other worker did; at 100 steps
# the other worker may push the 100th update and the chief never logs again.
losses=$(sed -n 's/^step = [0-9]*, loss = \([0-9.]*\),.*/\1/p' "$WORK/one.log")
[ "$(echo "$losses" | wc -l)" -ge 2 ] || fail "fewer than two loss lines"
first=$(echo "$losses" | head -1) last=$(echo "$losses" | tail -1)
echo "chief's loss: $first -> $last"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || fail "the loss did not fall ($first -> $last)"
[ "$(grep -c 'accuracy = ' "$WORK/one.log")" -eq 1 ] || fail "not exactly one evaluation (the chief's)"
step=$(sed -n 's/.*accuracy = .*global_step = \([0-9]*\).*/\1/p' "$WORK/one.log")
[ -n "$step" ] && [ "$step" -ge 200 ] && [ "$step" -le 201 ] || fail "final global step '$step' (200 or 201 expected)"
latest=$(sed -n 's/^model_checkpoint_path: "model.ckpt-\([0-9]*\).safetensors"/\1/p' "$JOB/checkpoint")
[ "$latest" = "$step" ] || fail "the last checkpoint ($latest) is not the final step ($step)"

timeout 200 "$MPIEXEC" -np 3 --oversubscribe "$EXAMPLE" "${ARGS[@]}" --train-steps $((step + 20)) \
  >"$WORK/two.log" 2>&1 || { cat "$WORK/two.log"; fail "the resumed run failed"; }
cat "$WORK/two.log"
grep -q "Restored .*model.ckpt-$step.safetensors (global step $step)" "$WORK/two.log" ||
  fail "the restart did not resume from checkpoint $step"
step2=$(sed -n 's/.*accuracy = .*global_step = \([0-9]*\).*/\1/p' "$WORK/two.log")
[ -n "$step2" ] && [ "$step2" -ge $((step + 20)) ] || fail "the restart did not reach step $((step + 20))"
echo "resume: from step $step to $step2"

# A worker that stops answering (SIGSTOP on rank 2): the chief trains on
# alone to the end, then the server waits for the silent worker's "done"
# until --collective-timeout, says so naming its rank, and the job ends.
# Training lasts 10 s (--max-seconds; each asynchronous worker stops so),
# not a number of steps: 30 steps took 0.2 s on an idle machine, so rank 2
# could finish before the test stopped it (1 of 11 rounds of ctest -j3).
STALL=(--num-gpus 0 --num-layers 8 --train-batch-size 16 --synthetic-examples 256 --data-format channels_last
  --save-checkpoints-steps 1000000 --save-checkpoints-secs 0 --num-ps 1 --learning-rate 0.05)
"$MPIEXEC" -np 3 --oversubscribe "$EXAMPLE" --job-dir "$WORK/stall" "${STALL[@]}" --train-steps 1000000 \
  --max-seconds 10 --collective-timeout 3 >"$WORK/stall.log" 2>&1 &
mpipid=$!
victim="" server="" training=""
for _ in $(seq 1 1500); do  # ranks 2 and 0: the children of mpirun whose environment says so
  [ -n "$victim" ] && [ -n "$server" ] || for p in $(pgrep -P $mpipid); do
    r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ "$r" = 2 ] && victim=$p
    [ "$r" = 0 ] && server=$p
  done
  # The chief's first step: the start's collectives are over (the server
  # answers a pull only once it holds the chief's state), so the stop lands
  # in training.
  grep -q "^step = " "$WORK/stall.log" && training=1 && break
  kill -0 $mpipid 2>/dev/null || break
  sleep 0.2
done
if [ -z "$victim" ] || [ -z "$server" ] || [ -z "$training" ]; then
  kill $mpipid 2>/dev/null
  wait $mpipid
  cat "$WORK/stall.log"
  fail "the job did not start training within 300 s (the processes of rank 2: '${victim}', rank 0: '${server}')"
fi
kill -STOP "$victim"
# The server names the silent worker and calls MPI_Abort. What follows is
# Open MPI's: ending a job one of whose ranks was stopped by SIGSTOP in the
# middle of its MPI calls. It did not always manage (one run in three waited
# past ctest's limit, so the test kills the stopped worker once the server
# has spoken), and even with the worker killed, Open MPI 4.1.4 twice in 27
# rounds of ctest -j3 left the server inside MPI_Abort and mpirun running for
# 90 s after the server's message. So the test checks cifarnet's part — the
# server's message, and no exit status 0 — and, when the job outlives the
# message by 30 s, ends mpirun and the ranks left itself and says so. (A rank
# that dies or hangs without SIGSTOP ending the job is
# distributed.dead_or_hung_rank_ends_the_job.)
for _ in $(seq 1 600); do
  grep -qE "did not (arrive|complete) within" "$WORK/stall.log" && break
  kill -0 $mpipid 2>/dev/null || break
  sleep 0.2
done
kill -KILL "$victim" 2>/dev/null
ended="mpirun ended the job itself"
if ! timeout 30 tail --pid=$mpipid -f /dev/null; then
  kill -0 $server 2>/dev/null && where="the server still in MPI_Abort" || where="the server gone"
  echo "note: mpirun was still running 30 s after the server's message ($where); the test ends it and its ranks"
  for p in $(pgrep -P $mpipid); do kill -KILL $p 2>/dev/null; done
  kill -KILL $mpipid 2>/dev/null
  ended="the test ended what Open MPI left running"
fi
wait $mpipid
rc=$?
cat "$WORK/stall.log"
[ $rc -ne 0 ] || fail "the job exited 0 with a silent worker"
# (arrive: nothing came; complete: the worker stopped inside a push the
# server had begun to receive.)
grep -qE "resnet_cifar10: rank 0: .*parameter server: the next message from a worker did not (arrive|complete) within 3 s on rank 0 of 3" \
  "$WORK/stall.log" || fail "the server did not name the silent worker's timeout"
echo "silent worker: mpirun exited with $rc ($ended)"
echo PASS
