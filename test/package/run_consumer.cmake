# Installs horovod_cpp into a scratch prefix (or, with -DMODE=build_tree, uses the build
# directory as it is), then configures, builds and runs a tiny outside
# project that uses find_package(horovod_cpp).
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
if(MODE STREQUAL "build_tree")
  # No install: the consumer is pointed at the build directory.
  set(find_arg -Dhorovod_cpp_DIR=${BUILD_DIR})
else()
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                  RESULT_VARIABLE rc OUTPUT_QUIET)
  if(rc)
    message(FATAL_ERROR "install failed: ${rc}")
  endif()
  set(find_arg -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/test/package/consumer -B ${WORK_DIR}/build
                        ${find_arg}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${MPIEXEC} --oversubscribe --allow-run-as-root -np 2 ${WORK_DIR}/build/consumer
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message(STATUS "${out}")
if(rc)
  message(FATAL_ERROR "the consumer failed: ${rc}\n${err}")
endif()
