# aot_add_model(<target> MODEL <file.onnx> [DATA <file>] [TARGET <preset|file.toml>] [BACKEND c|llvm]
#               [NAME <name>] [OPTIONS <aot compile options>...])
#
# Compiles the model with `aot compile` when the build runs, and again whenever the model, its
# DATA file, the arguments, the C compiler settings or the aot version change; <target> is a
# static library the application links:  target_link_libraries(my_app PRIVATE <target>)
# Its include folder holds the package's header, <name>.h (name: NAME, else the model's file name).
#
# Design: the package's files depend on the model (its weights format, thread pool and LLVM
# objects), so the library is built by the package's own CMakeLists.txt in a build tree of its own,
# with this project's compiler and toolchain, and imported here: rebuilds stay incremental (the
# nested tree persists) and use exactly the flags the package chose.
#
# Cache variables: AOT_EXECUTABLE (the aot program) or AOT_PYTHON (a Python with aot installed,
# run as `python -m aot`).

set(_AOT_MODULE_DIR "${CMAKE_CURRENT_LIST_DIR}")

# The command that runs aot, as a list: AOT_PYTHON -m aot, else AOT_EXECUTABLE, else the aot of
# the Python installation holding this folder, else a Python on PATH whose aot is this one.
function(_aot_command out)
  if(AOT_PYTHON)
    set(${out} "${AOT_PYTHON};-m;aot" PARENT_SCOPE)
    return()
  endif()
  # <prefix>/lib/pythonX.Y/site-packages/aot/cmake -> <prefix>/bin; a source checkout's .venv.
  get_filename_component(_prefix "${_AOT_MODULE_DIR}/../../../../.." ABSOLUTE)
  get_filename_component(_checkout "${_AOT_MODULE_DIR}/../.." ABSOLUTE)
  find_program(AOT_EXECUTABLE aot HINTS "${_prefix}/bin" "${_prefix}/Scripts" "${_checkout}/.venv/bin"
               DOC "The aot program that aot_add_model runs")
  if(AOT_EXECUTABLE)
    set(${out} "${AOT_EXECUTABLE}" PARENT_SCOPE)
    return()
  endif()
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND "${Python3_EXECUTABLE}" -m aot --cmake-dir OUTPUT_VARIABLE _dir
                    RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_rc EQUAL 0)
      file(REAL_PATH "${_dir}" _dir)
      file(REAL_PATH "${_AOT_MODULE_DIR}" _here)
      if(_dir STREQUAL _here)
        set(AOT_PYTHON "${Python3_EXECUTABLE}" CACHE FILEPATH "A Python with aot installed (runs python -m aot)")
        set(${out} "${Python3_EXECUTABLE};-m;aot" PARENT_SCOPE)
        return()
      endif()
    endif()
  endif()
  message(FATAL_ERROR "aot_add_model: no aot program found (not on PATH nor next to ${_AOT_MODULE_DIR}); "
                      "activate the environment aot is installed in (. .venv/bin/activate), or set "
                      "-DAOT_EXECUTABLE=<path to aot> or -DAOT_PYTHON=<python with aot installed>")
endfunction()

# The settings of this project's C compiler that the package's own build must share, as -D arguments.
function(_aot_forwarded_cmake_args out)
  set(_args -G "${CMAKE_GENERATOR}" -DBUILD_SHARED_LIBS=OFF)
  if(CMAKE_GENERATOR_PLATFORM)
    list(APPEND _args -A "${CMAKE_GENERATOR_PLATFORM}")
  endif()
  if(CMAKE_GENERATOR_TOOLSET)
    list(APPEND _args -T "${CMAKE_GENERATOR_TOOLSET}")
  endif()
  foreach(_var CMAKE_MAKE_PROGRAM CMAKE_TOOLCHAIN_FILE CMAKE_C_COMPILER CMAKE_C_COMPILER_TARGET
               CMAKE_C_COMPILER_LAUNCHER CMAKE_SYSROOT CMAKE_AR CMAKE_RANLIB CMAKE_C_FLAGS
               CMAKE_BUILD_TYPE CMAKE_POSITION_INDEPENDENT_CODE CMAKE_OSX_ARCHITECTURES CMAKE_OSX_SYSROOT)
    if(DEFINED ${_var} AND NOT "${${_var}}" STREQUAL "" AND NOT "${${_var}}" MATCHES "-NOTFOUND$")
      set(_value "${${_var}}")
      if(_var STREQUAL "CMAKE_TOOLCHAIN_FILE" AND NOT IS_ABSOLUTE "${_value}")
        # As CMake reads it: relative to the build tree, else to the source tree.
        get_filename_component(_value "${_value}" ABSOLUTE BASE_DIR "${CMAKE_BINARY_DIR}")
        if(NOT EXISTS "${_value}")
          get_filename_component(_value "${${_var}}" ABSOLUTE BASE_DIR "${CMAKE_SOURCE_DIR}")
        endif()
      endif()
      list(APPEND _args "-D${_var}=${_value}")
    endif()
  endforeach()
  set(${out} "${_args}" PARENT_SCOPE)
endfunction()

# Writes `content` to `path` only when it differs, so that depending on the file reruns the
# compile exactly when the arguments change.
function(_aot_write_if_changed path content)
  if(EXISTS "${path}")
    file(READ "${path}" _old)
    if(_old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${path}" "${content}")
endfunction()

# Stops the configure, naming the function, on arguments aot_add_model cannot use; sets _model
# and _depends (the model and its data file, absolute) in the caller.
function(_aot_check_arguments target)
  if(_AOT_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "aot_add_model(${target}): unknown arguments: ${_AOT_UNPARSED_ARGUMENTS} "
                        "(aot compile options go after OPTIONS)")
  endif()
  if(NOT _AOT_MODEL)
    message(FATAL_ERROR "aot_add_model(${target}): MODEL is required, e.g. aot_add_model(${target} MODEL model.onnx)")
  endif()
  if(TARGET "${target}")
    message(FATAL_ERROR "aot_add_model(${target}): a target named ${target} already exists")
  endif()
  if(_AOT_BACKEND AND NOT _AOT_BACKEND MATCHES "^(c|llvm)$")
    message(FATAL_ERROR "aot_add_model(${target}): BACKEND ${_AOT_BACKEND}: use c or llvm")
  endif()
  get_filename_component(_model "${_AOT_MODEL}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  set(_depends "${_model}")
  if(_AOT_DATA)
    get_filename_component(_data "${_AOT_DATA}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND _depends "${_data}")
  endif()
  foreach(_file IN LISTS _depends)
    get_source_file_property(_generated "${_file}" GENERATED)
    if(NOT EXISTS "${_file}" AND NOT _generated)
      message(FATAL_ERROR "aot_add_model(${target}): ${_file}: no such file")
    endif()
  endforeach()
  if(CMAKE_CROSSCOMPILING AND NOT _AOT_TARGET)
    message(WARNING "aot_add_model(${target}): cross-compiling without TARGET: the model is tuned for "
                    "the machine that builds it; pass TARGET <preset> (see `aot targets`)")
  endif()
  set(_model "${_model}" PARENT_SCOPE)
  set(_depends "${_depends}" PARENT_SCOPE)
endfunction()

# The target the application links: the library the build step makes, the package's folder for
# "<name>.h", and the libraries the package's code needs.
function(_aot_imported_library target library include_dir threads)
  add_library(${target} STATIC IMPORTED GLOBAL)
  set(_links "")
  if(threads)
    find_package(Threads REQUIRED)
    # The library target is global, so the thread library it names must be visible everywhere too.
    set_target_properties(Threads::Threads PROPERTIES IMPORTED_GLOBAL TRUE)
    list(APPEND _links Threads::Threads)
  endif()
  if(NOT MSVC)
    list(APPEND _links m)
  endif()
  set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${library}"
                        IMPORTED_LINK_INTERFACE_LANGUAGES C
                        INTERFACE_INCLUDE_DIRECTORIES "${include_dir}"
                        INTERFACE_LINK_LIBRARIES "${_links}")
endfunction()

function(aot_add_model target)
  cmake_parse_arguments(PARSE_ARGV 1 _AOT "" "MODEL;DATA;TARGET;BACKEND;NAME" "OPTIONS")
  _aot_check_arguments(${target})
  set(_args "")
  foreach(_flag TARGET BACKEND NAME)
    if(_AOT_${_flag})
      string(TOLOWER "${_flag}" _option)
      list(APPEND _args "--${_option}" "${_AOT_${_flag}}")
    endif()
  endforeach()
  list(APPEND _args ${_AOT_OPTIONS})
  _aot_command(_aot)
  _aot_forwarded_cmake_args(_cmake_args)

  set(_base "${CMAKE_CURRENT_BINARY_DIR}/${target}_aot")
  set(_library "${_base}_build/out/${CMAKE_STATIC_LIBRARY_PREFIX}${target}${CMAKE_STATIC_LIBRARY_SUFFIX}")
  set(_config "${_base}_build/config.cmake")
  # Bracket arguments keep paths and options literal; the build step include()s this file.
  string(CONCAT _content
    "set(AOT_TARGET [==[${target}]==])\nset(AOT_COMMAND [==[${_aot}]==])\nset(AOT_MODEL [==[${_model}]==])\n"
    "set(AOT_ARGS [==[${_args}]==])\nset(AOT_PACKAGE_DIR [==[${_base}]==])\n"
    "set(AOT_BUILD_DIR [==[${_base}_build/tree]==])\nset(AOT_LIBRARY [==[${_library}]==])\n"
    "set(AOT_CMAKE_ARGS [==[${_cmake_args}]==])\nset(AOT_LIBRARY_PREFIX [==[${CMAKE_STATIC_LIBRARY_PREFIX}]==])\n"
    "set(AOT_LIBRARY_SUFFIX [==[${CMAKE_STATIC_LIBRARY_SUFFIX}]==])\n")
  _aot_write_if_changed("${_config}" "${_content}")
  # The package folder must exist for the include path; aot replaces an empty folder with --force.
  file(MAKE_DIRECTORY "${_base}")
  # aot's version.py changes with every install of aot: a new compiler recompiles the model.
  get_filename_component(_aot_version_file "${_AOT_MODULE_DIR}/../version.py" ABSOLUTE)
  add_custom_command(OUTPUT "${_library}"
                     COMMAND "${CMAKE_COMMAND}" "-DAOT_CONFIG=${_config}" -P "${_AOT_MODULE_DIR}/AotBuildModel.cmake"
                     DEPENDS ${_depends} "${_config}" "${_AOT_MODULE_DIR}/AotBuildModel.cmake" "${_aot_version_file}"
                     COMMENT "aot compile ${_AOT_MODEL} -> ${target}"
                     VERBATIM)
  add_custom_target(${target}_aot_compile DEPENDS "${_library}")
  set(_threads OFF)
  if("--parallel" IN_LIST _AOT_OPTIONS)
    set(_threads ON)
  endif()
  _aot_imported_library(${target} "${_library}" "${_base}" ${_threads})
  add_dependencies(${target} ${target}_aot_compile)
endfunction()
