# compile_fail.cmake — the compile-fail check of device memory's types
# (ctest unit_devmem_types): tests/compile/devmem_types.c compiled once per
# case, syntax only. Case 0 must compile; every other case must fail, and
# fail for the types: the compiler's message names devmem or devf32 and an
# incompatible type (not a missing header or a typo).
#
#   cmake -DCC=<compiler> -DSRC=<source dir> -DCASES=<n> -P compile_fail.cmake
foreach(v CC SRC CASES)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "compile_fail.cmake: -D${v}=... is required")
  endif()
endforeach()
set(file ${SRC}/tests/compile/devmem_types.c)
set(failed 0)
foreach(k RANGE 0 ${CASES})
  execute_process(
    COMMAND ${CC} -std=c11 -fsyntax-only -D_GNU_SOURCE -I${SRC} -DDEVMEM_CASE=${k} ${file}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(k EQUAL 0)
    if(NOT rc EQUAL 0)
      message(SEND_ERROR "case 0 (the calls written right) does not compile:\n${out}")
      set(failed 1)
    else()
      message(STATUS "case 0: compiles")
    endif()
  elseif(rc EQUAL 0)
    message(SEND_ERROR "case ${k} compiles: a host pointer passes for device memory (or the reverse)")
    set(failed 1)
  elseif(NOT out MATCHES "incompatible" OR NOT out MATCHES "devmem|devf32")
    message(SEND_ERROR "case ${k} fails, but not for device memory's types:\n${out}")
    set(failed 1)
  else()
    string(REGEX MATCH "error: [^\n]*" first "${out}")
    message(STATUS "case ${k}: refused (${first})")
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "device memory's types: see above")
endif()
