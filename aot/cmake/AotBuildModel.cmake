# The build step of aot_add_model (cmake -DAOT_CONFIG=<config.cmake> -P AotBuildModel.cmake):
# compile the model into its package folder, build the package's library with the package's own
# CMakeLists.txt in a tree of its own, and copy the library where the imported target expects it.
cmake_minimum_required(VERSION 3.19)
include("${AOT_CONFIG}")

# The build log stays quiet unless a step fails; then it shows that step's own output.
execute_process(COMMAND ${AOT_COMMAND} compile "${AOT_MODEL}" -o "${AOT_PACKAGE_DIR}" --force ${AOT_ARGS}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _log ERROR_VARIABLE _log)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "aot_add_model(${AOT_TARGET}): aot compile ${AOT_MODEL} failed:\n${_log}")
endif()

file(READ "${AOT_PACKAGE_DIR}/manifest.json" _manifest)
string(JSON _name GET "${_manifest}" name)
string(TOUPPER "${_name}" _upper)

# Only the library: the runner and the install rules are off, as inside any other project.
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${AOT_PACKAGE_DIR}" -B "${AOT_BUILD_DIR}" ${AOT_CMAKE_ARGS}
                        "-D${_upper}_BUILD_RUNNER=OFF" "-D${_upper}_INSTALL=OFF"
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _log ERROR_VARIABLE _log)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "aot_add_model(${AOT_TARGET}): configuring the package ${AOT_PACKAGE_DIR} failed:\n${_log}")
endif()
set(_built "${AOT_BUILD_DIR}/${AOT_LIBRARY_PREFIX}${_name}${AOT_LIBRARY_SUFFIX}")
file(READ "${AOT_BUILD_DIR}/CMakeCache.txt" _cache)
if(_cache MATCHES "CMAKE_CONFIGURATION_TYPES:")
  # Multi-config generators (Visual Studio, Xcode) put the library in a folder per configuration.
  set(_config_args --config Release)
  set(_built "${AOT_BUILD_DIR}/Release/${AOT_LIBRARY_PREFIX}${_name}${AOT_LIBRARY_SUFFIX}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${AOT_BUILD_DIR}" --target "${_name}" ${_config_args}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _log ERROR_VARIABLE _log)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "aot_add_model(${AOT_TARGET}): building the package ${AOT_PACKAGE_DIR} failed:\n${_log}")
endif()

get_filename_component(_out_dir "${AOT_LIBRARY}" DIRECTORY)
file(MAKE_DIRECTORY "${_out_dir}")
execute_process(COMMAND "${CMAKE_COMMAND}" -E copy "${_built}" "${AOT_LIBRARY}" RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "aot_add_model(${AOT_TARGET}): ${_built}: not built")
endif()
# A fresh time stamp even when the library's bytes did not change: the build saw this step run.
file(TOUCH "${AOT_LIBRARY}")
