# train_fashion_mnist as a user runs it (cmake -P), one CASE per ctest test:
#   help      --help lists the program's flags
#   helpfull  --helpfull names main.cc by its path in the project, never the source tree's
#   progress_auto     --progress=auto prints a line per epoch and no escape sequence into a pipe
#   progress_bar      --progress=bar draws its bar even into a pipe, and prints the epochs' lines
#   progress_lines    --progress=lines prints the epochs' lines (each with its slowest replica),
#                     nothing else
#   progress_none     --progress=none prints neither, only the first and last lines
#   progress_invalid  an unknown --progress fails, naming the valid values
#   progress_mpirun   under mpirun -np 2 (MPIEXEC), whose children write to a pseudo-terminal:
#                     worker 0 alone prints the epochs' lines, and no escape sequence
#   timeline_mpirun   DISTRIBUTE_TIMELINE for both workers of mpirun -np 2 (2 replicas each): one
#                     file, written at exit, holding both workers' replicas and cross-worker tracks,
#                     which tools/timeline_steps.py sums per training step
#   metrics           --metrics writes the header and a row per epoch; --resume adds the next
#   metrics_unwritable a --metrics path that cannot be written ends the run before it trains
#   shard_optimizer_state  --shard_optimizer_state ends with the same accuracy and the same
#                     checkpoint, byte for byte, as the whole optimizer state; so does a resume in
#                     sharded state from the whole state's checkpoint
#   shard_optimizer_state_mpirun  so do two workers (mpirun -np 2) with their state in shards
#   checkpoint_dir    --checkpoint_dir keeps numbered checkpoints (--checkpoint_every steps too) and
#                     resumes from the newest; its flags' errors
#   hidden            --hidden trains an MLP of those widths, whose checkpoint a model of other
#                     widths refuses; widths that are not positive numbers fail, naming the value
#   overlap           --overlap (small buckets, several in flight) saves the checkpoint of one
#                     all-reduce, byte for byte, with whole and with sharded state; a bad --bucket_mb
#   overlap_mpirun    so do two workers (mpirun -np 2) with --overlap; and --compression=bf16 trains
#   compression_invalid  an unknown --compression fails, naming the valid values
#   gloo_workers      two plain processes (tests/launch_workers.sh: no mpirun, Gloo) save the same
#                     checkpoint, byte for byte, as one process with both replicas
#   elastic_refused   --elastic's malformed bounds, and its mixes with --checkpoint_dir and
#                     --shard_optimizer_state, fail saying what to change
#   cmake -DPROGRAM=.../train_fashion_mnist -DSOURCE_DIR=<project root> -DWORK_DIR=<scratch folder>
#         [-DMPIEXEC=mpirun] -DCASE=help -P train_cli_test.cmake
# The output is read through a pipe, as in a log. The cases that train need Debian's
# dataset-fashion-mnist and say "skipped: Fashion-MNIST is not installed" without it; they train
# 2 epochs of 256 images: about a second, 10-20 s under ThreadSanitizer (the evaluations on the
# 10,000 test images take most of it).
cmake_minimum_required(VERSION 3.25)

set(data_dir /usr/share/datasets/fashion-mnist)
set(train_args --data_dir=${data_dir} --epochs=2 --train_limit=256 --checkpoint=${WORK_DIR}/checkpoint.safetensors)
string(ASCII 27 escape)

include(${CMAKE_CURRENT_LIST_DIR}/cli_test_functions.cmake)

# Fails with `message` unless files a and b hold the same bytes.
function(expect_same_file a b message)
  file(SHA256 ${a} a_sum)
  file(SHA256 ${b} b_sum)
  if(NOT a_sum STREQUAL b_sum)
    message(FATAL_ERROR "${message}")
  endif()
endfunction()

# Expects `count` lines "epoch k/2: loss ..." in text.
function(expect_epoch_lines text count)
  string(REGEX MATCHALL "epoch [12]/2: loss [^\n]*\n" lines "${text}")
  list(LENGTH lines n)
  if(NOT n EQUAL count)
    message(FATAL_ERROR "${n} lines of an epoch's summary where ${count} were expected")
  endif()
endfunction()

# A bar redraws its line with a carriage return and an escape sequence; a log has neither.
function(expect_no_redraw text)
  string(FIND "${text}" "${escape}" at_escape)
  string(FIND "${text}" "\r" at_return)
  if(NOT at_escape EQUAL -1 OR NOT at_return EQUAL -1)
    message(FATAL_ERROR "the output redraws a line (an escape character at ${at_escape}, a carriage return at "
                        "${at_return}; -1: none)")
  endif()
endfunction()

# Expects the CSV file at `path` to be the header and a row of 7 numbers for each epoch 1..count.
function(expect_metrics path count)
  file(STRINGS ${path} lines)
  list(POP_FRONT lines header)
  if(NOT header STREQUAL "epoch,train_loss,test_accuracy,samples_per_second,collective_share,input_share,seconds")
    message(FATAL_ERROR "the metrics' header is '${header}'")
  endif()
  list(LENGTH lines n)
  if(NOT n EQUAL count)
    message(FATAL_ERROR "${n} rows of metrics where ${count} were expected")
  endif()
  set(number "[0-9]+(\\.[0-9]+)?(e[-+][0-9]+)?")
  set(epoch 0)
  foreach(row IN LISTS lines)
    math(EXPR epoch "${epoch} + 1")
    string(REPLACE "," ";" fields "${row}")
    list(LENGTH fields n)
    list(GET fields 0 first)
    if(NOT n EQUAL 7 OR NOT first STREQUAL epoch)
      message(FATAL_ERROR "row '${row}' is not epoch ${epoch}'s 7 numbers")
    endif()
    foreach(field IN LISTS fields)
      if(NOT field MATCHES "^${number}$")
        message(FATAL_ERROR "row '${row}': '${field}' is not a number")
      endif()
    endforeach()
  endforeach()
endfunction()

if(CASE MATCHES "^(progress_(auto|bar|lines|none|mpirun)|timeline_mpirun|metrics.*|hidden|overlap.*|gloo_workers)$")
  prepare_training()
endif()

if(CASE STREQUAL "help")
  expect_help(examples/fashion_mnist/main.cc epochs replicas batch_size checkpoint resume hidden overlap bucket_mb
              compression)
elseif(CASE STREQUAL "helpfull")
  run(--helpfull)
  expect_in("${out}" "Flags from examples/fashion_mnist/main.cc:")
  # Abseil drops a leading slash, so the source tree would show without its first one.
  string(REGEX REPLACE "^/+" "" tree "${SOURCE_DIR}")
  expect_not_in("${out}" "${tree}")
elseif(CASE STREQUAL "progress_auto")
  run(${train_args} --replicas=2 --progress=auto)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "training failed")
  endif()
  expect_epoch_lines("${out}" 2)
  expect_no_redraw("${out}")
elseif(CASE STREQUAL "progress_bar")
  run(${train_args} --replicas=2 --progress=bar)
  expect_in("${out}" "\r${escape}[Kepoch 1/2 [")
  expect_epoch_lines("${out}" 2)
elseif(CASE STREQUAL "progress_lines")
  run(${train_args} --replicas=2 --progress=lines)
  expect_epoch_lines("${out}" 2)
  expect_no_redraw("${out}")
  # Each epoch's straggler figure follows its line.
  string(REGEX MATCHALL "\n  slowest: replica [01], last in [0-9]+ % of collectives\n" slowest "${out}")
  list(LENGTH slowest n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "${n} lines of an epoch's slowest replica where 2 were expected")
  endif()
elseif(CASE STREQUAL "progress_none")
  run(${train_args} --replicas=2 --progress=none)
  expect_epoch_lines("${out}" 0)
  expect_in("${out}" "test accuracy 0.")
elseif(CASE STREQUAL "progress_invalid")
  run(--progress=fancy)
  if(rc EQUAL 0)
    message(FATAL_ERROR "--progress=fancy was accepted")
  endif()
  expect_in("${out}" "'fancy'")
  expect_in("${out}" "auto, bar, lines, none")
elseif(CASE STREQUAL "metrics")
  run(${train_args} --replicas=2 --metrics=${WORK_DIR}/metrics.csv)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "training failed")
  endif()
  expect_metrics(${WORK_DIR}/metrics.csv 2)
  file(STRINGS ${WORK_DIR}/metrics.csv before)
  run(${train_args} --replicas=2 --metrics=${WORK_DIR}/metrics.csv --resume --epochs=3)
  expect_metrics(${WORK_DIR}/metrics.csv 3)
  file(STRINGS ${WORK_DIR}/metrics.csv after)
  list(SUBLIST after 0 3 kept)
  if(NOT kept STREQUAL before)
    message(FATAL_ERROR "the resumed run changed the first two epochs' rows")
  endif()
elseif(CASE STREQUAL "metrics_unwritable")
  run(${train_args} --replicas=2 --metrics=${WORK_DIR}/no_such_folder/metrics.csv)
  if(rc EQUAL 0)
    message(FATAL_ERROR "the run succeeded without its metrics file")
  endif()
  expect_in("${out}" "${WORK_DIR}/no_such_folder/metrics.csv: cannot open it for writing (No such file or directory)")
  expect_epoch_lines("${out}" 0)
elseif(CASE STREQUAL "shard_optimizer_state")
  file(MAKE_DIRECTORY ${WORK_DIR})
  set(args --data_dir=${data_dir} --train_limit=256 --progress=none)
  run(${args} --epochs=2 --replicas=2 --checkpoint=${WORK_DIR}/whole.safetensors)
  string(REGEX MATCH "test accuracy [0-9.]+" whole "${out}")
  run(${args} --epochs=2 --replicas=2 --shard_optimizer_state --checkpoint=${WORK_DIR}/sharded.safetensors)
  string(REGEX MATCH "test accuracy [0-9.]+" sharded "${out}")
  if(whole STREQUAL "" OR NOT sharded STREQUAL whole)
    message(FATAL_ERROR "sharded state gave '${sharded}' where whole state gave '${whole}'")
  endif()
  expect_same_file(${WORK_DIR}/whole.safetensors ${WORK_DIR}/sharded.safetensors
                   "the checkpoints of whole and sharded state differ")
  # Epoch 1 with whole state, then epoch 2 resumed with sharded state: the same end.
  run(${args} --epochs=1 --replicas=2 --checkpoint=${WORK_DIR}/mixed.safetensors)
  run(${args} --epochs=2 --replicas=2 --shard_optimizer_state --resume --checkpoint=${WORK_DIR}/mixed.safetensors)
  expect_same_file(${WORK_DIR}/whole.safetensors ${WORK_DIR}/mixed.safetensors
                   "resuming whole state as sharded state changed the result")
elseif(CASE STREQUAL "checkpoint_dir")
  set(args --data_dir=${data_dir} --train_limit=256 --progress=none --replicas=2 --checkpoint_dir=${WORK_DIR}/run)
  file(REMOVE_RECURSE ${WORK_DIR})
  run(${args} --epochs=1 --checkpoint_every=1)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the run with --checkpoint_dir failed")
  endif()
  # 2 steps of 128: saved after step 1 and step 2 (the epoch's end), 3 kept at most.
  file(GLOB kept RELATIVE ${WORK_DIR}/run ${WORK_DIR}/run/ckpt-*.safetensors)
  list(SORT kept)
  if(NOT kept STREQUAL "ckpt-1.safetensors;ckpt-2.safetensors")
    message(FATAL_ERROR "--checkpoint_every=1 kept '${kept}'")
  endif()
  run(${args} --epochs=2)
  expect_in("${out}" "resumed from ${WORK_DIR}/run/ckpt-2.safetensors at step 2 (epoch 2, step 0 of it)")
  expect_in("${out}" "after 2 epochs; checkpoint: ${WORK_DIR}/run/ckpt-4.safetensors")
  run(${args} --epochs=1 --resume)
  expect_in("${out}" "--checkpoint_dir keeps its own checkpoints and resumes from them: drop --checkpoint and --resume")
  run(--data_dir=${data_dir} --checkpoint_every=5)
  expect_in("${out}" "--checkpoint_every=5: give a number of steps >= 0, with --checkpoint_dir")
elseif(CASE STREQUAL "hidden")
  run(${train_args} --replicas=2 --progress=none --hidden=64,32,16)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "training with --hidden=64,32,16 failed")
  endif()
  expect_in("${out}" "MLP 784-64-32-16-10 on Fashion-MNIST")
  run(${train_args} --replicas=2 --progress=none --hidden=64,32 --resume --epochs=3)
  if(rc EQUAL 0)
    message(FATAL_ERROR "a checkpoint of 784-64-32-16-10 was restored into 784-64-32-10")
  endif()
  expect_in("${out}" "'dense_3/kernel': shape (32, 16) in the file, (32, 10) in the checkpoint")
  foreach(bad "" "0" "64,-8" "64,wide" "64,,32")
    run(--hidden=${bad})
    if(rc EQUAL 0)
      message(FATAL_ERROR "--hidden=${bad} was accepted")
    endif()
    expect_in("${out}" "Illegal value '${bad}' specified for flag 'hidden'")
  endforeach()
  run(--hidden=)
  expect_in("${out}" "give at least one width, e.g. 256,128")
  run(--hidden=64,wide)
  expect_in("${out}" "'wide' is not a width; widths are whole numbers >= 1")
elseif(CASE STREQUAL "overlap")
  set(args --data_dir=${data_dir} --train_limit=256 --progress=none --epochs=2 --replicas=2)
  foreach(state "" "--shard_optimizer_state")
    run(${args} ${state} --checkpoint=${WORK_DIR}/one.safetensors)
    run(${args} ${state} --overlap --bucket_mb=0.004 --checkpoint=${WORK_DIR}/buckets.safetensors)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "training with --overlap ${state} failed")
    endif()
    expect_same_file(${WORK_DIR}/one.safetensors ${WORK_DIR}/buckets.safetensors
                     "--overlap ${state} saved another checkpoint than one all-reduce")
  endforeach()
  run(${args} --overlap --bucket_mb=0)
  expect_in("${out}" "--bucket_mb=0: give a number of MiB of at least one byte, e.g. 25 or 0.5")
elseif(CASE STREQUAL "overlap_mpirun")
  set(args --data_dir=${data_dir} --train_limit=256 --progress=none --epochs=2)
  run(${args} --replicas=2 --checkpoint=${WORK_DIR}/one.safetensors)
  foreach(state "" "--shard_optimizer_state")
    execute_process(COMMAND ${MPIEXEC} --oversubscribe --bind-to none -np 2 ${PROGRAM} ${args} --replicas=1
                            --multi_worker --overlap --bucket_mb=0.004 ${state}
                            --checkpoint=${WORK_DIR}/workers.safetensors
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "mpirun -np 2 with --overlap ${state} failed (exit ${rc}):\n${out}")
    endif()
    expect_same_file(${WORK_DIR}/one.safetensors ${WORK_DIR}/workers.safetensors
                     "two workers with --overlap ${state} saved another checkpoint than one all-reduce")
  endforeach()
  execute_process(COMMAND ${MPIEXEC} --oversubscribe --bind-to none -np 2 ${PROGRAM} ${args} --replicas=1
                          --multi_worker --overlap --compression=bf16 --checkpoint=${WORK_DIR}/bf16.safetensors
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mpirun -np 2 with --compression=bf16 failed (exit ${rc}):\n${out}")
  endif()
  expect_in("${out}" "test accuracy 0.")
elseif(CASE STREQUAL "gloo_workers")
  set(args --data_dir=${data_dir} --train_limit=256 --progress=none --epochs=2)
  run(${args} --replicas=2 --checkpoint=${WORK_DIR}/one.safetensors)
  execute_process(COMMAND ${SOURCE_DIR}/tests/launch_workers.sh -n 2 -- ${PROGRAM} ${args} --replicas=1
                          --multi_worker --checkpoint=${WORK_DIR}/workers.safetensors
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "two workers over Gloo failed (exit ${rc}):\n${out}")
  endif()
  expect_in("${out}" "MultiWorkerMirroredStrategy(worker 0 of 2 over Gloo: CPU:0)")
  expect_same_file(${WORK_DIR}/one.safetensors ${WORK_DIR}/workers.safetensors
                   "two workers over Gloo saved another checkpoint than one worker with both replicas")
elseif(CASE STREQUAL "elastic_refused")
  run(--elastic=3:2)
  expect_in("${out}" "Illegal value '3:2' specified for flag 'elastic'")
  expect_in("${out}" "give the least and the most workers as MIN:MAX, 1 <= MIN <= MAX, e.g. 2:4")
  run(--elastic=2:3 --checkpoint_dir=${WORK_DIR}/run)
  expect_in("${out}" "--elastic keeps the job's state in memory across changes of its workers: drop --checkpoint_dir")
  run(--elastic=2:3 --shard_optimizer_state)
  expect_in("${out}" "--elastic with --shard_optimizer_state: the optimizer's shards are cut for the replicas it")
  if(rc EQUAL 0)
    message(FATAL_ERROR "--elastic with --shard_optimizer_state was accepted")
  endif()
elseif(CASE STREQUAL "compression_invalid")
  run(--compression=int8)
  if(rc EQUAL 0)
    message(FATAL_ERROR "--compression=int8 was accepted")
  endif()
  expect_in("${out}" "Illegal value 'int8' specified for flag 'compression'")
  expect_in("${out}" "unknown compression 'int8'; use none, bf16 or fp16")
elseif(CASE STREQUAL "shard_optimizer_state_mpirun")
  # Two workers of one replica each, state in shards: the checkpoint is collective, and the same.
  file(MAKE_DIRECTORY ${WORK_DIR})
  set(args --data_dir=${data_dir} --train_limit=256 --progress=none --epochs=2)
  run(${args} --replicas=2 --checkpoint=${WORK_DIR}/whole.safetensors)
  execute_process(COMMAND ${MPIEXEC} --oversubscribe --bind-to none -np 2 ${PROGRAM} ${args} --replicas=1
                          --multi_worker --shard_optimizer_state --checkpoint=${WORK_DIR}/workers.safetensors
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mpirun -np 2 with --shard_optimizer_state failed (exit ${rc}):\n${out}")
  endif()
  expect_same_file(${WORK_DIR}/whole.safetensors ${WORK_DIR}/workers.safetensors
                   "two workers with sharded state saved another checkpoint than one worker with whole state")
elseif(CASE STREQUAL "progress_mpirun")
  execute_process(COMMAND ${MPIEXEC} --oversubscribe --bind-to none -np 2 ${PROGRAM} ${train_args} --replicas=1
                          --multi_worker --progress=auto
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message(STATUS "mpirun -np 2 train_fashion_mnist: exit ${rc}\n${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "training failed")
  endif()
  expect_epoch_lines("${out}" 2)
  expect_no_redraw("${out}")
elseif(CASE STREQUAL "timeline_mpirun")
  execute_process(COMMAND ${MPIEXEC} --oversubscribe --bind-to none -np 2 -x DISTRIBUTE_TIMELINE=${WORK_DIR}/timeline.json
                          ${PROGRAM} ${train_args} --replicas=2 --multi_worker --progress=none
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message(STATUS "mpirun -np 2 train_fashion_mnist with DISTRIBUTE_TIMELINE: exit ${rc}\n${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "training failed")
  endif()
  file(READ ${WORK_DIR}/timeline.json trace)
  string(JSON workers GET "${trace}" otherData workers)
  if(NOT workers EQUAL 2)
    message(FATAL_ERROR "the timeline holds ${workers} workers where 2 were expected")
  endif()
  string(JSON missing ERROR_VARIABLE none GET "${trace}" otherData missing_workers)
  if(none STREQUAL "NOTFOUND")
    message(FATAL_ERROR "the timeline misses workers ${missing}")
  endif()
  foreach(track "worker 0 on " "worker 1 on " "\"replica 3\"" "\"cross-worker\"" "\"input\"" "\"program\"")
    expect_in("${trace}" "${track}")
  endforeach()
  find_program(PYTHON3 python3)
  if(NOT PYTHON3)
    message("skipped: no python3 to run tools/timeline_steps.py on the trace")
  else()
    execute_process(COMMAND ${PYTHON3} ${SOURCE_DIR}/tools/timeline_steps.py ${WORK_DIR}/timeline.json --skip 1
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    message(STATUS "tools/timeline_steps.py: exit ${rc}\n${out}")
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "tools/timeline_steps.py failed on the trace")
    endif()
    # Both workers' training steps; on each, its first replica's apply_gradients once a step and
    # the cross-worker thread's vote before each all_reduce and at each run's end.
    foreach(line "worker 0 on [^:]+: [0-9]+ steps of [0-9.]+ ms on average" "worker 1 on [^:]+: [0-9]+ steps of"
                 "replica 0 +apply_gradients +1\\.0 " "replica 2 +apply_gradients +1\\.0 "
                 "cross-worker +vote +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9.]+ ms \\([0-9.]+ %\\)")
      if(NOT out MATCHES "${line}")
        message(FATAL_ERROR "tools/timeline_steps.py printed no line matching \"${line}\"")
      endif()
    endforeach()
  endif()
else()
  message(FATAL_ERROR "unknown CASE '${CASE}'")
endif()
