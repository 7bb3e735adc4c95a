# train_torch_fashion_mnist as a user runs it (cmake -P), one CASE per ctest test:
#   train   --help lists the program's flags; 2 replicas train an epoch of 512 images with
#           --checkpoint_dir and --metrics, printing the epoch's line; a second run resumes from the
#           checkpoint for epoch 2 and adds its row; an unknown --optimizer fails, naming the choices
#   mpirun  two workers (mpirun -np 2, MPIEXEC) of one replica each train an epoch of 512 images
#           under MultiWorkerMirroredStrategy, worker 0 alone printing
#   python  2 replicas train an epoch of 512 images with --checkpoint_dir; PyTorch (PYTHON, with
#           Debian's python3-torch) loads the checkpoint by name into the same CNN written in Python
#           (load_in_python.py) and finds the test accuracy the program printed; without torch in
#           PYTHON it says "skipped: Python's torch is not installed"
#   cmake -DPROGRAM=.../train_torch_fashion_mnist -DWORK_DIR=<scratch folder> [-DMPIEXEC=mpirun]
#         [-DPYTHON=/usr/bin/python3] -DCASE=train -P train_cli_test.cmake
# The cases need Debian's dataset-fashion-mnist and say "skipped: Fashion-MNIST is not installed"
# without it. Each case takes 3-10 s in a Release build on 2 cores, most of it loading the data and
# evaluating on the 10,000 test images; ctest runs them in the default preset only (end_to_end).
cmake_minimum_required(VERSION 3.25)

set(data_dir /usr/share/datasets/fashion-mnist)
set(slice --data_dir=${data_dir} --train_limit=512 --progress=lines)

include(${CMAKE_CURRENT_LIST_DIR}/../fashion_mnist/cli_test_functions.cmake)

function(expect_success what)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc})")
  endif()
endfunction()

# Expects exactly the epoch lines "epoch k/epochs: loss ..." for k in `numbers`, and a test
# accuracy above chance (0.1) in the last.
function(expect_epochs text epochs numbers)
  string(REGEX MATCHALL "epoch [0-9]+/${epochs}: loss [0-9.]+, test accuracy 0\\.[0-9]+, [0-9]+ samples/s" lines
         "${text}")
  set(seen "")
  foreach(line IN LISTS lines)
    string(REGEX MATCH "^epoch ([0-9]+)" epoch "${line}")
    list(APPEND seen ${CMAKE_MATCH_1})
  endforeach()
  if(NOT seen STREQUAL "${numbers}")
    message(FATAL_ERROR "the epochs' lines are of epochs '${seen}' where '${numbers}' were expected")
  endif()
  string(REGEX MATCH "test accuracy (0\\.[0-9]+) after" last "${text}")
  if(NOT CMAKE_MATCH_1 GREATER 0.3)
    message(FATAL_ERROR "a test accuracy of '${CMAKE_MATCH_1}' after training; chance is 0.1")
  endif()
endfunction()

if(CASE STREQUAL "python")
  if(NOT PYTHON)
    set(PYTHON /usr/bin/python3)
  endif()
  execute_process(COMMAND ${PYTHON} -c "import numpy, torch" RESULT_VARIABLE has_torch OUTPUT_QUIET ERROR_QUIET)
  if(NOT has_torch EQUAL 0)
    message("skipped: Python's torch is not installed in ${PYTHON} (apt-get install python3-torch)")
    return()
  endif()
endif()

prepare_training()

if(CASE STREQUAL "train")
  expect_help(examples/torch_fashion_mnist/main.cc epochs replicas batch_size optimizer learning_rate
              learning_rate_decay checkpoint_dir metrics multi_worker progress)

  set(args ${slice} --replicas=2 --checkpoint_dir=${WORK_DIR}/run --metrics=${WORK_DIR}/metrics.csv)
  run(${args} --epochs=1)
  expect_success("training an epoch")
  expect_in("${out}" "on Fashion-MNIST (512 training, 10000 test images) with MirroredStrategy(CPU:0, CPU:1): 2 replicas")
  expect_epochs("${out}" 1 "1")
  # 8 steps of 64 images: the epoch's checkpoint is number 8.
  expect_in("${out}" "after 1 epochs; checkpoint: ${WORK_DIR}/run/ckpt-8.safetensors")

  run(${args} --epochs=2)
  expect_success("resuming for a second epoch")
  expect_in("${out}" "resumed from ${WORK_DIR}/run/ckpt-8.safetensors at step 8 (epoch 2, step 0 of it)")
  expect_epochs("${out}" 2 "2")
  file(STRINGS ${WORK_DIR}/metrics.csv rows)
  list(LENGTH rows n)
  list(GET rows 2 last)
  if(NOT n EQUAL 3 OR NOT last MATCHES "^2,")
    message(FATAL_ERROR "the metrics file holds '${rows}' where a header and epochs 1 and 2 were expected")
  endif()

  run(${slice} --optimizer=rmsprop)
  if(rc EQUAL 0)
    message(FATAL_ERROR "--optimizer=rmsprop was accepted")
  endif()
  expect_in("${out}" "optimizer \"rmsprop\" is not one of \"adam\" and \"sgd\"")
elseif(CASE STREQUAL "mpirun")
  run_command(${MPIEXEC} --oversubscribe --bind-to none -np 2 ${PROGRAM} ${slice} --epochs=1 --multi_worker --replicas=1)
  expect_success("mpirun -np 2")
  expect_in("${out}" "with MultiWorkerMirroredStrategy(worker 0 of 2 over MPI: CPU:0): 2 replicas")
  expect_epochs("${out}" 1 "1")
elseif(CASE STREQUAL "python")
  run(${slice} --replicas=2 --epochs=1 --checkpoint_dir=${WORK_DIR}/run)
  expect_success("training an epoch")
  string(REGEX MATCH "test accuracy (0\\.[0-9]+) after 1 epochs; checkpoint: ([^\n]+\\.safetensors)" line "${out}")
  if(NOT line)
    message(FATAL_ERROR "the program printed no final test accuracy and checkpoint")
  endif()
  set(accuracy ${CMAKE_MATCH_1})
  set(checkpoint ${CMAKE_MATCH_2})
  run_command(${PYTHON} ${CMAKE_CURRENT_LIST_DIR}/load_in_python.py --checkpoint=${checkpoint} --data_dir=${data_dir})
  expect_success("loading ${checkpoint} in Python")
  expect_in("${out}" "loaded 8 tensors by name (conv1.weight, conv1.bias, conv2.weight, conv2.bias, fc1.weight, fc1.bias, fc2.weight, fc2.bias)")
  # The same LibTorch kernels on the same weights: the same predictions, image for image.
  expect_in("${out}" "test accuracy ${accuracy}")
else()
  message(FATAL_ERROR "unknown CASE '${CASE}'")
endif()
