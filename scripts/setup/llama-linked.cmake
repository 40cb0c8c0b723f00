# The targets llama.cpp's tools link against (llama, ggml, llama-common, cpp-httplib and the
# vendored libraries), taken from the llama-cpp-sys-2 crate's own build instead of compiled a
# second time: scripts/setup/llama-tool.sh includes this file where the tool it builds is for the
# CPU backend on this CPU, so that the anchor runs the very objects Catena links (on a fresh 2-core
# machine the second compile took 7 minutes). The including project sets
#   LLAMA_PREFIX  the crate's OUT_DIR: llama.cpp's install (include/, lib/, lib/cmake/) and its
#                 CMake build folder (build/), where the libraries llama.cpp does not install are
#   LLAMA_SRC     the llama.cpp tree the crate compiled (headers of common and vendor/, and mtmd's
#                 sources: the crate does not build the multimodal library, the server needs it)
# What llama.cpp installs comes through its own package files (ggml's backends with their
# OpenMP and Vulkan link interfaces); the rest repeats the usage requirements of llama.cpp's
# common/ and vendor/ CMake files, with what the crate's build decided read from its cache
# (OpenSSL in cpp-httplib changes that library's classes, so it must match).

set(llama_build "${LLAMA_PREFIX}/build")
foreach(required "${LLAMA_PREFIX}/lib/cmake/llama/llama-config.cmake" "${llama_build}/CMakeCache.txt"
        "${LLAMA_SRC}/common/common.h" "${LLAMA_SRC}/tools/mtmd/CMakeLists.txt")
  if(NOT EXISTS "${required}")
    message(FATAL_ERROR "llama-linked.cmake: ${required} is missing (LLAMA_PREFIX or LLAMA_SRC is wrong)")
  endif()
endforeach()

find_package(Threads REQUIRED)
set(ggml_DIR "${LLAMA_PREFIX}/lib/cmake/ggml" CACHE PATH "ggml's package files, from the crate's build" FORCE)
find_package(llama REQUIRED CONFIG PATHS "${LLAMA_PREFIX}/lib/cmake/llama" NO_DEFAULT_PATH)
# What llama.cpp's own top-level CMake file defines for the subprojects below.
set(LLAMA_VERSION_BASE "${llama_VERSION}")
set(LLAMA_VERSION_MAJOR "${llama_VERSION_MAJOR}")
load_cache("${llama_build}" READ_WITH_PREFIX crate_ LLAMA_SUBPROCESS OPENSSL_VERSION_SUPPORTED
  LLAMA_OPENSSL OPENSSL_SSL_LIBRARY OPENSSL_CRYPTO_LIBRARY)
set(LLAMA_SUBPROCESS "${crate_LLAMA_SUBPROCESS}")

# mtmd links the name `ggml` (llama.cpp's own target); here it is the installed package's.
add_library(ggml INTERFACE)
target_link_libraries(ggml INTERFACE ggml::ggml)

# The header-only vendored libraries: their folder on the include path, as vendor/*/CMakeLists.txt.
foreach(name nlohmann sheredom stb miniaudio)
  add_library(${name} INTERFACE)
  target_include_directories(${name} INTERFACE "${LLAMA_SRC}/vendor")
  add_library(vendor::${name} ALIAS ${name})
endforeach()

# llama_linked_static NAME FILE: one of the static libraries the crate's build made but llama.cpp
# does not install, as an imported target.
function(llama_linked_static name file)
  if(NOT EXISTS "${llama_build}/${file}")
    message(FATAL_ERROR "llama-linked.cmake: the crate's build has no ${file}")
  endif()
  add_library(${name} STATIC IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES IMPORTED_LOCATION "${llama_build}/${file}"
    IMPORTED_LINK_INTERFACE_LANGUAGES CXX)
endfunction()

llama_linked_static(vendor-hash vendor/hash/libvendor-hash.a)
target_include_directories(vendor-hash INTERFACE "${LLAMA_SRC}/vendor")
add_library(vendor::hash ALIAS vendor-hash)

llama_linked_static(cpp-httplib vendor/cpp-httplib/libcpp-httplib.a)
target_link_libraries(cpp-httplib INTERFACE Threads::Threads)
if(crate_LLAMA_OPENSSL AND crate_OPENSSL_VERSION_SUPPORTED)
  target_compile_definitions(cpp-httplib INTERFACE CPPHTTPLIB_OPENSSL_SUPPORT)
  target_link_libraries(cpp-httplib INTERFACE "${crate_OPENSSL_SSL_LIBRARY}" "${crate_OPENSSL_CRYPTO_LIBRARY}")
endif()
add_library(vendor::cpp-httplib ALIAS cpp-httplib)

llama_linked_static(llama-common-base common/libllama-common-base.a)
target_include_directories(llama-common-base INTERFACE "${LLAMA_SRC}/common")

llama_linked_static(llama-common common/libllama-common.a)
target_include_directories(llama-common INTERFACE "${LLAMA_SRC}/common")
target_link_libraries(llama-common INTERFACE vendor::nlohmann vendor::sheredom llama-common-base
  cpp-httplib llama Threads::Threads)
target_compile_features(llama-common INTERFACE cxx_std_17)
if(LLAMA_SUBPROCESS)
  target_compile_definitions(llama-common INTERFACE LLAMA_SUBPROCESS)
endif()

add_subdirectory("${LLAMA_SRC}/tools/mtmd" mtmd)
