# find_package(aot) for CMake projects that compile ONNX models as part of their build:
#   cmake -S . -B build -Daot_DIR="$(aot --cmake-dir)"
#   find_package(aot REQUIRED)
#   aot_add_model(my_model MODEL my_model.onnx)          # see AotAddModel.cmake
#   target_link_libraries(my_app PRIVATE my_model)
# This folder ships inside the aot Python package, so the module and the compiler it runs are
# always the same version.
if(CMAKE_VERSION VERSION_LESS 3.19)
  set(aot_FOUND FALSE)
  set(aot_NOT_FOUND_MESSAGE "aot's CMake module needs CMake 3.19 or newer (this is ${CMAKE_VERSION})")
  return()
endif()
include("${CMAKE_CURRENT_LIST_DIR}/AotAddModel.cmake")
