# Build-time generators of the runtime facade.
#
#   rgpu_cudart_generate(IMPL_TARGET <object library> STUBS_VAR <var> ERRORS_VAR <var>)
#
# IMPL_TARGET is an OBJECT library holding every hand-written cudart source.
# Sets STUBS_VAR to the generated stub file (unsupported exports) and
# ERRORS_VAR to the generated CUDA error-text table; add both to the shared
# library's sources, together with $<TARGET_OBJECTS:IMPL_TARGET>.
set(RGPU_CUDART_GEN_DIR ${CMAKE_CURRENT_LIST_DIR})

function(rgpu_cudart_generate)
  cmake_parse_arguments(G "" "IMPL_TARGET;STUBS_VAR;ERRORS_VAR" "" ${ARGN})
  find_file(RGPU_REAL_CUDART libcudart.so.13
            PATHS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 NO_DEFAULT_PATH)
  if(NOT RGPU_REAL_CUDART)
    message(FATAL_ERROR "rgpu needs the CUDA 13 toolkit's libcudart.so.13 at build time "
                        "(to list its exports and error texts); not found in ${CUDAToolkit_LIBRARY_DIR}")
  endif()
  set(out ${CMAKE_CURRENT_BINARY_DIR}/gen)
  add_custom_command(
    OUTPUT ${out}/rgpu_cudart_stubs.c
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out}
    COMMAND ${Python3_EXECUTABLE} ${RGPU_CUDART_GEN_DIR}/gen_unsupported.py
            --exports ${RGPU_REAL_CUDART} --out ${out}/rgpu_cudart_stubs.c
            $<TARGET_OBJECTS:${G_IMPL_TARGET}>
    DEPENDS ${RGPU_CUDART_GEN_DIR}/gen_unsupported.py $<TARGET_OBJECTS:${G_IMPL_TARGET}>
    COMMAND_EXPAND_LISTS
    COMMENT "Generating cudaErrorNotSupported stubs for unimplemented libcudart exports")
  add_executable(rgpu_gen_error_strings ${RGPU_CUDART_GEN_DIR}/gen_error_strings.c)
  target_link_libraries(rgpu_gen_error_strings PRIVATE ${CMAKE_DL_LIBS})
  # The generator runs at build time; keep sanitizers out of it.
  target_compile_options(rgpu_gen_error_strings PRIVATE -fno-sanitize=all)
  target_link_options(rgpu_gen_error_strings PRIVATE -fno-sanitize=all)
  add_custom_command(
    OUTPUT ${out}/rgpu_cudart_errors.c
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out}
    COMMAND rgpu_gen_error_strings ${RGPU_REAL_CUDART} ${out}/rgpu_cudart_errors.c
    DEPENDS rgpu_gen_error_strings
    COMMENT "Generating CUDA error texts from the toolkit's libcudart")
  set(${G_STUBS_VAR} ${out}/rgpu_cudart_stubs.c PARENT_SCOPE)
  set(${G_ERRORS_VAR} ${out}/rgpu_cudart_errors.c PARENT_SCOPE)
endfunction()
